// The RMS norm backward of a few rows (decoding: a token or a few per
// sequence, or a batch of sequences).
//
// A few rows leave most of a GPU idle whatever the kernel does: the time is
// the latency of loading them, adding up and storing, and of each kernel
// launched. The row-team backward gives each block two rows in turn and
// leaves the weight gradient to a second kernel. Here one kernel does it all.
//
// Column slices (up to kMaxColumnSliceRows rows of more vectors than a block
// has threads, on GPUs with clusters): one cluster of kColumnSlices blocks
// takes every row: block b a slice of the columns, each thread one 16-byte
// vector column of all the rows, all its loads in flight at once. The blocks
// add up each row's dot product through each other's shared memory; then
// each thread writes its column of dx and, since it holds its column of
// every row, its part of the weight gradient. (The forward the same way was
// slower than a block a row.)
//
// Rows and columns (up to kMaxRowsAndColumnsRows rows): the first blocks
// take a row each, add up its dot product and write its dx; the others take
// kColumnBlockVectors vector columns of every row and add up the weight
// gradient over the rows. Neither kind needs the other's results, so both
// run at once, from one launch.
//
// Both take 16-bit x with a float32 weight too.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

// Each of the kRows rows' sum of v over the cluster, on every thread: each
// warp adds up its lanes, each block its warps, and every block then reads
// the others' block sums from their shared memory. Until a block has read
// them, no block may exit: the caller ends with FinishClusterReads().
template <int kRows>
__device__ void ClusterRowSums(float (&v)[kRows]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float warp_sums[kColumnSliceThreads / kWarpSize][kRows];
  __shared__ float block_sums[kRows];
  __shared__ float totals[kRows];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float sum = WarpSum(v[r]);
    if (lane == 0) warp_sums[warp][r] = sum;
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    float sum = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) {
      sum += warp_sums[w][threadIdx.x];
    }
    block_sums[threadIdx.x] = sum;
  }
  // The block sums are written (the block has stored nothing to global
  // memory yet, so the cluster barrier's release waits for no store).
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (threadIdx.x < kRows) {
    float sum = 0;
    for (int q = 0; q < kColumnSlices; ++q) {
      sum += cluster.map_shared_rank(block_sums, q)[threadIdx.x];
    }
    totals[threadIdx.x] = sum;
  }
  // This block has read the others' sums: it arrives, and waits for the
  // others to have read its own only before it exits.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRows; ++r) v[r] = totals[r];
#else
  (void)v;
  __trap();  // clusters exist from sm_90 on; the planner asks for none before
#endif
}

__device__ void FinishClusterReads() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// Either kernel's operands. The weight and its gradient are of dtype W: T,
// or float32 beside 16-bit x; dy of Y: W, or T (the forward's out_dtype).
template <typename T, typename W, typename Y>
struct FewRowsArgs {
  using X = T;
  using Weight = W;
  using Dy = Y;
  const Y* dy;
  const float* inv_rms;
  const T* x;
  const W* w;
  T* dx;
  W* dw;
  int rows;  // kMaxColumnSliceRows at most, or kMaxRowsAndColumnsRows
  int row_vectors;
  float inv_row_length;
};

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.
// Block b of the one cluster takes vector columns b * blockDim.x to
// (b + 1) * blockDim.x - 1 of the `rows` rows (at most kRows).
template <typename T, typename W, typename Y>
__global__ void __launch_bounds__(kColumnSliceThreads)
    ColumnSlicesBackwardKernel(FewRowsArgs<T, W, Y> a) {
  constexpr int kRows = kMaxColumnSliceRows;
  using P = Pack<T>;
  using PW = PackBeside<T, W>;
  using PY = PackBeside<T, Y>;
  const int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const bool active = c < a.row_vectors;
  const P* xp = reinterpret_cast<const P*>(a.x) + c;
  const PY* dyp = reinterpret_cast<const PY*>(a.dy) + c;
  P xv[kRows];
  PY dyv[kRows];
  float inv[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const bool ok = active && r < a.rows;
    xv[r] = VectorOrZeros(ok, xp + int64_t{r} * a.row_vectors);
    dyv[r] = VectorOrZeros(ok, dyp + int64_t{r} * a.row_vectors);
    inv[r] = r < a.rows ? a.inv_rms[r] : 0.0f;
  }
  const PW wv = VectorOrZeros(active, reinterpret_cast<const PW*>(a.w) + c);
  float dots[kRows];  // of dy * w * x
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float dot = 0;
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) {
      dot += Element(dyv[r], e) * Element(wv, e) * Element(xv[r], e);
    }
    dots[r] = dot;
  }
  ClusterRowSums(dots);
  P* dx = reinterpret_cast<P*>(a.dx) + c;
  float dw[P::kSize] = {};
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float correction = inv[r] * inv[r] * dots[r] * a.inv_row_length;
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) {
      dw[e] += Element(dyv[r], e) * Element(xv[r], e) * inv[r];
    }
    if (active && r < a.rows) {
      P out;
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        const float dyw = Element(dyv[r], e) * Element(wv, e);
        out.v[e] = Storage<T>::From(inv[r] * (dyw - Element(xv[r], e) * correction));
      }
      dx[int64_t{r} * a.row_vectors] = out;
    }
  }
  if (active) {
    PW total;
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) total.v[e] = Storage<W>::From(dw[e]);
    reinterpret_cast<PW*>(a.dw)[c] = total;
  }
  FinishClusterReads();
}

// The weight gradient's sums of a column block's threads, over the warps of
// the block: each warp's, for its kColumnBlockVectors vector columns.
template <int kSize>
struct ColumnBlockSums {
  float warps[kMaxThreads / kWarpSize][kColumnBlockVectors][kSize];
};

// dweight = sum_rows dy*x*inv.
// Each value of a column block's columns (those from vector column `first`
// on), added up over the block's warps, and stored. A block may have fewer
// threads than its columns have values (a short row's block of 32 threads,
// and 64 or 128 values): each thread takes every blockDim.x-th value. Not
// inlined: inlined, it made the kernel spill registers, which the build
// refuses.
template <typename W, int kSize>
__device__ __noinline__ void StoreColumnBlockSums(const ColumnBlockSums<kSize>& columns,
                                                  int first, int row_vectors, W* dw) {
  const int values = min(kColumnBlockVectors, row_vectors - first) * kSize;
  for (int value = threadIdx.x; value < values; value += blockDim.x) {
    float total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) {
      total += columns.warps[w][value / kSize][value % kSize];
    }
    dw[int64_t{first} * kSize + value] = Storage<W>::From(total);
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.
// Blocks 0 to rows - 1: row blockIdx.x's dx, kVectors vectors a thread.
// The others: block b takes vector columns (b - rows) * kColumnBlockVectors
// on, each of its threads one of them in every (blockDim.x /
// kColumnBlockVectors)-th row, and stores their weight gradient.
template <typename T, typename W, typename Y, int kVectors>
__global__ void __launch_bounds__(kMaxThreads)
    RowsAndColumnsBackwardKernel(FewRowsArgs<T, W, Y> a) {
  using P = Pack<T>;
  using PW = PackBeside<T, W>;
  using PY = PackBeside<T, Y>;
  __shared__ TeamSumSlots sums;
  __shared__ ColumnBlockSums<P::kSize> columns;
  if (static_cast<int>(blockIdx.x) < a.rows) {
    const int64_t row = blockIdx.x;
    const Shape shape{1, static_cast<int>(blockDim.x), 1, kVectors};
    const Place at{0, 0, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
    PY dyv[kVectors];
    P xv[kVectors];
    PW wv[kVectors];
    LoadVectors(reinterpret_cast<const PY*>(a.dy) + row * a.row_vectors, a.row_vectors, at, dyv);
    LoadVectors(reinterpret_cast<const P*>(a.x) + row * a.row_vectors, a.row_vectors, at, xv);
    LoadVectors(reinterpret_cast<const PW*>(a.w), a.row_vectors, at, wv);
    const float inv = a.inv_rms[row];
    float dot = 0;  // of dy * w * x
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        dot += Element(dyv[k], e) * Element(wv[k], e) * Element(xv[k], e);
      }
    }
    unsigned calls = 0;
    dot = TeamSum<false>(dot, shape, at, sums, calls);
    StoreInputGradient(dyv, xv, wv, inv, inv * inv * dot * a.inv_row_length,
                       reinterpret_cast<P*>(a.dx) + row * a.row_vectors, a.row_vectors, at);
    return;
  }
  const int first = (static_cast<int>(blockIdx.x) - a.rows) * kColumnBlockVectors;
  const int column = threadIdx.x % kColumnBlockVectors;
  const int c = first + column;
  const bool active = c < a.row_vectors;
  const int row_lanes = static_cast<int>(blockDim.x) / kColumnBlockVectors;
  float dw[P::kSize] = {};
#pragma unroll 4
  for (int r = static_cast<int>(threadIdx.x) / kColumnBlockVectors; r < a.rows; r += row_lanes) {
    const int64_t at = int64_t{r} * a.row_vectors + c;
    const PY dyv = VectorOrZeros(active, reinterpret_cast<const PY*>(a.dy) + at);
    const P xv = VectorOrZeros(active, reinterpret_cast<const P*>(a.x) + at);
    const float inv = a.inv_rms[r];
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) dw[e] += Element(dyv, e) * Element(xv, e) * inv;
  }
  // A warp's two halves hold the same columns of alternate rows.
  static_assert(2 * kColumnBlockVectors == kWarpSize, "two row lanes a warp");
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int e = 0; e < P::kSize; ++e) {
    dw[e] += __shfl_xor_sync(0xffffffffu, dw[e], kColumnBlockVectors);
    if (lane < kColumnBlockVectors) columns.warps[warp][lane][e] = dw[e];
  }
  __syncthreads();
  StoreColumnBlockSums(columns, first, a.row_vectors, a.dw);
}

// fn(args): either kernel's operands for a call's buffers, of their dtypes.
template <typename Fn>
ffi::Error WithFewRowsArgs(const BackwardBuffers& b, RowGeometry g, Fn&& fn) {
  return DispatchRowTypes(b.x, b.w, b.dy, [&](auto t, auto u, auto v) {
    using T = typename decltype(t)::type;
    using W = typename decltype(u)::type;
    using Y = typename decltype(v)::type;
    return fn(FewRowsArgs<T, W, Y>{
        static_cast<const Y*>(b.dy.untyped_data()),
        static_cast<const float*>(b.inv_rms.untyped_data()),
        static_cast<const T*>(b.x.untyped_data()), static_cast<const W*>(b.w.untyped_data()),
        static_cast<T*>(b.dx.untyped_data()), static_cast<W*>(b.dw.untyped_data()),
        static_cast<int>(g.rows), static_cast<int>(g.row_length / Pack<T>::kSize),
        Reciprocal(g.row_length)});
  });
}

}  // namespace

int64_t ColumnSlicesResident(DType dtype, const Shape& shape) {
  return DispatchFastType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    // (x's dtype alone: a float32 weight's instance has the same block)
    const auto kernel = ColumnSlicesBackwardKernel<T, T, T>;
    if (!RunsHopperCode(kernel)) return 0;
    return ResidentGroups(kernel, shape, 0);
  });
}

int64_t RowsAndColumnsResident(DType dtype, const Shape& shape) {
  return DispatchFastType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    // (every instance's __launch_bounds__ caps its registers alike)
    return ResidentGroups(RowsAndColumnsBackwardKernel<T, T, T, kMaxRowsAndColumnsVectors>,
                          shape, 0);
  });
}

ffi::Error LaunchRowsAndColumnsBackward(cudaStream_t stream, const Plan& plan,
                                        const BackwardBuffers& b, RowGeometry g) {
  return WithFewRowsArgs(b, g, [&](auto args) {
    using A = decltype(args);
    return DispatchVectors<kMaxRowsAndColumnsVectors>(plan.shape.vectors, [&](auto vectors) {
      constexpr int kVectors = decltype(vectors)::value;
      RowsAndColumnsBackwardKernel<typename A::X, typename A::Weight, typename A::Dy, kVectors>
          <<<static_cast<unsigned>(plan.groups), plan.shape.team, 0, stream>>>(args);
      return CheckLaunch("launching the rows-and-columns backward kernel");
    });
  });
}

ffi::Error LaunchColumnSlicesBackward(cudaStream_t stream, const Plan& plan,
                                      const BackwardBuffers& b, RowGeometry g) {
  return WithFewRowsArgs(b, g, [&](auto args) {
    using A = decltype(args);
    return Launch(stream,
                  ColumnSlicesBackwardKernel<typename A::X, typename A::Weight, typename A::Dy>,
                  plan.shape, plan.groups, 0, "launching the column-slice backward kernel", args);
  });
}

}  // namespace gpu_ops
