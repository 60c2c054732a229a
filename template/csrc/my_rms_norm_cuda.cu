// my_rms_norm on an NVIDIA GPU: a block of threads per row. Simple, correct,
// and far from the memory bandwidth limit (the book's chapter 8 says how to
// get there).
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

__global__ void ForwardKernel(const float* x, const float* w, float* y, float* inv_rms,
                              int64_t n, double eps) {
  const float* row = x + blockIdx.x * n;
  float squares = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) squares += row[j] * row[j];
  const float inv = rsqrtf(BlockSum(squares) / n + static_cast<float>(eps));
  if (threadIdx.x == 0) inv_rms[blockIdx.x] = inv;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) y[blockIdx.x * n + j] = row[j] * inv * w[j];
}

__global__ void DxKernel(const float* dy, const float* inv_rms, const float* x, const float* w,
                         float* dx, int64_t n) {
  const int64_t start = blockIdx.x * n;
  float gwx = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) gwx += dy[start + j] * w[j] * x[start + j];
  const float mean_gwx = BlockSum(gwx) / n, inv = inv_rms[blockIdx.x];
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    dx[start + j] = inv * (dy[start + j] * w[j] - x[start + j] * inv * inv * mean_gwx);
  }
}

// A thread per column adds up dy * x * inv_rms over the rows.
__global__ void DweightKernel(const float* dy, const float* inv_rms, const float* x,
                              float* dweight, int64_t rows, int64_t n) {
  const int64_t j = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (j >= n) return;
  float sum = 0;
  for (int64_t r = 0; r < rows; ++r) sum += dy[r * n + j] * x[r * n + j] * inv_rms[r];
  dweight[j] = sum;
}

ffi::Error LaunchError() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? ffi::Error::Success()
                              : ffi::Error::Internal(cudaGetErrorString(error));
}

ffi::Error Forward(cudaStream_t stream, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> weight,
                   double eps, ffi::ResultBuffer<ffi::F32> y, ffi::ResultBuffer<ffi::F32> inv_rms) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, &rows, &n); error.failure()) return error;
  if (rows == 0) return ffi::Error::Success();
  ForwardKernel<<<rows, kThreads, 0, stream>>>(x.typed_data(), weight.typed_data(),
                                               y->typed_data(), inv_rms->typed_data(), n, eps);
  return LaunchError();
}

ffi::Error Backward(cudaStream_t stream, ffi::Buffer<ffi::F32> dy, ffi::Buffer<ffi::F32> inv_rms,
                    ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> weight,
                    ffi::ResultBuffer<ffi::F32> dx, ffi::ResultBuffer<ffi::F32> dweight) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, &rows, &n); error.failure()) return error;
  if (rows > 0) {
    DxKernel<<<rows, kThreads, 0, stream>>>(dy.typed_data(), inv_rms.typed_data(),
                                            x.typed_data(), weight.typed_data(),
                                            dx->typed_data(), n);
  }
  DweightKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      dy.typed_data(), inv_rms.typed_data(), x.typed_data(), dweight->typed_data(), rows, n);
  return LaunchError();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormForwardCuda, Forward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // weight
                                  .Attr<double>("eps")
                                  .Ret<ffi::Buffer<ffi::F32>>()  // y
                                  .Ret<ffi::Buffer<ffi::F32>>());  // inv_rms

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormBackwardCuda, Backward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // inv_rms
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // weight
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dx
                                  .Ret<ffi::Buffer<ffi::F32>>());  // dweight

}  // namespace my_ops
