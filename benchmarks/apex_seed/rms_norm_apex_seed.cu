// The seed tutorial's RMS norm kernels, derived from NVIDIA apex's fused
// layer norm, kept as the baseline the benchmarks measure gpu_ops against
// (built only with GPU_OPS_APEX_SEED=ON, as the module gpu_ops_apex_seed):
// a block of 4 warps per row for the forward and for the input gradient,
// and a two-stage weight gradient (partial sums over row segments, then a
// sum of the partials). Compared with the seed they use 64-bit indexing,
// grid-stride loops over any number of rows and coalesced loads, and every
// launch is checked. Their handlers validate their buffers with gpu_ops'
// checks; the backward's scratch is gpu_ops' weight-gradient matrix.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "apex_seed_handlers.h"
#include "ffi/rms_norm_checks.h"
#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"

namespace gpu_ops {
namespace {

constexpr int kThreads = 128;  // 4 warps cooperate on one row
constexpr int kWarps = kThreads / kWarpSize;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest
constexpr int64_t kMaxGridY = 65535;

// The sum of v over the block: each warp adds up its 32 values with
// shuffles, the warps' sums meet in shared memory.
template <typename A>
__device__ A BlockSum(A v, A* scratch) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  A total = 0;
  for (int i = 0; i < kWarps; ++i) total += scratch[i];
  __syncthreads();
  return total;
}

template <typename X, typename W>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(const X* __restrict__ x, const W* __restrict__ w,
                  W* __restrict__ y, AccumulatorFor<X>* __restrict__ inv_rms,
                  int64_t rows, int64_t row_length, AccumulatorFor<X> eps) {
  using A = AccumulatorFor<X>;
  __shared__ A scratch[kWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const X* x_row = x + row * row_length;
    W* y_row = y + row * row_length;
    A sum_squares = 0;
    for (int64_t c = threadIdx.x; c < row_length; c += kThreads) {
      const A v = ToAcc<A>(x_row[c]);
      sum_squares += v * v;
    }
    const A inv =
        rsqrt(BlockSum(sum_squares, scratch) / static_cast<A>(row_length) +
              eps);
    for (int64_t c = threadIdx.x; c < row_length; c += kThreads) {
      y_row[c] = Storage<W>::From(ToAcc<A>(w[c]) * (inv * ToAcc<A>(x_row[c])));
    }
    if (threadIdx.x == 0) inv_rms[row] = inv;
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x)), one block per row.
template <typename X, typename W>
__global__ void __launch_bounds__(kThreads)
    GradInputKernel(const W* __restrict__ dy,
                    const AccumulatorFor<X>* __restrict__ inv_rms,
                    const X* __restrict__ x, const W* __restrict__ w,
                    X* __restrict__ dx, int64_t rows, int64_t row_length) {
  using A = AccumulatorFor<X>;
  __shared__ A scratch[kWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * row_length;
    A dot = 0;
    for (int64_t c = threadIdx.x; c < row_length; c += kThreads) {
      dot += ToAcc<A>(dy[offset + c]) * ToAcc<A>(w[c]) *
             ToAcc<A>(x[offset + c]);
    }
    const A inv = inv_rms[row];
    const A correction =
        inv * inv * BlockSum(dot, scratch) / static_cast<A>(row_length);
    for (int64_t c = threadIdx.x; c < row_length; c += kThreads) {
      const A dyw = ToAcc<A>(dy[offset + c]) * ToAcc<A>(w[c]);
      dx[offset + c] =
          Storage<X>::From(inv * (dyw - ToAcc<A>(x[offset + c]) * correction));
    }
  }
}

// partials[p, c] = sum over the rows of segment p of dy[r, c] * x[r, c] * inv[r].
// A block covers 32 columns (one per lane, so loads are coalesced); its four
// warps take every fourth row of the segment and are summed in shared memory.
template <typename X, typename W>
__global__ void __launch_bounds__(kThreads)
    WeightGradPartialsKernel(const W* __restrict__ dy,
                             const AccumulatorFor<X>* __restrict__ inv_rms,
                             const X* __restrict__ x,
                             AccumulatorFor<X>* __restrict__ partials,
                             int64_t rows, int64_t row_length,
                             int64_t num_partials) {
  using A = AccumulatorFor<X>;
  __shared__ A warp_sums[kWarps][kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t rows_per_part = (rows + num_partials - 1) / num_partials;
  for (int64_t part = blockIdx.y; part < num_partials; part += gridDim.y) {
    const int64_t begin = part * rows_per_part;
    const int64_t end = std::min(rows, begin + rows_per_part);
    for (int64_t first_col = int64_t{blockIdx.x} * kWarpSize;
         first_col < row_length; first_col += int64_t{gridDim.x} * kWarpSize) {
      const int64_t col = first_col + lane;
      A sum = 0;
      if (col < row_length) {
        for (int64_t r = begin + warp; r < end; r += kWarps) {
          const int64_t i = r * row_length + col;
          sum += ToAcc<A>(dy[i]) * ToAcc<A>(x[i]) * inv_rms[r];
        }
      }
      warp_sums[warp][lane] = sum;
      __syncthreads();
      if (warp == 0 && col < row_length) {
        A total = 0;
        for (int k = 0; k < kWarps; ++k) total += warp_sums[k][lane];
        partials[part * row_length + col] = total;
      }
      __syncthreads();
    }
  }
}

template <typename W, typename A>
__global__ void __launch_bounds__(kThreads)
    SumPartialsKernel(const A* __restrict__ partials, W* __restrict__ dw,
                      int64_t num_partials, int64_t row_length) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
       col < row_length; col += stride) {
    A total = 0;
    for (int64_t p = 0; p < num_partials; ++p) {
      total += partials[p * row_length + col];
    }
    dw[col] = Storage<W>::From(total);
  }
}

ffi::Error Forward(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                   ffi::Result<ffi::AnyBuffer> y,
                   ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckForward(ResidualForwardBuffers{x, w, *y, *inv_rms}, eps, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  return DispatchFloatPair<__half, __nv_bfloat16>(
      x.element_type(), w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        using A = AccumulatorFor<X>;
        ForwardKernel<X, W><<<GridSize(g.rows, kMaxBlocks), kThreads, 0,
                              stream>>>(
            static_cast<const X*>(x.untyped_data()),
            static_cast<const W*>(w.untyped_data()),
            static_cast<W*>(y->untyped_data()),
            static_cast<A*>(inv_rms->untyped_data()), g.rows, g.row_length,
            static_cast<A>(eps));
        return CheckLaunch("launching the forward kernel");
      });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer dy_buffer,
                    ffi::AnyBuffer inv_rms_buffer, ffi::AnyBuffer x_buffer,
                    ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                    ffi::Result<ffi::AnyBuffer> dw,
                    ffi::Result<ffi::AnyBuffer> partials_buffer, double eps) {
  RowGeometry g;
  if (auto err = CheckBackwardBuffers(dy_buffer, inv_rms_buffer, x_buffer, w,
                                      eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckPartials(*partials_buffer, x_buffer.element_type(), g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) {  // no rows: the weight gradient is zero
    return CudaStatus(
        cudaMemsetAsync(dw->untyped_data(), 0, dw->size_bytes(), stream),
        "clearing the weight gradient");
  }
  const int64_t num_partials = partials_buffer->dimensions()[0];
  return DispatchFloatPair<__half, __nv_bfloat16>(
      x_buffer.element_type(), w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        using A = AccumulatorFor<X>;
        const W* dy = static_cast<const W*>(dy_buffer.untyped_data());
        const A* inv_rms = static_cast<const A*>(inv_rms_buffer.untyped_data());
        const X* x = static_cast<const X*>(x_buffer.untyped_data());
        A* partials = static_cast<A*>(partials_buffer->untyped_data());

        GradInputKernel<X, W><<<GridSize(g.rows, kMaxBlocks), kThreads, 0,
                                stream>>>(
            dy, inv_rms, x, static_cast<const W*>(w.untyped_data()),
            static_cast<X*>(dx->untyped_data()), g.rows, g.row_length);
        if (auto err = CheckLaunch("launching the input-gradient kernel");
            err.failure()) {
          return err;
        }
        const dim3 partial_grid(
            GridSize(CeilDiv(g.row_length, kWarpSize), kMaxBlocks),
            GridSize(num_partials, kMaxGridY));
        WeightGradPartialsKernel<X, W><<<partial_grid, kThreads, 0, stream>>>(
            dy, inv_rms, x, partials, g.rows, g.row_length, num_partials);
        if (auto err = CheckLaunch("launching the weight-gradient kernel");
            err.failure()) {
          return err;
        }
        SumPartialsKernel<W, A><<<GridSize(CeilDiv(g.row_length, kThreads),
                                           kMaxBlocks),
                                  kThreads, 0, stream>>>(
            partials, static_cast<W*>(dw->untyped_data()), num_partials,
            g.row_length);
        return CheckLaunch("launching the weight-gradient reduction kernel");
      });
}

// The bindings are built in functions: nvcc cannot parse them as the
// handler macro's arguments.
auto ForwardBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // weight
      .Ret<ffi::AnyBuffer>()  // y
      .Ret<ffi::AnyBuffer>()  // inv_rms
      .Attr<double>("eps");
}

auto BackwardBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()  // dy
      .Arg<ffi::AnyBuffer>()  // inv_rms
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // weight
      .Ret<ffi::AnyBuffer>()  // dx
      .Ret<ffi::AnyBuffer>()  // dweight
      .Ret<ffi::AnyBuffer>()  // dweight_partials (scratch)
      .Attr<double>("eps");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(ApexSeedForwardCuda, Forward, ForwardBinding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(ApexSeedBackwardCuda, Backward, BackwardBinding(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace gpu_ops
