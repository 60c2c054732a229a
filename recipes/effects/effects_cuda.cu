// The side-effect recipe's CUDA handler: it logs its tag on the host when
// XLA enqueues the call, and a one-thread kernel writes the tag as the result.
#include <cuda_runtime.h>

#include "effects.h"

__global__ void WriteTag(int* done, int tag) { *done = tag; }

static ffi::Error LogCuda(cudaStream_t stream, ffi::AnyBuffer, ffi::Buffer<ffi::S32> after,
                          int32_t tag, ffi::ResultBuffer<ffi::S32> done) {
  if (after.element_count() != 1 || done->element_count() != 1) {
    return ffi::Error::InvalidArgument("log_event: after and done must be int32 scalars");
  }
  LogEvent(tag);
  WriteTag<<<1, 1, 0, stream>>>(done->typed_data(), tag);
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return ffi::Error::Internal(cudaGetErrorString(error));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(LogEventCuda, LogCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Attr<int32_t>("tag")
                                  .Ret<ffi::Buffer<ffi::S32>>());
