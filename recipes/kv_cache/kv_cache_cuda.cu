// Writing one row into the cache on a GPU. The slot is in device memory, so
// the kernel reads and clamps it; the host never waits for it.
#include <cuda_runtime.h>

#include <algorithm>

#include "kv_cache.h"

__global__ void WriteRowKernel(const float* row, const int* slot, float* out, int64_t slots,
                               int64_t width) {
  const int64_t at = ClampSlot(*slot, slots);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < width;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[at * width + i] = row[i];
  }
}

static ffi::Error WriteRowCuda(cudaStream_t stream, ffi::Buffer<ffi::F32> cache,
                               ffi::Buffer<ffi::F32> row, ffi::Buffer<ffi::S32> slot,
                               ffi::ResultBuffer<ffi::F32> out) {
  if (ffi::Error error = CheckWriteRow(cache.dimensions(), row.element_count(),
                                       slot.element_count(), out->element_count());
      error.failure()) {
    return error;
  }
  if (out->typed_data() != cache.typed_data()) {
    cudaMemcpyAsync(out->typed_data(), cache.typed_data(), cache.size_bytes(),
                    cudaMemcpyDeviceToDevice, stream);
    whole_cache_copies.fetch_add(1);
  }
  const int64_t width = cache.dimensions()[1];
  if (width > 0) {
    const int64_t blocks = std::min<int64_t>((width + 255) / 256, 1024);
    WriteRowKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        row.typed_data(), slot.typed_data(), out->typed_data(), cache.dimensions()[0], width);
  }
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return ffi::Error::Internal(cudaGetErrorString(error));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(WriteRowCudaHandler, WriteRowCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
