// Helpers shared by the CUDA kernels: conversions between the storage types
// and the accumulation type, grid sizes and error reporting (the launch
// shapes' arithmetic is the planner's: rms_norm_plan.h).
#ifndef GPU_OPS_CUDA_COMMON_CUH_
#define GPU_OPS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "plan/rms_norm_plan.h"
#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

namespace ffi = xla::ffi;

// Loading any storage type as the accumulation type A.
template <typename A>
__device__ __forceinline__ A ToAcc(float v) { return static_cast<A>(v); }
template <typename A>
__device__ __forceinline__ A ToAcc(double v) { return static_cast<A>(v); }
template <typename A>
__device__ __forceinline__ A ToAcc(__half v) {
  return static_cast<A>(__half2float(v));
}
template <typename A>
__device__ __forceinline__ A ToAcc(__nv_bfloat16 v) {
  return static_cast<A>(__bfloat162float(v));
}

// Storing an accumulator (float or double) as storage type T, rounding once.
template <typename T>
struct Storage {
  template <typename A>
  __device__ static T From(A v) { return static_cast<T>(v); }
};
template <>
struct Storage<__half> {
  __device__ static __half From(float v) { return __float2half_rn(v); }
  __device__ static __half From(double v) { return __double2half(v); }
};
template <>
struct Storage<__nv_bfloat16> {
  __device__ static __nv_bfloat16 From(float v) {
    return __float2bfloat16_rn(v);
  }
  __device__ static __nv_bfloat16 From(double v) {
    return __double2bfloat16(v);
  }
};

// The sum of v over the warp's 32 threads, on every thread.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

inline unsigned GridSize(int64_t blocks_wanted, int64_t cap) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks_wanted, 1, cap));
}

inline ffi::Error CudaStatus(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("gpu_ops rms_norm: ") + what +
                              " failed: " + cudaGetErrorString(status));
}

// The error of the last kernel launch, if any.
inline ffi::Error CheckLaunch(const char* kernel) {
  return CudaStatus(cudaGetLastError(), kernel);
}

// The weight gradient of a backward over no rows: zero, with no kernel to
// write it.
inline ffi::Error ClearWeightGradient(cudaStream_t stream, ffi::AnyBuffer dw) {
  return CudaStatus(cudaMemsetAsync(dw.untyped_data(), 0, dw.size_bytes(), stream),
                    "clearing the weight gradient");
}

}  // namespace gpu_ops

#endif  // GPU_OPS_CUDA_COMMON_CUH_
