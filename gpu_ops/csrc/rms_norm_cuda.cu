// RMS norm on NVIDIA GPUs.
//
// The kernels follow the structure of NVIDIA apex's fused layer norm (which
// the original JAX tutorial borrowed): a block of 4 warps per row for the
// forward and for the input gradient, and a two-stage weight gradient (partial
// sums over row segments, then a sum of the partials). Compared with that
// code they use 64-bit indexing, grid-stride loops over any number of rows,
// coalesced loads, and every launch is checked.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "dtype_dispatch.h"
#include "rms_norm_checks.h"
#include "rms_norm_handlers.h"

namespace gpu_ops {
namespace {

constexpr int kWarpSize = 32;
constexpr int kThreads = 128;  // 4 warps cooperate on one row
constexpr int kWarps = kThreads / kWarpSize;
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride loops cover the rest
constexpr int64_t kMaxGridY = 65535;

// Loading any storage type as the accumulation type A.
template <typename A>
__device__ __forceinline__ A ToAcc(float v) { return static_cast<A>(v); }
template <typename A>
__device__ __forceinline__ A ToAcc(double v) { return static_cast<A>(v); }
template <typename A>
__device__ __forceinline__ A ToAcc(__half v) {
  return static_cast<A>(__half2float(v));
}
template <typename A>
__device__ __forceinline__ A ToAcc(__nv_bfloat16 v) {
  return static_cast<A>(__bfloat162float(v));
}

// Storing an accumulator (float or double) as storage type T, rounding once.
template <typename T>
struct Storage {
  template <typename A>
  __device__ static T From(A v) { return static_cast<T>(v); }
};
template <>
struct Storage<__half> {
  __device__ static __half From(float v) { return __float2half_rn(v); }
  __device__ static __half From(double v) { return __double2half(v); }
};
template <>
struct Storage<__nv_bfloat16> {
  __device__ static __nv_bfloat16 From(float v) {
    return __float2bfloat16_rn(v);
  }
  __device__ static __nv_bfloat16 From(double v) {
    return __double2bfloat16(v);
  }
};

// Sum of v over the block; every thread gets the total. `scratch` holds one
// value per warp and is free for reuse when this returns.
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

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned GridSize(int64_t blocks_wanted, int64_t cap) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks_wanted, 1, cap));
}

ffi::Error CheckLaunch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("gpu_ops rms_norm: launching ") +
                              kernel + " failed: " +
                              cudaGetErrorString(status));
}

template <typename Fn>
ffi::Error DispatchCuda(ffi::DataType x_type, ffi::DataType w_type, Fn&& fn) {
  return DispatchFloatPair<__half, __nv_bfloat16>(x_type, w_type, fn);
}

ffi::Error ForwardCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                       ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckForwardBuffers(x, w, eps, *y, *inv_rms, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  return DispatchCuda(x.element_type(), w.element_type(), [&](auto xt, auto wt) {
    using X = typename decltype(xt)::type;
    using W = typename decltype(wt)::type;
    using A = AccumulatorFor<X>;
    ForwardKernel<X, W><<<GridSize(g.rows, kMaxBlocks), kThreads, 0, stream>>>(
        static_cast<const X*>(x.untyped_data()),
        static_cast<const W*>(w.untyped_data()),
        static_cast<W*>(y->untyped_data()),
        static_cast<A*>(inv_rms->untyped_data()), g.rows, g.row_length,
        static_cast<A>(eps));
    return CheckLaunch("the forward kernel");
  });
}

ffi::Error CheckPartials(const ffi::AnyBuffer& partials, ffi::DataType x_type,
                         RowGeometry g) {
  auto dims = partials.dimensions();
  if (partials.element_type() != InvRmsType(x_type) || dims.size() != 2 ||
      dims[0] < 1 || dims[1] != g.row_length) {
    return Invalid("dweight_partials must be a " +
                   std::string(DTypeName(InvRmsType(x_type))) +
                   " matrix (num_partials >= 1, " +
                   std::to_string(g.row_length) + "), got shape " +
                   DimsToString(dims));
  }
  return ffi::Error::Success();
}

ffi::Error BackwardCuda(cudaStream_t stream, ffi::AnyBuffer dy,
                        ffi::AnyBuffer inv_rms, ffi::AnyBuffer x,
                        ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dw,
                        ffi::Result<ffi::AnyBuffer> partials, double eps) {
  RowGeometry g;
  if (auto err = CheckBackwardBuffers(dy, inv_rms, x, w, eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckPartials(*partials, x.element_type(), g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) {  // no rows: the weight gradient is zero
    const cudaError_t status =
        cudaMemsetAsync(dw->untyped_data(), 0, dw->size_bytes(), stream);
    if (status == cudaSuccess) return ffi::Error::Success();
    return ffi::Error::Internal(std::string("gpu_ops rms_norm: ") +
                                cudaGetErrorString(status));
  }
  const int64_t num_partials = partials->dimensions()[0];
  return DispatchCuda(x.element_type(), w.element_type(), [&](auto xt, auto wt) {
    using X = typename decltype(xt)::type;
    using W = typename decltype(wt)::type;
    using A = AccumulatorFor<X>;
    const W* dy_data = static_cast<const W*>(dy.untyped_data());
    const A* inv_data = static_cast<const A*>(inv_rms.untyped_data());
    const X* x_data = static_cast<const X*>(x.untyped_data());
    A* partial_data = static_cast<A*>(partials->untyped_data());

    GradInputKernel<X, W><<<GridSize(g.rows, kMaxBlocks), kThreads, 0,
                            stream>>>(
        dy_data, inv_data, x_data, static_cast<const W*>(w.untyped_data()),
        static_cast<X*>(dx->untyped_data()), g.rows, g.row_length);
    if (auto err = CheckLaunch("the input-gradient kernel"); err.failure()) {
      return err;
    }

    const dim3 partial_grid(
        GridSize(CeilDiv(g.row_length, kWarpSize), kMaxBlocks),
        GridSize(num_partials, kMaxGridY));
    WeightGradPartialsKernel<X, W><<<partial_grid, kThreads, 0, stream>>>(
        dy_data, inv_data, x_data, partial_data, g.rows, g.row_length,
        num_partials);
    if (auto err = CheckLaunch("the weight-gradient kernel"); err.failure()) {
      return err;
    }

    SumPartialsKernel<W, A><<<GridSize(CeilDiv(g.row_length, kThreads),
                                       kMaxBlocks),
                              kThreads, 0, stream>>>(
        partial_data, static_cast<W*>(dw->untyped_data()), num_partials,
        g.row_length);
    return CheckLaunch("the weight-gradient reduction kernel");
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RmsNormForwardCuda, ForwardCuda,
    ffi::Ffi::Bind()
        .Ctx<ffi::PlatformStream<cudaStream_t>>()
        .Arg<ffi::AnyBuffer>()  // x
        .Arg<ffi::AnyBuffer>()  // weight
        .Ret<ffi::AnyBuffer>()  // y
        .Ret<ffi::AnyBuffer>()  // inv_rms
        .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RmsNormBackwardCuda, BackwardCuda,
    ffi::Ffi::Bind()
        .Ctx<ffi::PlatformStream<cudaStream_t>>()
        .Arg<ffi::AnyBuffer>()  // dy
        .Arg<ffi::AnyBuffer>()  // inv_rms
        .Arg<ffi::AnyBuffer>()  // x
        .Arg<ffi::AnyBuffer>()  // weight
        .Ret<ffi::AnyBuffer>()  // dx
        .Ret<ffi::AnyBuffer>()  // dweight
        .Ret<ffi::AnyBuffer>()  // dweight_partials (scratch)
        .Attr<double>("eps"));

}  // namespace gpu_ops
