// Launch helpers for the fast kernels: cached launch queries, whether a
// kernel runs as Hopper (sm_90) code, and programmatic dependent launch.
//
// A kernel launched with LaunchDependent may start while the kernel before
// it in the stream is finishing, on Hopper and later: the GPU schedules its
// blocks once every block of the kernel before has started and called
// StartNextKernel (or exited), and WaitForPreviousKernel then waits until
// that kernel has finished and its writes are visible. What comes before the
// wait must not read what the kernel before writes, nor write what it reads.
// This hides the start of the weight-gradient sum behind the backward before
// it. The GPU tests check the results of these launches inside XLA's
// command buffers (CUDA graphs) too.
#ifndef GPU_OPS_DEPENDENT_LAUNCH_CUH_
#define GPU_OPS_DEPENDENT_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda_common.cuh"

// Everything here is inline or a template: each file that includes this
// header may use it, and the linker keeps one copy.
namespace gpu_ops {

// Looks `compute` up in a cache shared by all threads, computing it on the
// first call for `key`. Launch queries do not change while the process
// runs, and each one costs host time on every call otherwise.
template <typename Key, typename Compute>
int64_t Cached(const Key& key, Compute compute) {
  static std::mutex mutex;
  static std::map<Key, int64_t> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = known.find(key);
  if (found == known.end()) found = known.emplace(key, compute()).first;
  return found->second;
}

inline int CurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
  return device;
}

// The current GPU's SMs (0 where CUDA cannot say).
inline int CurrentSms() {
  const int device = CurrentDevice();
  return static_cast<int>(Cached(std::make_tuple(device), [&]() -> int64_t {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
        cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return sms;
  }));
}

// Whether `kernel` runs on the current GPU as code compiled for sm_90 or
// later: only then may it use Hopper's clusters and the instructions below
// (a build with sm_80 code alone compiles them out).
template <typename Kernel>
bool RunsHopperCode(Kernel kernel) {
  const int device = CurrentDevice();
  const auto key =
      std::make_tuple(reinterpret_cast<const void*>(kernel), device);
  return Cached(key, [&]() -> int64_t {
    int major = 0;
    cudaFuncAttributes attributes{};
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device) != cudaSuccess ||
        cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
      cudaGetLastError();  // a failed query only means: not Hopper code
      return 0;
    }
    return major >= 9 && attributes.ptxVersion >= 90;
  });
}

// In a kernel launched with LaunchDependent: waits until the kernel before
// it in the stream has finished and its writes are visible.
__device__ __forceinline__ void WaitForPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// In the kernel before one launched with LaunchDependent: this block no
// longer holds back the next kernel's start.
__device__ __forceinline__ void StartNextKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, 0, stream>>>(args...), allowed to start early (see
// the top of this file) where the kernel runs as Hopper code; elsewhere an
// ordinary launch, after the kernel before has finished. A failed launch is
// reported as an error naming `what`.
template <typename... Params, typename... Args>
ffi::Error LaunchDependent(cudaStream_t stream, unsigned grid, dim3 block,
                           const char* what, void (*kernel)(Params...),
                           Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute early[1];
  if (RunsHopperCode(kernel)) {
    early[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = early;
    config.numAttrs = 1;
  }
  return CudaStatus(cudaLaunchKernelEx(&config, kernel, args...), what);
}

}  // namespace gpu_ops

#endif  // GPU_OPS_DEPENDENT_LAUNCH_CUH_
