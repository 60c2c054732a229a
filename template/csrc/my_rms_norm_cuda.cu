// my_rms_norm on an NVIDIA GPU: a block of threads per row. Simple, correct,
// and far from the memory bandwidth limit (the book's chapter 8 says how to
// get there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "my_rms_norm.h"

namespace my_ops {
namespace {

constexpr int kThreads = 256;

// The sum of v over the block's threads, in every thread.
__device__ float BlockSum(float v) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float total = partial[0];
  __syncthreads();  // partial is reused by the next call
  return total;
}

// The kernels are templates over T, the storage type (float, __half or
// __nv_bfloat16); every sum and product is in float.
template <typename T>
__global__ void ForwardKernel(const T* x, const T* w, T* y, float* inv_rms, int64_t n,
                              double eps) {
  const T* row = x + blockIdx.x * n;
  float squares = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    squares += static_cast<float>(row[j]) * static_cast<float>(row[j]);
  }
  const float inv = rsqrtf(BlockSum(squares) / n + static_cast<float>(eps));
  if (threadIdx.x == 0) inv_rms[blockIdx.x] = inv;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    y[blockIdx.x * n + j] = static_cast<T>(static_cast<float>(row[j]) * inv *
                                           static_cast<float>(w[j]));
  }
}

// dx: a block per row, as in the forward.
template <typename T>
__global__ void DxKernel(const T* dy, const float* inv_rms, const T* x, const T* w, T* dx,
                         int64_t n) {
  const int64_t start = blockIdx.x * n;
  float gwx = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    gwx += static_cast<float>(dy[start + j]) * static_cast<float>(w[j]) *
           static_cast<float>(x[start + j]);
  }
  const float mean_gwx = BlockSum(gwx) / n, inv = inv_rms[blockIdx.x];
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float g = static_cast<float>(dy[start + j]), xj = static_cast<float>(x[start + j]);
    const float dxj = inv * (g * static_cast<float>(w[j]) - xj * inv * inv * mean_gwx);
    dx[start + j] = static_cast<T>(dxj);
  }
}

// A thread per column adds up dy * x * inv_rms over the rows.
template <typename T>
__global__ void DweightKernel(const T* dy, const float* inv_rms, const T* x, T* dweight,
                              int64_t rows, int64_t n) {
  const int64_t j = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (j >= n) return;
  float sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sum += static_cast<float>(dy[r * n + j]) * static_cast<float>(x[r * n + j]) * inv_rms[r];
  }
  dweight[j] = static_cast<T>(sum);
}

ffi::Error LaunchError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? ffi::Error::Success()
                              : ffi::Error::Internal(cudaGetErrorString(error));
}

ffi::Error Forward(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer weight, double eps,
                   ffi::Result<ffi::AnyBuffer> y, ffi::ResultBuffer<ffi::F32> inv_rms) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, *inv_rms, {*y}, {}, &rows, &n); error.failure()) {
    return error;
  }
  if (rows == 0) return ffi::Error::Success();
  return ByDtype<__half, __nv_bfloat16>(x.element_type(), [&](auto type) {
    using T = decltype(type);
    ForwardKernel<<<rows, kThreads, 0, stream>>>(x.reinterpret_data<T>(),
                                                 weight.reinterpret_data<T>(),
                                                 y->reinterpret_data<T>(), inv_rms->typed_data(),
                                                 n, eps);
    return LaunchError();
  });
}

ffi::Error Backward(cudaStream_t stream, ffi::AnyBuffer dy, ffi::Buffer<ffi::F32> inv_rms,
                    ffi::AnyBuffer x, ffi::AnyBuffer weight, ffi::Result<ffi::AnyBuffer> dx,
                    ffi::Result<ffi::AnyBuffer> dweight) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, inv_rms, {dy, *dx}, {*dweight}, &rows, &n);
      error.failure()) {
    return error;
  }
  return ByDtype<__half, __nv_bfloat16>(x.element_type(), [&](auto type) {
    using T = decltype(type);
    if (rows > 0) {
      DxKernel<<<rows, kThreads, 0, stream>>>(dy.reinterpret_data<T>(), inv_rms.typed_data(),
                                              x.reinterpret_data<T>(),
                                              weight.reinterpret_data<T>(),
                                              dx->reinterpret_data<T>(), n);
    }
    // With no rows this writes zeros, the weight gradient of no rows; with
    // no columns there is nothing to write (and a grid of no blocks is an
    // error).
    if (n > 0) {
      DweightKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
          dy.reinterpret_data<T>(), inv_rms.typed_data(), x.reinterpret_data<T>(),
          dweight->reinterpret_data<T>(), rows, n);
    }
    return LaunchError();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormForwardCuda, Forward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Attr<double>("eps")
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::Buffer<ffi::F32>>());  // inv_rms

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormBackwardCuda, Backward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // inv_rms
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>());  // dweight

}  // namespace my_ops
