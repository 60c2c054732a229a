// Copy bandwidth by size: cudaMemcpyAsync device to device and a 16-byte
// grid-stride copy kernel, 20 back-to-back copies per CUDA-event pair,
// median of 21 (event_timing.cuh). GB/s counts read + write.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "event_timing.cuh"
__global__ void Copy(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) b[i] = a[i];
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (size_t mib : {4, 8, 16, 32, 64, 256, 1024}) {
    size_t bytes = mib << 20; void *a, *b; cudaMalloc(&a, bytes); cudaMalloc(&b, bytes);
    cudaMemset(a, 1, bytes);
    double m = TimeUs([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
    size_t n = bytes / 16;
    double k = TimeUs([&] { Copy<<<std::min<size_t>((n + 255) / 256, sms * 8), 256>>>((const uint4*)a, (uint4*)b, n); });
    printf("%5zu MiB: memcpy %7.1f us %5.0f GB/s | kernel %7.1f us %5.0f GB/s\n", mib, m, 2.0 * bytes / m / 1e3, k, 2.0 * bytes / k / 1e3);
    cudaFree(a); cudaFree(b);
  }
}
