// The general kernels: every dtype pair (x and the weight may differ, and
// float64 is accumulated in float64), every row length and any alignment.
// They take what the fast kernels do not (the planner's kGeneral path), and
// the forward with a residual add of rows the fast residual kernel does not
// hold. A block takes a row, and then every gridDim.x-th row after it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

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

// y = w * x / sqrt(mean(x * x) + eps), with A the accumulation type: float
// for 16- and 32-bit x, double for float64, and y of Y, the weight's dtype or
// x's (out_dtype). With kResidual, x is first
// replaced by x + residual, rounded to x's dtype once and stored in `sum`
// (the norm is of that rounded sum, as jnp computes rms_norm(x + residual)).
// The second sweep reads back x, or the sum a thread has itself just
// stored, which comes from L1 or L2 rather than memory.
template <typename X, typename W, typename Y, bool kResidual>
__global__ void __launch_bounds__(kGeneralMaxThreads)
    GeneralForwardKernel(const X* __restrict__ x, const W* __restrict__ w,
                         Y* __restrict__ y,
                         AccumulatorFor<X>* __restrict__ inv_rms,
                         int64_t rows, int64_t row_length, double eps,
                         const X* __restrict__ residual, X* __restrict__ sum) {
  using A = AccumulatorFor<X>;
  __shared__ A warp_sums[kGeneralMaxThreads / kWarpSize];
  const X* source = kResidual ? sum : x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * row_length;
    A squares = 0;
    for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) {
      X v = x[base + c];
      if constexpr (kResidual) {
        v = Storage<X>::From(ToAcc<A>(v) + ToAcc<A>(residual[base + c]));
        sum[base + c] = v;
      }
      const A a = ToAcc<A>(v);
      squares += a * a;
    }
    const A total = BlockSum(squares, warp_sums);
    const A inv = A(1) / sqrt(total / A(row_length) + A(eps));
    for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) {
      y[base + c] =
          Storage<Y>::From(ToAcc<A>(w[c]) * (inv * ToAcc<A>(source[base + c])));
    }
    if (threadIdx.x == 0) inv_rms[row] = inv;
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x)) for each row of the block,
// and the block's share of the weight gradient, sum over its rows of
// dy*x*inv, in its own row of `partials` (so no other block writes there).
// dy is of Y, y's dtype.
template <typename X, typename W, typename Y>
__global__ void __launch_bounds__(kGeneralMaxThreads)
    GeneralBackwardKernel(const Y* __restrict__ dy,
                          const AccumulatorFor<X>* __restrict__ inv_rms,
                          const X* __restrict__ x, const W* __restrict__ w,
                          X* __restrict__ dx,
                          AccumulatorFor<X>* __restrict__ partials,
                          int64_t rows, int64_t row_length) {
  using A = AccumulatorFor<X>;
  __shared__ A warp_sums[kGeneralMaxThreads / kWarpSize];
  A* partial = partials + int64_t{blockIdx.x} * row_length;
  for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) partial[c] = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * row_length;
    A dot = 0;
    for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) {
      dot += ToAcc<A>(dy[base + c]) * ToAcc<A>(w[c]) * ToAcc<A>(x[base + c]);
    }
    const A inv = inv_rms[row];
    const A correction = inv * inv * BlockSum(dot, warp_sums) / A(row_length);
    // Each thread keeps to the columns it zeroed above.
    for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) {
      const A xv = ToAcc<A>(x[base + c]);
      const A dyv = ToAcc<A>(dy[base + c]);
      dx[base + c] = Storage<X>::From(inv * (dyv * ToAcc<A>(w[c]) - xv * correction));
      partial[c] += dyv * xv * inv;
    }
  }
}

// dw[c] = the sum of column c of the blocks' partial rows.
template <typename W, typename A>
__global__ void SumPartialsKernel(const A* __restrict__ partials,
                                  W* __restrict__ dw, int64_t num_partials,
                                  int64_t row_length) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
       c < row_length; c += stride) {
    A total = 0;
    for (int64_t p = 0; p < num_partials; ++p) total += partials[p * row_length + c];
    dw[c] = Storage<W>::From(total);
  }
}

// A thread for every four values of a row, in whole warps, up to 512.
int GeneralThreads(int64_t row_length) {
  const int64_t wanted = CeilDiv(row_length, int64_t{4});
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(wanted, int64_t{kWarpSize}) * kWarpSize,
                                              kWarpSize, kGeneralMaxThreads));
}

}  // namespace

ffi::Error GeneralForward(cudaStream_t stream, const ResidualForwardBuffers& b,
                          RowGeometry g, double eps) {
  const unsigned blocks = GridSize(g.rows, kMaxGrid);
  const int threads = GeneralThreads(g.row_length);
  return DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        return DispatchOutput<X, W>(b.x.element_type(), b.y.element_type(), [&](auto yt) {
          using Y = typename decltype(yt)::type;
          const auto launch = [&](auto kernel, const X* residual, X* sum) {
            kernel<<<blocks, threads, 0, stream>>>(
                static_cast<const X*>(b.x.untyped_data()),
                static_cast<const W*>(b.w.untyped_data()),
                static_cast<Y*>(b.y.untyped_data()),
                static_cast<AccumulatorFor<X>*>(b.inv_rms.untyped_data()), g.rows,
                g.row_length, eps, residual, sum);
            return CheckLaunch("GeneralForwardKernel");
          };
          if (b.residual == nullptr) {
            return launch(GeneralForwardKernel<X, W, Y, false>, nullptr, nullptr);
          }
          return launch(GeneralForwardKernel<X, W, Y, true>,
                        static_cast<const X*>(b.residual->untyped_data()),
                        static_cast<X*>(b.sum->untyped_data()));
        });
      });
}

ffi::Error GeneralBackward(cudaStream_t stream, const BackwardBuffers& b,
                           RowGeometry g) {
  const int64_t num_partials = b.partials.dimensions()[0];
  const int threads = GeneralThreads(g.row_length);
  const ffi::Error err = DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        using A = AccumulatorFor<X>;
        A* partials = static_cast<A*>(b.partials.untyped_data());
        return DispatchOutput<X, W>(b.x.element_type(), b.dy.element_type(), [&](auto yt) {
          using Y = typename decltype(yt)::type;
          // One block per partial row: the backward's scratch has at most
          // 1024 (cuda_scratch.h).
          GeneralBackwardKernel<X, W, Y><<<static_cast<unsigned>(num_partials), threads,
                                           0, stream>>>(
              static_cast<const Y*>(b.dy.untyped_data()),
              static_cast<const A*>(b.inv_rms.untyped_data()),
              static_cast<const X*>(b.x.untyped_data()),
              static_cast<const W*>(b.w.untyped_data()),
              static_cast<X*>(b.dx.untyped_data()), partials, g.rows, g.row_length);
          return CheckLaunch("GeneralBackwardKernel");
        });
      });
  if (err.failure()) return err;
  return SumPartials(stream, b.partials, b.dw, g);
}

ffi::Error SumPartials(cudaStream_t stream, const ffi::AnyBuffer& partials,
                       const ffi::AnyBuffer& dw, RowGeometry g) {
  const int64_t num_partials = partials.dimensions()[0];
  const auto launch = [&](auto accumulator) {
    using A = typename decltype(accumulator)::type;
    return DispatchFloat<__half, __nv_bfloat16>(dw.element_type(), [&](auto wt) {
      using W = typename decltype(wt)::type;
      constexpr int kSumThreads = 256;
      SumPartialsKernel<W, A><<<GridSize(CeilDiv(g.row_length, int64_t{kSumThreads}),
                                         kMaxGrid),
                                kSumThreads, 0, stream>>>(
          static_cast<const A*>(partials.untyped_data()),
          static_cast<W*>(dw.untyped_data()), num_partials, g.row_length);
      return CheckLaunch("SumPartialsKernel");
    });
  };
  return partials.element_type() == ffi::DataType::F64 ? launch(TypeTag<double>{})
                                                      : launch(TypeTag<float>{});
}

}  // namespace gpu_ops
