// The RMS norm backward of inputs small enough for the whole GPU to hold at
// once, in rows too long for one cluster: such as the seed tutorial's 32
// rows of 512 x 512 bfloat16 values (16 MB each of x and dy).
//
// The split-row backward (rms_norm_split_rows.cu) reads x and dy twice, in
// three kernels, and its second reads mostly miss L2: on an H200, ncu counted
// 25 of its 34 MB from DRAM (benchmarks/kernel_variants/h200_split_order.log).
// Here one kernel reads them once. Each block takes a slice of columns
// across every row, so that it adds up its columns' weight gradient itself;
// the rows' sums, which every block needs, meet in global memory:
// 1. each thread loads its vectors of x into shared memory (cp.async) and of
//    dy into registers and shared memory, marked as the op's last reads of
//    them (evict first from L2); as they arrive, it adds up its columns'
//    weight gradient, and the block, for each row, dy * w * x over its
//    columns; it writes those sums to row_sums[row][block];
// 2. the grid waits at a grid-wide barrier (a cooperative launch, which runs
//    only if all its blocks fit on the GPU at once);
// 3. every block adds up row_sums over the blocks, in the same order (a
//    warp reads a row's sums as whole lines, since every block reads them
//    at once), then computes and writes its dx, and its columns of dw.
// row_sums lives in the call's dweight_partials scratch (cuda_scratch.h),
// which holds far more than the blocks * rows floats this takes.
// In CUDA-event timings on an H200, this took the seed shape's bfloat16
// backward from 29.6 µs (split rows) to 23.0 µs
// (benchmarks/kernel_variants/h200_grid_backward.log), and reading the row
// sums as whole lines from 24.0 to 21.5 µs (h200_row_sums.log).
// The evict-first marks leave in L2 what the next ops read, y and dx,
// rather than x and dy, whose last reader in a step of the benchmark's
// chain is this kernel: the seed shape's bfloat16 forward + backward went
// from 36.2 to 31.1 µs at the JAX level on an H200 (h200_last_use.log).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "cuda_common.cuh"
#include "fast_kernels_common.cuh"
#include "rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

constexpr int kGridThreads = 1024;
// Rows a thread takes (one 16-byte vector of x and of dy in each). The
// vectors of x go to shared memory, and those of dy to registers up to
// kDyRegisterRows (12 of the 64 registers a thread of a 1024-thread block
// has; with 4 or more, ptxas spilled in the bfloat16 kernel), the rest to
// shared memory: up to 13 vectors, 208 KiB a block.
constexpr int kMaxGridRows = 8;
constexpr int kDyRegisterRows = 3;

// Shared memory for rows_per_thread rows: x's and dy's slots, which then hold
// the weight-gradient sums of the thread groups (kSize floats a thread).
template <typename T>
int GridSharedBytes(int rows_per_thread) {
  const int slots =
      rows_per_thread + std::max(0, rows_per_thread - kDyRegisterRows);
  return std::max(slots * kGridThreads * 16,
                  kGridThreads * Pack<T>::kSize * static_cast<int>(sizeof(float)));
}

// Block b takes column vectors b * columns ... b * columns + columns - 1;
// thread t takes column vector t % columns of rows t / columns + j * groups
// (j < rows_per_thread), where groups = blockDim.x / columns. So each warp
// reads 512 contiguous bytes of a row, and the threads of a column together
// cover every row.
template <typename T>
__global__ void __launch_bounds__(kGridThreads, 1)
    GridBackwardKernel(const T* __restrict__ dy,
                       const float* __restrict__ inv_rms,
                       const T* __restrict__ x, const T* __restrict__ w,
                       T* __restrict__ dx, T* __restrict__ dw,
                       float* __restrict__ row_sums, int rows,
                       int row_vectors, int columns, int rows_per_thread,
                       float inverse_length) {
  using P = Pack<T>;
  extern __shared__ __align__(128) float4 grid_memory[];
  constexpr int kMaxRows = kMaxGridRows * kGridThreads / kWarpSize;
  __shared__ float warp_sums[kMaxGridRows][kGridThreads / kWarpSize];
  __shared__ float row_inv[kMaxRows];     // inv_rms
  __shared__ float row_totals[kMaxRows];  // mean(dy * w * x)
  const int groups = blockDim.x / columns;
  const int group = threadIdx.x / columns;
  const int column = blockIdx.x * columns + threadIdx.x % columns;
  const bool in_row = column < row_vectors;
  const Place at{0, 0, column, 0};
  auto row_of = [&](int j) { return group + j * groups; };
  auto holds = [&](int j) {
    return in_row && j < rows_per_thread && row_of(j) < rows;
  };
  // The thread's slots: x's vector j in slot j, dy's (j >= kDyRegisterRows)
  // in slot rows_per_thread + j - kDyRegisterRows.
  P* slots = reinterpret_cast<P*>(grid_memory);
  auto slot = [&](int k) { return slots + k * blockDim.x + threadIdx.x; };
  auto dy_slot = [&](int j) {
    return slot(rows_per_thread + j - kDyRegisterRows);
  };
  const P* dyp = reinterpret_cast<const P*>(dy);
  const P* xp = reinterpret_cast<const P*>(x);

  // 1. Load (row j's vectors as cp.async group j), then, as each row's
  // arrive, add up its dy * w * x and the weight gradient dy * x * inv.
  P dy_registers[kDyRegisterRows];
#pragma unroll
  for (int j = 0; j < kMaxGridRows; ++j) {
    const int64_t at_row = int64_t{row_of(j)} * row_vectors + column;
    if (holds(j)) CopyLastUse(slot(j), xp + at_row);
    if (j < kDyRegisterRows) {
      dy_registers[j] = VectorOrZeros<kLastUse>(holds(j), dyp + at_row);
    } else if (holds(j)) {
      CopyLastUse(dy_slot(j), dyp + at_row);
    }
    __pipeline_commit();
  }
  auto dy_of = [&](int j) {
    return j < kDyRegisterRows ? dy_registers[j] : *dy_slot(j);
  };
  const P wv[1] = {VectorOrZeros(in_row, reinterpret_cast<const P*>(w) + column)};
  for (int r = threadIdx.x; r < rows; r += blockDim.x) row_inv[r] = inv_rms[r];
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  float dwv[P::kSize] = {};
#pragma unroll
  for (int j = 0; j < kMaxGridRows; ++j) {
    __pipeline_wait_prior(kMaxGridRows - 1 - j);  // row j's copies are in
    float sum = 0;
    if (holds(j)) {
      const P xv = *slot(j);
      const P dyv = dy_of(j);
      const float inv = row_inv[row_of(j)];
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        const float dy_x = ToAcc<float>(dyv.v[e]) * ToAcc<float>(xv.v[e]);
        sum += dy_x * ToAcc<float>(wv[0].v[e]);
        dwv[e] += dy_x * inv;
      }
    }
    sum = WarpSum(sum);  // a warp lies within one group: same rows
    if (lane == 0 && j < rows_per_thread) warp_sums[j][warp] = sum;
  }
  __syncthreads();
  // The block's sum of row r (group r % groups, the thread's row r / groups),
  // over the warps of that group, in order.
  const int warps_per_group = columns / kWarpSize;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int first_warp = (r % groups) * warps_per_group;
    float sum = 0;
    for (int k = 0; k < warps_per_group; ++k) {
      sum += warp_sums[r / groups][first_warp + k];
    }
    row_sums[int64_t{r} * gridDim.x + blockIdx.x] = sum;
  }

  // 2. Every block's row sums are written.
  cooperative_groups::this_grid().sync();

  // 3. Row r's total, over the blocks in order, by warp r % 32.
  for (int r = warp; r < rows; r += blockDim.x / kWarpSize) {
    float sum = 0;
    const float* sums = row_sums + int64_t{r} * gridDim.x;
#pragma unroll 4  // the loads in flight together
    for (int b = lane; b < static_cast<int>(gridDim.x); b += kWarpSize) {
      sum += sums[b];
    }
    sum = WarpSum(sum);
    if (lane == 0) row_totals[r] = sum * inverse_length;  // the mean
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kMaxGridRows; ++j) {
    if (!holds(j)) continue;
    const int row = row_of(j);
    const float inv = row_inv[row];
    const float correction = inv * inv * row_totals[row];
    const P dys[1] = {dy_of(j)};
    const P xs[1] = {*slot(j)};
    StoreInputGradient(dys, xs, wv, inv, correction,
                       reinterpret_cast<P*>(dx) + int64_t{row} * row_vectors,
                       row_vectors, at);
  }
  // The weight gradient of the block's columns: the groups' sums, added up
  // in shared memory (the slots, no longer read) in group order.
  __syncthreads();
  float* dw_sums = reinterpret_cast<float*>(grid_memory);
#pragma unroll
  for (int e = 0; e < P::kSize; ++e) {
    dw_sums[(group * P::kSize + e) * columns + threadIdx.x % columns] = dwv[e];
  }
  __syncthreads();
  if (group == 0 && in_row) {
    P out;
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) {
      float sum = 0;
      for (int k = 0; k < groups; ++k) {
        sum += dw_sums[(k * P::kSize + e) * columns + threadIdx.x];
      }
      out.v[e] = Storage<T>::From(sum);
    }
    reinterpret_cast<P*>(dw)[column] = out;
  }
}

}  // namespace

std::optional<ffi::Error> TryGridBackward(cudaStream_t stream,
                                          const BackwardBuffers& b,
                                          RowGeometry g) {
  if (!Covered(b.x, b.w, g, b.dy, b.inv_rms, b.dx, b.dw, b.partials) ||
      b.partials.element_type() != ffi::DataType::F32 ||
      g.rows > int64_t{kMaxGridRows} * kGridThreads / kWarpSize) {
    return std::nullopt;
  }
  return DispatchFastType(
      b.x.element_type(), [&](auto tag) -> std::optional<ffi::Error> {
        using T = typename decltype(tag)::type;
        const auto kernel = GridBackwardKernel<T>;
        const int row_vectors =
            static_cast<int>(g.row_length / Pack<T>::kSize);
        const int rows = static_cast<int>(g.rows);
        // The narrowest column slices whose blocks all fit on the GPU at
        // once: the most threads per column, the fewest rows per thread.
        for (int columns = kWarpSize; columns <= kGridThreads; columns *= 2) {
          const int groups = kGridThreads / columns;
          const int rows_per_thread = static_cast<int>(CeilDiv(rows, groups));
          if (rows_per_thread > kMaxGridRows) return std::nullopt;
          const int64_t blocks = CeilDiv(row_vectors, columns);
          const int shared_bytes = GridSharedBytes<T>(rows_per_thread);
          const Shape shape{1, kGridThreads, 1, rows_per_thread};
          if (blocks > ResidentGroups(kernel, shape, shared_bytes)) continue;
          if (static_cast<int64_t>(b.partials.element_count()) <
              blocks * rows) {
            return std::nullopt;
          }
          cudaLaunchAttribute no_cluster[1];  // shape.cluster == 1
          cudaLaunchConfig_t config =
              LaunchConfig(shape, blocks, shared_bytes, stream, no_cluster);
          cudaLaunchAttribute cooperative[1];
          cooperative[0].id = cudaLaunchAttributeCooperative;
          cooperative[0].val.cooperative = 1;
          config.attrs = cooperative;
          config.numAttrs = 1;
          return CudaStatus(
              cudaLaunchKernelEx(
                  &config, kernel, static_cast<const T*>(b.dy.untyped_data()),
                  static_cast<const float*>(b.inv_rms.untyped_data()),
                  static_cast<const T*>(b.x.untyped_data()),
                  static_cast<const T*>(b.w.untyped_data()),
                  static_cast<T*>(b.dx.untyped_data()),
                  static_cast<T*>(b.dw.untyped_data()),
                  static_cast<float*>(b.partials.untyped_data()), rows,
                  row_vectors, columns, rows_per_thread,
                  Reciprocal(g.row_length)),
              "launching the grid backward kernel");
        }
        return std::nullopt;
      });
}

}  // namespace gpu_ops
