// RMS norm kernels for inputs small enough for the whole GPU to hold at
// once, in rows too long for one cluster: such as the seed tutorial's 32
// rows of 512 x 512 bfloat16 values (16 MB each of x and dy).
//
// Each block takes a slice of columns across every row, so that it loads its
// slice of the weight once and, in the backward, adds up its columns' weight
// gradient itself; the rows' sums, which every block needs, meet in global
// memory:
// 1. each thread loads its vectors (one per row it takes) all at once, as
//    cp.async copies to shared memory and loads to registers, and as they
//    arrive the block adds up, for each row, its columns' part of the row's
//    sum (x * x in the forward, dy * w * x in the backward), and writes it to
//    row_sums[row][block];
// 2. the grid waits at a grid-wide barrier (a cooperative launch, which runs
//    only if all its blocks fit on the GPU at once);
// 3. every block adds up row_sums over the blocks, in the same order (a
//    warp reads a row's sums as whole lines, since every block reads them
//    at once), then writes its columns of y (forward) or of dx and dw
//    (backward).
//
// The forward (GridForwardKernel) keeps its row sums in the call's
// chunk_sums scratch and the backward (GridBackwardKernel) in its
// dweight_partials (cuda_scratch.h).
//
// The split-row kernels (rms_norm_split_rows.cu) read x, and in the
// backward dy, twice, in two or three kernels, and their second reads mostly
// miss L2. Here one kernel reads them once.
// - The backward reads the row sums as whole lines, and marks its loads of
//   x and dy as the op's last reads of them (evict first from L2), which
//   leaves in L2 what the next ops read, y and dx, rather than x and dy.
// - The forward loads each slice of the weight once per block, where the
//   shared-row forward (rms_norm_shared_rows.cu) loads the whole weight in
//   every cluster: it wins for float32 rows and for the forward + backward,
//   though not always for a 16-bit forward alone.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

// Where a thread's vectors lie. Block b takes column vectors b * columns ...
// b * columns + columns - 1 of every row; thread t takes column vector
// t % columns of rows t / columns + j * groups (j < rows_per_thread), where
// groups = blockDim.x / columns. So each warp reads 512 contiguous bytes of
// a row, and the threads of a column together cover every row.
struct GridPlace {
  int columns, groups, group, column;
  bool in_row;  // the column lies within the row
  int rows, rows_per_thread;

  __device__ GridPlace(int columns_, int row_vectors, int rows_,
                       int rows_per_thread_)
      : columns(columns_),
        groups(static_cast<int>(blockDim.x) / columns_),
        group(static_cast<int>(threadIdx.x) / columns_),
        column(static_cast<int>(blockIdx.x) * columns_ +
               static_cast<int>(threadIdx.x) % columns_),
        in_row(column < row_vectors),
        rows(rows_),
        rows_per_thread(rows_per_thread_) {}
  __device__ int RowOf(int j) const { return group + j * groups; }
  // Whether the thread's vector j exists.
  __device__ bool Holds(int j) const {
    return in_row && j < rows_per_thread && RowOf(j) < rows;
  }
  // The thread's vectors, as StoreVectors reads them: one, at `column`.
  __device__ Place Vectors() const { return Place{0, 0, column, 0}; }
};

// Steps 1's end and 2, which every thread of the grid calls once the warps
// have written warp_sums[j][warp] (each warp's sum of its row j): the block's
// sum of each row r (the thread's row r / groups in group r % groups), over
// the warps of that group in order, to row_sums[r][block]; then the
// grid-wide barrier, after which every block's row sums are written.
template <int kMaxRows>
__device__ void ShareBlockRowSums(const float (&warp_sums)[kMaxRows][kGridWarps],
                                  const GridPlace& p,
                                  float* __restrict__ row_sums) {
  __syncthreads();
  const int warps_per_group = p.columns / kWarpSize;
  for (int r = threadIdx.x; r < p.rows; r += blockDim.x) {
    const int first_warp = (r % p.groups) * warps_per_group;
    float sum = 0;
    for (int k = 0; k < warps_per_group; ++k) {
      sum += warp_sums[r / p.groups][first_warp + k];
    }
    row_sums[int64_t{r} * gridDim.x + blockIdx.x] = sum;
  }
  cooperative_groups::this_grid().sync();
}

// Step 3's start: each row's total over the blocks, in order, by warp
// r % kGridWarps, handed to use(r, total) in its lane 0.
template <typename Use>
__device__ void ForEachRowTotal(const float* __restrict__ row_sums, int rows,
                                Use use) {
  const int lane = threadIdx.x % kWarpSize;
  for (int r = threadIdx.x / kWarpSize; r < rows; r += kGridWarps) {
    float sum = 0;
    const float* sums = row_sums + int64_t{r} * gridDim.x;
#pragma unroll 4  // the loads in flight together
    for (int b = lane; b < static_cast<int>(gridDim.x); b += kWarpSize) {
      sum += sums[b];
    }
    sum = WarpSum(sum);
    if (lane == 0) use(r, sum);
  }
}

template <typename T>
__global__ void __launch_bounds__(kGridThreads, 1)
    GridForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                      T* __restrict__ y, float* __restrict__ inv_rms,
                      float* __restrict__ row_sums, int rows, int row_vectors,
                      int columns, int rows_per_thread, float inverse_length,
                      float eps) {
  using P = Pack<T>;
  extern __shared__ __align__(128) float4 grid_memory[];
  __shared__ float warp_sums[kMaxGridForwardRows][kGridWarps];
  __shared__ float row_inv[kMaxGridForwardRows * kGridWarps];
  const GridPlace p(columns, row_vectors, rows, rows_per_thread);
  // Vector j >= kForwardRegisterRows in slot j - kForwardRegisterRows.
  P* slots = reinterpret_cast<P*>(grid_memory);
  auto slot = [&](int j) {
    return slots + (j - kForwardRegisterRows) * blockDim.x + threadIdx.x;
  };
  const P* xp = reinterpret_cast<const P*>(x);

  // 1. Load (row j's vector as cp.async group j), then add up the squares
  // of each row's vector as it arrives.
  P registers[kForwardRegisterRows];
#pragma unroll
  for (int j = 0; j < kMaxGridForwardRows; ++j) {
    const int64_t at_row = int64_t{p.RowOf(j)} * row_vectors + p.column;
    if (j < kForwardRegisterRows) {
      registers[j] = VectorOrZeros(p.Holds(j), xp + at_row);
    } else if (p.Holds(j)) {
      __pipeline_memcpy_async(slot(j), xp + at_row, sizeof(P));
    }
    __pipeline_commit();
  }
  auto x_of = [&](int j) {
    return j < kForwardRegisterRows ? registers[j] : *slot(j);
  };
  const P wv[1] = {
      VectorOrZeros(p.in_row, reinterpret_cast<const P*>(w) + p.column)};
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int j = 0; j < kMaxGridForwardRows; ++j) {
    __pipeline_wait_prior(kMaxGridForwardRows - 1 - j);  // row j's copy is in
    float sum = 0;
    if (p.Holds(j)) {
      const P v[1] = {x_of(j)};
      sum = SumSquares(v);
    }
    sum = WarpSum(sum);  // a warp lies within one group: same rows
    if (lane == 0 && j < rows_per_thread) warp_sums[j][warp] = sum;
  }
  ShareBlockRowSums(warp_sums, p, row_sums);  // 2. the grid-wide barrier

  // 3. Each row's inverse RMS, then the block's columns of y.
  ForEachRowTotal(row_sums, rows, [&](int r, float total) {
    const float inv = rsqrtf(total * inverse_length + eps);
    row_inv[r] = inv;
    if (blockIdx.x == 0) inv_rms[r] = inv;
  });
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kMaxGridForwardRows; ++j) {
    if (!p.Holds(j)) continue;
    const int row = p.RowOf(j);
    const P v[1] = {x_of(j)};
    StoreNormalised(v, wv, row_inv[row],
                    reinterpret_cast<P*>(y) + int64_t{row} * row_vectors,
                    row_vectors, p.Vectors());
  }
}

// Backward: rows a thread takes (one 16-byte vector of x and of dy in each).
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
  __shared__ float warp_sums[kMaxGridRows][kGridWarps];
  __shared__ float row_inv[kMaxGridRows * kGridWarps];     // inv_rms
  __shared__ float row_totals[kMaxGridRows * kGridWarps];  // mean(dy * w * x)
  const GridPlace p(columns, row_vectors, rows, rows_per_thread);
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
    const int64_t at_row = int64_t{p.RowOf(j)} * row_vectors + p.column;
    if (p.Holds(j)) CopyLastUse(slot(j), xp + at_row);
    if (j < kDyRegisterRows) {
      dy_registers[j] = VectorOrZeros<kLastUse>(p.Holds(j), dyp + at_row);
    } else if (p.Holds(j)) {
      CopyLastUse(dy_slot(j), dyp + at_row);
    }
    __pipeline_commit();
  }
  auto dy_of = [&](int j) {
    return j < kDyRegisterRows ? dy_registers[j] : *dy_slot(j);
  };
  const P wv[1] = {
      VectorOrZeros(p.in_row, reinterpret_cast<const P*>(w) + p.column)};
  for (int r = threadIdx.x; r < rows; r += blockDim.x) row_inv[r] = inv_rms[r];
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  float dwv[P::kSize] = {};
#pragma unroll
  for (int j = 0; j < kMaxGridRows; ++j) {
    __pipeline_wait_prior(kMaxGridRows - 1 - j);  // row j's copies are in
    float sum = 0;
    if (p.Holds(j)) {
      const P xv = *slot(j);
      const P dyv = dy_of(j);
      const float inv = row_inv[p.RowOf(j)];
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
  ShareBlockRowSums(warp_sums, p, row_sums);  // 2. the grid-wide barrier

  // 3. Each row's mean of dy * w * x, then the block's columns of dx.
  ForEachRowTotal(row_sums, rows, [&](int r, float total) {
    row_totals[r] = total * inverse_length;
  });
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kMaxGridRows; ++j) {
    if (!p.Holds(j)) continue;
    const int row = p.RowOf(j);
    const float inv = row_inv[row];
    const float correction = inv * inv * row_totals[row];
    const P dys[1] = {dy_of(j)};
    const P xs[1] = {*slot(j)};
    StoreInputGradient(dys, xs, wv, inv, correction,
                       reinterpret_cast<P*>(dx) + int64_t{row} * row_vectors,
                       row_vectors, p.Vectors());
  }
  // The weight gradient of the block's columns: the groups' sums, added up
  // in shared memory (the slots, no longer read) in group order.
  __syncthreads();
  float* dw_sums = reinterpret_cast<float*>(grid_memory);
#pragma unroll
  for (int e = 0; e < P::kSize; ++e) {
    dw_sums[(p.group * P::kSize + e) * columns + threadIdx.x % columns] =
        dwv[e];
  }
  __syncthreads();
  if (p.group == 0 && p.in_row) {
    P out;
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) {
      float sum = 0;
      for (int k = 0; k < p.groups; ++k) {
        sum += dw_sums[(k * P::kSize + e) * columns + threadIdx.x];
      }
      out.v[e] = Storage<T>::From(sum);
    }
    reinterpret_cast<P*>(dw)[p.column] = out;
  }
}

// Launches a plan's `kernel` cooperatively (its blocks wait for each other,
// so all of them must run at once, which the planner has checked).
template <typename Kernel, typename... Args>
ffi::Error LaunchCooperative(cudaStream_t stream, const Plan& plan,
                             Kernel kernel, const char* what, Args... args) {
  if (!AllowSharedMemory(kernel, plan.shared_bytes)) {
    return ffi::Error::Internal(std::string("gpu_ops rms_norm: ") + what +
                                ": the GPU has too little shared memory");
  }
  cudaLaunchAttribute no_cluster[1];  // plan.shape.cluster == 1
  cudaLaunchConfig_t config = LaunchConfig(plan.shape, plan.groups,
                                           plan.shared_bytes, stream, no_cluster);
  cudaLaunchAttribute cooperative[1];
  cooperative[0].id = cudaLaunchAttributeCooperative;
  cooperative[0].val.cooperative = 1;
  config.attrs = cooperative;
  config.numAttrs = 1;
  return CudaStatus(cudaLaunchKernelEx(&config, kernel, args...), what);
}

}  // namespace

int64_t GridRowsResident(Kernel kernel, DType dtype, const Shape& shape,
                         int shared_bytes) {
  return DispatchFastType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    if (kernel == Kernel::kGridForward) {
      return ResidentGroups(GridForwardKernel<T>, shape, shared_bytes);
    }
    if (kernel == Kernel::kGridBackward) {
      return ResidentGroups(GridBackwardKernel<T>, shape, shared_bytes);
    }
    return 0;
  });
}

// The plan's shape.vectors is the rows each thread takes.
ffi::Error LaunchGridRowsForward(cudaStream_t stream, const Plan& plan,
                                 const ForwardBuffers& b, RowGeometry g,
                                 double eps) {
  return DispatchFastType(PlanDType(b.x.element_type()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchCooperative(
        stream, plan, GridForwardKernel<T>, "launching the grid forward kernel",
        static_cast<const T*>(b.x.untyped_data()),
        static_cast<const T*>(b.w.untyped_data()),
        static_cast<T*>(b.y.untyped_data()),
        static_cast<float*>(b.inv_rms.untyped_data()),
        static_cast<float*>(b.chunk_sums.untyped_data()),
        static_cast<int>(g.rows),
        static_cast<int>(g.row_length / Pack<T>::kSize), plan.columns,
        plan.shape.vectors, Reciprocal(g.row_length), static_cast<float>(eps));
  });
}

ffi::Error LaunchGridRowsBackward(cudaStream_t stream, const Plan& plan,
                                  const BackwardBuffers& b, RowGeometry g) {
  return DispatchFastType(PlanDType(b.x.element_type()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchCooperative(
        stream, plan, GridBackwardKernel<T>,
        "launching the grid backward kernel",
        static_cast<const T*>(b.dy.untyped_data()),
        static_cast<const float*>(b.inv_rms.untyped_data()),
        static_cast<const T*>(b.x.untyped_data()),
        static_cast<const T*>(b.w.untyped_data()),
        static_cast<T*>(b.dx.untyped_data()),
        static_cast<T*>(b.dw.untyped_data()),
        static_cast<float*>(b.partials.untyped_data()),
        static_cast<int>(g.rows),
        static_cast<int>(g.row_length / Pack<T>::kSize), plan.columns,
        plan.shape.vectors, Reciprocal(g.row_length));
  });
}

}  // namespace gpu_ops
