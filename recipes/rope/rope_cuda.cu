// The rotary embedding's execute stage on a GPU: a block per row, a thread
// per pair of values. The table made at instantiation is on the host; it
// reaches the kernel by value, as an argument of each launch.
#include <cuda_runtime.h>

#include "rope.h"

__global__ void RopeKernel(const float* x, const int* positions, float* y, int64_t heads,
                           int64_t head_dim, Frequencies frequencies) {
  const int64_t row = blockIdx.x;
  const float position = static_cast<float>(positions[row / heads]);
  for (int64_t i = threadIdx.x; i < head_dim / 2; i += blockDim.x) {
    float s, c;
    sincosf(position * frequencies.inverse[i], &s, &c);
    const float a = x[row * head_dim + 2 * i], b = x[row * head_dim + 2 * i + 1];
    y[row * head_dim + 2 * i] = a * c - b * s;
    y[row * head_dim + 2 * i + 1] = a * s + b * c;
  }
}

static ffi::Error RopeCuda(cudaStream_t stream, RopeTable* table, ffi::Buffer<ffi::F32> x,
                           ffi::Buffer<ffi::S32> positions, ffi::ResultBuffer<ffi::F32> y) {
  auto rows = RopeRows(*table, x.dimensions(), positions.element_count(), y->element_count());
  if (rows.has_error()) return rows.error();
  if (*rows == 0) return ffi::Error::Success();
  if (*rows > 2147483647) {  // a block per row: the grid holds 2^31 - 1
    return ffi::Error::InvalidArgument("rope: more than 2^31 - 1 rows");
  }
  RopeKernel<<<static_cast<unsigned>(*rows), 64, 0, stream>>>(
      x.typed_data(), positions.typed_data(), y->typed_data(), x.dimensions()[1],
      table->head_dim, table->frequencies);
  if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return ffi::Error::Internal(cudaGetErrorString(error));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(RopeExecuteCuda, RopeCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::State<RopeTable>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
