// The polynomial on a GPU, over float32 or bfloat16: one kernel, templated
// on the storage type, computes in float32; the handler's switch picks it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "polynomial.h"

__device__ float ToFloat(float x) { return x; }
__device__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ T FromFloat(float y);
template <> __device__ float FromFloat<float>(float y) { return y; }
template <> __device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float y) {
  return __float2bfloat16_rn(y);
}

template <typename T>
__global__ void PolynomialKernel(const T* x, T* y, int64_t n, Polynomial polynomial) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = FromFloat<T>(polynomial(ToFloat(x[i])));
  }
}

template <typename T>
static void Launch(cudaStream_t stream, const ffi::AnyBuffer& x, ffi::AnyBuffer& y,
                   const Polynomial& polynomial) {
  const int64_t n = x.element_count();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  PolynomialKernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<const T*>(x.untyped_data()), static_cast<T*>(y.untyped_data()), n, polynomial);
}

static ffi::Error PolynomialCuda(cudaStream_t stream, ffi::AnyBuffer x,
                                 ffi::Span<const float> coefficients, ffi::Dictionary clip,
                                 ffi::Result<ffi::AnyBuffer> y) {
  ffi::ErrorOr<Polynomial> polynomial = ReadPolynomial(coefficients, clip);
  if (polynomial.has_error()) return polynomial.error();
  if (ffi::Error error = CheckLike(x, *y); error.failure()) return error;
  if (x.element_count() == 0) return ffi::Error::Success();
  switch (x.element_type()) {
    case ffi::DataType::F32: Launch<float>(stream, x, *y, *polynomial); break;
    case ffi::DataType::BF16: Launch<__nv_bfloat16>(stream, x, *y, *polynomial); break;
    default: return UnsupportedDtype();
  }
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return ffi::Error::Internal(cudaGetErrorString(error));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PolynomialCudaHandler, PolynomialCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const float>>("coefficients")
                                  .Attr<ffi::Dictionary>("clip")
                                  .Ret<ffi::AnyBuffer>());
