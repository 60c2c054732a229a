// What bench_kernels.cu and graph_nesting.cu share: an XLA FFI buffer over
// device memory (the kernels' Try* entry points take ffi::AnyBuffer), and
// kernels filling bfloat16 and float32 arrays with values in [-2, 2).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"

struct Buf {
  XLA_FFI_Buffer raw;
  int64_t dims[2];
  Buf(XLA_FFI_DataType t, void* data, std::vector<int64_t> d) {
    memset(&raw, 0, sizeof(raw));
    raw.struct_size = sizeof(raw);
    raw.dtype = t; raw.data = data; raw.rank = d.size();
    for (size_t i = 0; i < d.size(); ++i) dims[i] = d[i];
    raw.dims = dims;
  }
  xla::ffi::AnyBuffer any() { return xla::ffi::AnyBuffer(&raw); }
};

__global__ void Fill(uint16_t* p, int64_t n, uint32_t seed, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
    float v = ((h & 0xffff) / 65536.0f - 0.5f) * 4;
    p[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16(v)) : 0;
  }
}
__global__ void FillF(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
    p[i] = ((h & 0xffff) / 65536.0f - 0.5f) * 4;
  }
}
