// The forward with a residual add: y = norm(x + residual) * w, and x +
// residual itself, for the residual stream of a transformer, from one kernel.
//
// Unfused, XLA's add reads x and residual and writes their sum, and the norm
// reads that sum again: five passes over a matrix. Fused, four. Few rows and
// rows a block holds take FastResidualForwardKernel (rms_norm_fast.cu),
// which keeps the sum in registers; this general kernel takes the rest
// (every dtype pair and row length): each block takes a row, writes the sum
// as it adds up its squares, and normalises the sum it has just written,
// which its threads read back from their own stores (L1 or L2, not memory).
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

constexpr int kResidualMaxThreads = 512;

// The sum of v over the block (of whole warps), on every thread. warp_sums
// holds a value per warp; the first barrier keeps a row's sums from
// overwriting those the last row's threads may still be reading.
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

// Block b takes rows b, b + gridDim.x, ... The sum x + residual is taken in
// the accumulator type and rounded once to x's dtype (exactly as x's own
// addition rounds: the float sum of two 16-bit values is exact or rounds
// harmlessly), and the norm is of that rounded sum, as jnp computes
// rms_norm(x + residual).
template <typename X, typename W>
__global__ void ResidualForwardKernel(const X* __restrict__ x,
                                      const X* __restrict__ residual,
                                      const W* __restrict__ w,
                                      W* __restrict__ y,
                                      AccumulatorFor<X>* __restrict__ inv_rms,
                                      X* __restrict__ sum, int64_t rows,
                                      int64_t row_length, double eps) {
  using A = AccumulatorFor<X>;
  __shared__ A warp_sums[kResidualMaxThreads / kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * row_length;
    A squares = 0;
    for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) {
      const X s = Storage<X>::From(ToAcc<A>(x[base + c]) +
                                   ToAcc<A>(residual[base + c]));
      sum[base + c] = s;
      const A v = ToAcc<A>(s);
      squares += v * v;
    }
    const A total = BlockSum(squares, warp_sums);
    const A inv = A(1) / sqrt(total / A(row_length) + A(eps));
    // Each thread reads back only the values it stored itself.
    for (int64_t c = threadIdx.x; c < row_length; c += blockDim.x) {
      y[base + c] =
          Storage<W>::From(ToAcc<A>(w[c]) * (inv * ToAcc<A>(sum[base + c])));
    }
    if (threadIdx.x == 0) inv_rms[row] = inv;
  }
}

}  // namespace

ffi::Error ResidualForward(cudaStream_t stream, const ResidualForwardBuffers& b,
                           RowGeometry g, double eps) {
  // A thread for every four values, in whole warps, up to 512 threads.
  const int64_t wanted = (g.row_length + 3) / 4;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      (wanted + kWarpSize - 1) / kWarpSize * kWarpSize, kWarpSize,
      kResidualMaxThreads));
  const unsigned blocks = GridSize(g.rows, kMaxGrid);
  return DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        ResidualForwardKernel<X, W><<<blocks, threads, 0, stream>>>(
            static_cast<const X*>(b.x.untyped_data()),
            static_cast<const X*>(b.residual.untyped_data()),
            static_cast<const W*>(b.w.untyped_data()),
            static_cast<W*>(b.y.untyped_data()),
            static_cast<AccumulatorFor<X>*>(b.inv_rms.untyped_data()),
            static_cast<X*>(b.sum.untyped_data()), g.rows, g.row_length, eps);
        return CheckLaunch("ResidualForwardKernel");
      });
}

}  // namespace gpu_ops
