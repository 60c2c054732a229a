// The forward quantised to float8_e4m3fn for the next matmul: y in groups
// of kFloat8Group (128) values of a row, each group with a float32 scale,
// its largest |y| over 448, and its values y / scale, from one pass over x
// (or over x + residual, added in the same pass). Given a scale per row
// (row_scales; a tensor's one scale, broadcast), the values are y / that
// scale instead, and `scales` receives each group's largest |y|, from which
// the caller takes the tensor's for its next scale.
//
// Each block takes a row (and every gridDim.x-th after it). A warp takes a
// group: each of its 32 threads holds 4 consecutive values, so the group's
// largest |y| is one warp reduction, and the 4 float8 values a thread writes
// are one 32-bit store. Any dtype pair; the row is read twice, once for its
// sum of squares and once to normalise (from L2 for rows a block's sweep
// leaves there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/float8_warp_groups.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

constexpr float kFloat8Max = 448.0f;

// op over the warp's 32 values of v, on every lane.
template <typename V, typename Op>
__device__ V WarpReduce(V v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// With kResidual, x is first x + residual, rounded to x's dtype once and
// stored in `sum` (by other threads than those that read it back, after
// the block's barriers).
template <typename X, typename W, bool kResidual>
__global__ void __launch_bounds__(kFloat8BlockThreads)
    QuantisedForwardKernel(const X* __restrict__ x, const W* __restrict__ w,
                           uint32_t* __restrict__ values,
                           float* __restrict__ scales,
                           AccumulatorFor<X>* __restrict__ inv_rms,
                           int64_t rows, int64_t row_length, double eps,
                           const X* __restrict__ residual, X* __restrict__ sum,
                           const float* __restrict__ row_scales) {
  using A = AccumulatorFor<X>;
  __shared__ A warp_sums[kFloat8BlockWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t groups = row_length / kFloat8Group;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * row_length;
    A squares = 0;
    for (int64_t c = threadIdx.x; c < row_length; c += kFloat8BlockThreads) {
      X value = x[base + c];
      if constexpr (kResidual) {
        value = Storage<X>::From(ToAcc<A>(value) + ToAcc<A>(residual[base + c]));
        sum[base + c] = value;
      }
      const A v = ToAcc<A>(value);
      squares += v * v;
    }
    const X* x_row = (kResidual ? sum : x) + base;
    squares = WarpReduce(squares, [](A a, A b) { return a + b; });
    __syncthreads();  // the last row's sums have been read
    if (lane == 0) warp_sums[warp] = squares;
    __syncthreads();
    A total = 0;
    for (int k = 0; k < kFloat8BlockWarps; ++k) total += warp_sums[k];
    const A inv = A(1) / sqrt(total / A(row_length) + A(eps));
    if (threadIdx.x == 0) inv_rms[row] = inv;
    for (int64_t group = warp; group < groups; group += kFloat8BlockWarps) {
      const int64_t first = group * kFloat8Group + lane * kFloat8ValuesPerThread;
      float y[kFloat8ValuesPerThread];
      float largest = 0;
#pragma unroll
      for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
        y[k] = static_cast<float>(ToAcc<A>(w[first + k]) *
                                  (inv * ToAcc<A>(x_row[first + k])));
        largest = fmaxf(largest, fabsf(y[k]));
      }
      largest = WarpReduce(largest, [](float a, float b) { return fmaxf(a, b); });
      const float scale = row_scales != nullptr ? row_scales[row]
                          : largest > 0         ? largest / kFloat8Max
                                                : 1.0f;
      uint32_t word = 0;
#pragma unroll
      for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
        const uint32_t bits =
            __nv_cvt_float_to_fp8(y[k] / scale, __NV_SATFINITE, __NV_E4M3);
        word |= bits << (8 * k);  // little-endian: value k at byte k
      }
      values[(row * row_length + first) / kFloat8ValuesPerThread] = word;
      if (lane == 0) {
        scales[row * groups + group] = row_scales != nullptr ? largest : scale;
      }
    }
  }
}

}  // namespace

ffi::Error QuantisedForward(cudaStream_t stream, const QuantisedForwardBuffers& b,
                            RowGeometry g, double eps) {
  return DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        const auto launch = [&](auto kernel, const X* residual, X* sum) {
          kernel<<<GridSize(g.rows, kMaxGrid), kFloat8BlockThreads, 0, stream>>>(
              static_cast<const X*>(b.x.untyped_data()),
              static_cast<const W*>(b.w.untyped_data()),
              static_cast<uint32_t*>(b.values.untyped_data()),
              static_cast<float*>(b.scales.untyped_data()),
              static_cast<AccumulatorFor<X>*>(b.inv_rms.untyped_data()), g.rows,
              g.row_length, eps, residual, sum,
              b.row_scales == nullptr
                  ? nullptr
                  : static_cast<const float*>(b.row_scales->untyped_data()));
          return CheckLaunch("QuantisedForwardKernel");
        };
        if (b.residual == nullptr) {
          return launch(QuantisedForwardKernel<X, W, false>, nullptr, nullptr);
        }
        return launch(QuantisedForwardKernel<X, W, true>,
                      static_cast<const X*>(b.residual->untyped_data()),
                      static_cast<X*>(b.sum->untyped_data()));
      });
}

}  // namespace gpu_ops
