// The general kernels' rows: one forward and one backward kernel for every
// dtype pair, row length and alignment (rms_norm_general.cu), which the
// float8 variants run too, each with what makes it one:
// - where a thread's values of a row come from, the kernel's input: x
//   (PlainRows; with a residual add, x + residual), or float8 values with a
//   scale per group (Float8Rows, rms_norm_from_fp8.cu);
// - where the forward's y goes, its output: y in the weight's dtype or x's
//   (NormalisedOut), or float8 values with a scale per group (QuantisedOut,
//   rms_norm_fp8.cu).
// A block takes a row, then every gridDim.x-th row after it; a thread takes
// chunks of In::kValues consecutive values of it, chunk threadIdx.x, then
// every blockDim.x-th. Each sweeps its row twice, the second time from L1 or
// L2: for the sum of squares (or the backward's dot product) and to write.
// The sums are of In::Acc: float, or double for float64 x.
#ifndef GPU_OPS_GENERAL_ROWS_CUH_
#define GPU_OPS_GENERAL_ROWS_CUH_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/row_geometry.h"

// Everything here is inline or a template: each file that includes this
// header may use it, and the linker keeps one copy.
namespace gpu_ops {

constexpr int kGeneralMaxThreads = 512;

// The sum of v over the block (of whole warps), on every thread: each warp
// adds up its 32 values with shuffles, and the warps' sums meet in shared
// memory. The first barrier keeps a row's sums from overwriting those the
// last row's threads may still be reading.
template <typename A>
__device__ A BlockSum(A v, A* warp_sums) {
  constexpr unsigned kAll = 0xffffffffu;
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kAll, v, offset);
  }
  const int lane = threadIdx.x % kWarpSize;
  __syncthreads();
  if (lane == 0) warp_sums[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  A total = lane < warps ? warp_sums[lane] : A(0);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    total += __shfl_xor_sync(kAll, total, offset);
  }
  return total;
}

// Rows of x, of dtype X, in chunks of kChunk values. With kResidual, the
// first sweep (First) reads x + residual, rounded to X once, as jnp's
// x + residual is, and stores it in `sum`; the second (Read) reads it back
// from there: the norm is of that rounded sum. Each thread reads back only
// what it stored itself.
template <typename X, int kChunk, bool kResidual = false>
struct PlainRows {
  using Acc = AccumulatorFor<X>;
  static constexpr int kValues = kChunk;
  const X* __restrict__ x;
  int64_t row_length;
  const X* __restrict__ residual = nullptr;
  X* __restrict__ sum = nullptr;

  __device__ void First(int64_t row, int64_t chunk, Acc (&v)[kValues]) const {
#pragma unroll
    for (int k = 0; k < kValues; ++k) {
      const int64_t at = row * row_length + chunk * kValues + k;
      X value = x[at];
      if constexpr (kResidual) {
        value = Storage<X>::From(ToAcc<Acc>(value) + ToAcc<Acc>(residual[at]));
        sum[at] = value;
      }
      v[k] = ToAcc<Acc>(value);
    }
  }
  __device__ void Read(int64_t row, int64_t chunk, Acc (&v)[kValues]) const {
    const X* source = kResidual ? sum : x;
#pragma unroll
    for (int k = 0; k < kValues; ++k) {
      v[k] = ToAcc<Acc>(source[row * row_length + chunk * kValues + k]);
    }
  }
};

// y = w * (inv * x), in Y: the weight's dtype or x's (out_dtype).
template <typename W, typename Y>
struct NormalisedOut {
  const W* __restrict__ w;
  Y* __restrict__ y;
  int64_t row_length;

  template <typename A, int kValues>
  __device__ void Store(int64_t row, int64_t chunk, A inv, const A (&v)[kValues]) const {
#pragma unroll
    for (int k = 0; k < kValues; ++k) {
      const int64_t c = chunk * kValues + k;
      y[row * row_length + c] = Storage<Y>::From(ToAcc<A>(w[c]) * (inv * v[k]));
    }
  }
};

// fn(chunk, v) for each of this thread's chunks of a row, v its values
// (In::Read, or In::First on the forward's first sweep).
template <bool kFirst = false, typename In, typename Fn>
__device__ __forceinline__ void ForEachChunk(const In& in, int64_t row, int64_t chunks,
                                             Fn fn) {
  for (int64_t chunk = threadIdx.x; chunk < chunks; chunk += blockDim.x) {
    typename In::Acc v[In::kValues];
    if constexpr (kFirst) {
      in.First(row, chunk, v);
    } else {
      in.Read(row, chunk, v);
    }
    fn(chunk, v);
  }
}

// Each row's inverse RMS into inv_rms, and its output through `out`.
template <typename In, typename Out>
__global__ void __launch_bounds__(kGeneralMaxThreads)
    GeneralForwardKernel(In in, Out out, typename In::Acc* __restrict__ inv_rms,
                         int64_t rows, int64_t row_length, double eps) {
  using A = typename In::Acc;
  __shared__ A warp_sums[kGeneralMaxThreads / kWarpSize];
  const int64_t chunks = row_length / In::kValues;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    A squares = 0;
    ForEachChunk<true>(in, row, chunks, [&](int64_t, const A (&v)[In::kValues]) {
#pragma unroll
      for (int k = 0; k < In::kValues; ++k) squares += v[k] * v[k];
    });
    const A total = BlockSum(squares, warp_sums);
    const A inv = A(1) / sqrt(total / A(row_length) + A(eps));
    if (threadIdx.x == 0) inv_rms[row] = inv;
    ForEachChunk(in, row, chunks, [&](int64_t chunk, const A (&v)[In::kValues]) {
      out.Store(row, chunk, inv, v);
    });
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x)) (dy of DY, y's dtype; dx of
// DX) for each row of the block, and the block's share of the weight
// gradient, the sum over its rows of dy*x*inv, in its own row of `partials`
// (so no other block writes there; sum_partials.cuh adds them up).
template <typename In, typename W, typename DY, typename DX>
__global__ void __launch_bounds__(kGeneralMaxThreads)
    GeneralBackwardKernel(const DY* __restrict__ dy,
                          const typename In::Acc* __restrict__ inv_rms, In in,
                          const W* __restrict__ w, DX* __restrict__ dx,
                          typename In::Acc* __restrict__ partials, int64_t rows,
                          int64_t row_length) {
  using A = typename In::Acc;
  constexpr int kValues = In::kValues;
  __shared__ A warp_sums[kGeneralMaxThreads / kWarpSize];
  const int64_t chunks = row_length / kValues;
  A* partial = partials + int64_t{blockIdx.x} * row_length;
  // Each thread keeps to its chunks' columns in every row.
  for (int64_t chunk = threadIdx.x; chunk < chunks; chunk += blockDim.x) {
#pragma unroll
    for (int k = 0; k < kValues; ++k) partial[chunk * kValues + k] = 0;
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const DY* dy_row = dy + row * row_length;
    DX* dx_row = dx + row * row_length;
    A dot = 0;
    ForEachChunk(in, row, chunks, [&](int64_t chunk, const A (&x)[kValues]) {
#pragma unroll
      for (int k = 0; k < kValues; ++k) {
        const int64_t c = chunk * kValues + k;
        dot += ToAcc<A>(dy_row[c]) * ToAcc<A>(w[c]) * x[k];
      }
    });
    const A inv = inv_rms[row];
    const A correction = inv * inv * BlockSum(dot, warp_sums) / A(row_length);
    ForEachChunk(in, row, chunks, [&](int64_t chunk, const A (&x)[kValues]) {
#pragma unroll
      for (int k = 0; k < kValues; ++k) {
        const int64_t c = chunk * kValues + k;
        const A dyv = ToAcc<A>(dy_row[c]);
        dx_row[c] = Storage<DX>::From(inv * (dyv * ToAcc<A>(w[c]) - x[k] * correction));
        partial[c] += dyv * x[k] * inv;
      }
    });
  }
}

}  // namespace gpu_ops

#endif  // GPU_OPS_GENERAL_ROWS_CUH_
