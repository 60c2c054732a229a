// RMS norm kernels for rows too long for one thread team to hold (see
// rms_norm_fast.cu): more than 131,072 values in the forward or 65,536 in
// the backward on Hopper (a cluster of 8 blocks of 1024 threads), more than
// 16,384 / 8,192 on GPUs without clusters (float32 rows of more than 6,912
// values in the backward on an A100, whose shared memory holds no longer
// ring; the planner checks each GPU). The seed tutorial's shape, 32 rows
// of 512 x 512, is one: a row per cluster would leave most of the GPU idle.
// (Inputs the whole GPU holds at once, the seed's shape among them, go to
// rms_norm_grid_rows.cu instead, which reads them once, and in the forward
// on Hopper, other 16-bit rows of up to 262,144 values to
// rms_norm_shared_rows.cu; these kernels take the rest, such as the seed
// shape's float32 backward.)
//
// Each row is cut into chunks of kSplitThreads x kVectors 16-byte vectors,
// one block per chunk, and the work takes two passes:
// 1. ChunkSumsKernel adds up each chunk's x * x (forward) or dy * w * x
//    (backward) into one float of a scratch matrix (rows, chunks);
// 2. every block adds up the chunk sums of its row (each warp on its own, in
//    the same order, so all blocks of a row get the same total), then
//    normalises its chunk (ChunkForwardKernel) or computes its chunk of dx
//    and of the weight gradient's partial sums (ChunkBackwardKernel).
// Pass 2 starts while pass 1 finishes (dependent_launch.cuh): its blocks
// load their vectors, then wait for the chunk sums.
// The scratch matrix is the call's chunk_sums result (cuda_scratch.h), which
// exists for rows longer than kSplitRowsAbove only.
// x (and dy) are read twice; when they fit in L2 (50 MiB on an H100, 60 MiB
// on an H200; 16 MB of x for the seed's shape in bfloat16, 32 MB of x and dy
// in its backward) the second read mostly hits it. Pass 2 marks its loads
// as the op's last use of those bytes, and the orders of the passes are
// chosen so that more of it does (ChunkSumsKernel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"
#include "plan/cuda_scratch.h"

namespace gpu_ops {
namespace {

// Where this thread's vectors of chunk `chunk` lie in its row.
__device__ Place ChunkPlace(int64_t chunk, int vectors) {
  return {0, 0, static_cast<int>(chunk * kSplitThreads * vectors + threadIdx.x),
          kSplitThreads};
}

// The sum of a row's `chunks` chunk sums, in every lane of the warp.
__device__ float RowTotal(const float* __restrict__ chunk_sums, int chunks) {
  float total = 0;
  for (int i = threadIdx.x % kWarpSize; i < chunks; i += kWarpSize) {
    total += chunk_sums[i];
  }
  return WarpSum(total);
}

// chunk_sums[row * chunks + chunk] = sum over the chunk of a * a (kSquares,
// the forward: `b` and `weight` are null) or a * b * weight (the backward:
// dy * x * w). The forward loads x once: passing it as both a and b would
// have every thread load each vector twice, into twice the registers.
//
// The order of the chunks follows what the L2 holds. In a chain of ops, a
// and b are what the ops before just wrote, first row to last. Pass 2 reads
// them first to last, for the last time in the op (LoadVectors<kLastUse>),
// while it writes its result, so the lines it writes push out what it has
// read rather than what it has yet to read. The forward's pass 1 goes first
// to last too, which measured faster than last to first. The backward's
// pass 1 takes its chunks last to first, so that pass 2 starts with what
// pass 1 read last and still finds it in L2.
template <typename T, int kVectors, bool kSquares>
__global__ void __launch_bounds__(kSplitThreads)
    ChunkSumsKernel(const T* __restrict__ a, const T* __restrict__ b,
                    const T* __restrict__ weight,
                    float* __restrict__ chunk_sums, int64_t rows,
                    int row_vectors, int chunks) {
  using P = Pack<T>;
  __shared__ TeamSumSlots sums;
  unsigned calls = 0;
  const Shape block{1, kSplitThreads, 1, kVectors};
  StartNextKernel();  // pass 2 loads its vectors while this pass finishes
  for (int64_t step = blockIdx.x; step < rows * chunks; step += gridDim.x) {
    const int64_t item = kSquares ? step : rows * chunks - 1 - step;
    const int64_t row = item / chunks;
    const Place at = ChunkPlace(item % chunks, kVectors);
    P av[kVectors], bv[kVectors], wv[kVectors];
    LoadVectors(reinterpret_cast<const P*>(a) + row * row_vectors, row_vectors,
                at, av);
    if constexpr (!kSquares) {
      LoadVectors(reinterpret_cast<const P*>(b) + row * row_vectors,
                  row_vectors, at, bv);
      LoadVectors(reinterpret_cast<const P*>(weight), row_vectors, at, wv);
    }
    float sum = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        const float va = Element(av[k], e);
        if constexpr (kSquares) {
          sum += va * va;
        } else {
          sum += va * Element(bv[k], e) * Element(wv[k], e);
        }
      }
    }
    const float total = TeamSum<false>(sum, block, at, sums, calls);
    if (threadIdx.x == 0) chunk_sums[item] = total;
  }
}

// y = x * inv * w for one chunk per block; inv = rsqrt(mean(x^2) + eps).
template <typename T, int kVectors>
__global__ void __launch_bounds__(kSplitThreads)
    ChunkForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                       const float* __restrict__ chunk_sums,
                       T* __restrict__ y, float* __restrict__ inv_rms,
                       int64_t rows, int row_vectors, int chunks,
                       float row_length, float eps) {
  using P = Pack<T>;
  for (int64_t item = blockIdx.x; item < rows * chunks; item += gridDim.x) {
    const int64_t row = item / chunks;
    const int64_t chunk = item % chunks;
    const Place at = ChunkPlace(chunk, kVectors);
    P xv[kVectors], wv[kVectors];
    LoadVectors<kLastUse>(reinterpret_cast<const P*>(x) + row * row_vectors,
                          row_vectors, at, xv);
    LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);
    WaitForPreviousKernel();  // pass 1 has written the chunk sums
    const float inv = rsqrtf(
        RowTotal(chunk_sums + row * chunks, chunks) / row_length + eps);
    StoreNormalised(xv, wv, inv, reinterpret_cast<P*>(y) + row * row_vectors,
                    row_vectors, at);
    if (chunk == 0 && threadIdx.x == 0) inv_rms[row] = inv;
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x)) for one chunk of the rows of
// one segment per block (item = segment * chunks + chunk); the chunk's
// weight gradient over the segment goes to row `segment` of `partials`.
// Its loads of dy and x are their last use in the op (LoadVectors<kLastUse>),
// so that L2 keeps dx, which the next op reads. That wins where the rows fit
// in L2 and loses a little where they do not.
template <typename T, int kVectors>
__global__ void __launch_bounds__(kSplitThreads)
    ChunkBackwardKernel(const T* __restrict__ dy,
                        const float* __restrict__ inv_rms,
                        const T* __restrict__ x, const T* __restrict__ w,
                        const float* __restrict__ chunk_sums,
                        T* __restrict__ dx, float* __restrict__ partials,
                        int64_t rows, int row_vectors, int chunks,
                        int64_t num_partials, int64_t rows_per_partial,
                        float row_length) {
  using P = Pack<T>;
  StartNextKernel();  // the weight-gradient sum (SumPartials)
  for (int64_t item = blockIdx.x; item < num_partials * chunks;
       item += gridDim.x) {
    const int64_t segment = item / chunks;
    const Place at = ChunkPlace(item % chunks, kVectors);
    P wv[kVectors];
    LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);
    float dw[kVectors][P::kSize] = {};
    const int64_t end = std::min(rows, (segment + 1) * rows_per_partial);
    for (int64_t row = segment * rows_per_partial; row < end; ++row) {
      P dyv[kVectors], xv[kVectors];
      LoadVectors<kLastUse>(reinterpret_cast<const P*>(dy) + row * row_vectors,
                            row_vectors, at, dyv);
      LoadVectors<kLastUse>(reinterpret_cast<const P*>(x) + row * row_vectors,
                            row_vectors, at, xv);
      WaitForPreviousKernel();  // pass 1 has written the chunk sums
      const float inv = inv_rms[row];
      const float correction =
          inv * inv * RowTotal(chunk_sums + row * chunks, chunks) / row_length;
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          dw[k][e] += ToAcc<float>(dyv[k].v[e]) * ToAcc<float>(xv[k].v[e]) * inv;
        }
      }
      StoreInputGradient(dyv, xv, wv, inv, correction,
                         reinterpret_cast<P*>(dx) + row * row_vectors,
                         row_vectors, at);
    }
    StorePartials(dw, partials + segment * row_vectors * P::kSize,
                  row_vectors, at);
  }
}

// Blocks for `items` chunks: one each, up to the grid's limit.
unsigned Blocks(int64_t items) { return GridSize(items, kMaxGrid); }

// Rows of T cut into a plan's chunks of kSplitThreads x kVectors vectors,
// with scratch for the (rows, chunks) chunk sums.
struct Split {
  int row_vectors;
  int chunks;
  float* chunk_sums;
};

// Launches pass 1: chunk_sums = the chunk sums of a * a (the forward: x,
// with b and weight null) or of a * b * weight (the backward).
// (The handlers have checked chunk_sums' dtype and length; the check here
// keeps the kernels within it should the plan and the scratch ever disagree.)
template <typename T, int kVectors>
ffi::Error SumChunks(cudaStream_t stream, const Plan& plan,
                     const ffi::AnyBuffer& chunk_sums, RowGeometry g,
                     const T* a, const T* b, const T* weight, Split* split) {
  split->row_vectors = static_cast<int>(g.row_length / Pack<T>::kSize);
  split->chunks = plan.chunks;
  split->chunk_sums = static_cast<float*>(chunk_sums.untyped_data());
  if (plan.shape.vectors != kVectors ||
      int64_t{split->chunks} * kSplitThreads * kVectors < split->row_vectors) {
    return ffi::Error::Internal(
        "gpu_ops rms_norm: the split-row plan does not cover the rows");
  }
  if (static_cast<int64_t>(chunk_sums.element_count()) <
      g.rows * split->chunks) {
    return ffi::Error::Internal(
        "gpu_ops rms_norm: chunk_sums holds " +
        std::to_string(chunk_sums.element_count()) +
        " floats, the kernels need " + std::to_string(g.rows * split->chunks));
  }
  const auto kernel = b == nullptr ? ChunkSumsKernel<T, kVectors, true>
                                    : ChunkSumsKernel<T, kVectors, false>;
  kernel<<<Blocks(g.rows * split->chunks), kSplitThreads, 0, stream>>>(
      a, b, weight, split->chunk_sums, g.rows, split->row_vectors,
      split->chunks);
  return CheckLaunch("launching the chunk sums kernel");
}

template <typename T, int kValues>
constexpr int kVectorsOf = kValues / Pack<T>::kSize;

}  // namespace

ffi::Error LaunchSplitRowsForward(cudaStream_t stream, const Plan& plan,
                                  const ForwardBuffers& b, RowGeometry g,
                                  double eps) {
  return DispatchFastType(PlanDType(b.x.element_type()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVectors = kVectorsOf<T, kSplitForwardValues>;
    const T* x = static_cast<const T*>(b.x.untyped_data());
    Split split;
    if (auto err = SumChunks<T, kVectors>(stream, plan, b.chunk_sums, g, x,
                                          nullptr, nullptr, &split);
        err.failure()) {
      return err;
    }
    return LaunchDependent(
        stream, Blocks(g.rows * split.chunks), kSplitThreads,
        "launching the chunk forward kernel", ChunkForwardKernel<T, kVectors>,
        x, static_cast<const T*>(b.w.untyped_data()),
        static_cast<const float*>(split.chunk_sums),
        static_cast<T*>(b.y.untyped_data()),
        static_cast<float*>(b.inv_rms.untyped_data()), g.rows,
        split.row_vectors, split.chunks, static_cast<float>(g.row_length),
        static_cast<float>(eps));
  });
}

ffi::Error LaunchSplitRowsBackward(cudaStream_t stream, const Plan& plan,
                                   const BackwardBuffers& b, RowGeometry g) {
  return DispatchFastType(PlanDType(b.x.element_type()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVectors = kVectorsOf<T, kSplitBackwardValues>;
    const T* dy = static_cast<const T*>(b.dy.untyped_data());
    const T* x = static_cast<const T*>(b.x.untyped_data());
    const T* w = static_cast<const T*>(b.w.untyped_data());
    Split split;
    if (auto err = SumChunks<T, kVectors>(stream, plan, b.chunk_sums, g, dy,
                                          x, w, &split);
        err.failure()) {
      return err;
    }
    // The first plan.segments rows of the scratch matrix hold the segments'
    // partial sums.
    const int64_t segments = plan.segments;
    if (segments < 1 || segments > b.partials.dimensions()[0]) {
      return ffi::Error::Internal(
          "gpu_ops rms_norm: the split-row plan has more segments than the "
          "weight-gradient scratch has rows");
    }
    float* partials = static_cast<float*>(b.partials.untyped_data());
    if (auto err = LaunchDependent(
            stream, Blocks(segments * split.chunks), kSplitThreads,
            "launching the chunk backward kernel",
            ChunkBackwardKernel<T, kVectors>, dy,
            static_cast<const float*>(b.inv_rms.untyped_data()), x, w,
            static_cast<const float*>(split.chunk_sums),
            static_cast<T*>(b.dx.untyped_data()), partials, g.rows,
            split.row_vectors, split.chunks, segments,
            CeilDiv(g.rows, segments), static_cast<float>(g.row_length));
        err.failure()) {
      return err;
    }
    return SumPartials(stream, partials, static_cast<T*>(b.dw.untyped_data()),
                       segments, g.row_length);
  });
}

}  // namespace gpu_ops
