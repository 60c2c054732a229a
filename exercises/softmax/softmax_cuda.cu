// Row softmax on an NVIDIA GPU: a block of threads per row.
// Exercise, chapter 1: write the kernel and launch it (the solution is in
// exercises/solutions/softmax/).
#include <cuda_runtime.h>

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

constexpr int kThreads = 256;

// Combines v over the block's threads with op (a max or a sum), in every thread.
template <typename Op>
__device__ float BlockReduce(float v, Op op) {
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] = op(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  const float result = partial[0];
  __syncthreads();  // partial is reused by the next call
  return result;
}

__global__ void SoftmaxKernel(const float* x, float* y, int64_t n) {
  // TODO: block blockIdx.x takes row blockIdx.x. Each thread takes every
  // kThreads-th value: the row's largest value (BlockReduce with fmaxf),
  // the sum of expf(value - largest) (BlockReduce with +), then y.
}

static ffi::Error Softmax(cudaStream_t stream, ffi::Buffer<ffi::F32> x,
                          ffi::ResultBuffer<ffi::F32> y) {
  const auto dims = x.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument("softmax: x must have an axis");
  const int64_t n = dims.back();
  const int64_t rows = n == 0 ? 0 : x.element_count() / n;
  if (rows == 0) return ffi::Error::Success();
  if (rows > 2147483647) return ffi::Error::InvalidArgument("softmax: more than 2^31 - 1 rows");
  // TODO: launch SoftmaxKernel with a block of kThreads threads per row on
  // the stream, and return the launch's error (cudaGetLastError) if any.
  return ffi::Error(ffi::ErrorCode::kUnimplemented, "softmax_cuda.cu: TODO");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SoftmaxCuda, Softmax,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Ret<ffi::Buffer<ffi::F32>>());  // y
