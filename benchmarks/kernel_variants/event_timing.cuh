// The CUDA-event timing of bench_kernels.cu and copy_sizes.cu: after 5
// warm-up calls, 21 runs of 20 back-to-back calls of f, each run between two
// events; the median time per call in microseconds.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

inline double TimeUs(std::function<void()> f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 5; ++i) f();
  std::vector<float> t;
  for (int r = 0; r < 21; ++r) {
    cudaEventRecord(a);
    for (int i = 0; i < 20; ++i) f();
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms * 1000 / 20);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
