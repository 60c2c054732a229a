// Device code shared by the fast kernels: rows of whole 16-byte vectors
// (Pack), spread over threads (Shape, Place) that add up their values
// together (TeamSum), and their weight gradient's partial rows (StorePartials;
// sum_partials.cuh adds them up).
// Used by rms_norm_fast.cu (a row per thread team), rms_norm_short_rows.cu
// and rms_norm_column_slices.cu.
#ifndef GPU_OPS_FAST_KERNELS_COMMON_CUH_
#define GPU_OPS_FAST_KERNELS_COMMON_CUH_

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/row_geometry.h"
#include "kernels/sum_partials.cuh"

// Everything here is inline or a template: each file that includes this
// header may use it, and the linker keeps one copy.
namespace gpu_ops {

namespace cg = cooperative_groups;

// kValues values of T, loaded and stored as whole 16-byte vectors: one by
// default. A float32 weight beside 16-bit x takes PackBeside: the weight's
// values beside one 16-byte vector of x, two vectors of float32.
template <typename T, int kValues = 16 / sizeof(T)>
struct alignas(16) Pack {
  static_assert(kValues * sizeof(T) % 16 == 0, "whole 16-byte vectors");
  using Type = T;
  static constexpr int kSize = kValues;
  static constexpr int kWords = kValues * sizeof(T) / 16;  // 16-byte vectors
  T v[kSize];
};

// The values of a row of W (the weight; or y and dy, of its dtype or x's)
// beside one 16-byte vector of a row of x of dtype T.
template <typename T, typename W>
using PackBeside = Pack<W, Pack<T>::kSize>;

// Element e of a vector, as float. A bfloat16 value is the top half of a
// float, so it is taken from the 32-bit word that holds it (a shift or a
// mask, exact). Read as a 16-bit value, ptxas gives each of a vector's eight
// values a 32-bit register of its own, and the forward's registers, which
// decide how many blocks an SM holds, nearly double. The forward kernels read
// values this way, and so does the backward of rows that take a cluster
// (ElementOf<true>); the other backward kernels read 16-bit values, which ran
// faster for them.
template <typename T, int kValues>
__device__ __forceinline__ float Element(const Pack<T, kValues>& p, int e) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    uint32_t words[sizeof(p) / 4];
    memcpy(words, &p, sizeof(words));
    const uint32_t word = words[e / 2];
    return __uint_as_float(e % 2 == 0 ? word << 16 : word & 0xffff0000u);
  } else {
    return ToAcc<float>(p.v[e]);
  }
}

// Element e of a vector, as float: from its word (Element) with kWords, else
// read as a 16-bit value.
template <bool kWords, typename T, int kValues>
__device__ __forceinline__ float ElementOf(const Pack<T, kValues>& p, int e) {
  if constexpr (kWords) return Element(p, e);
  return ToAcc<float>(p.v[e]);
}

// Where this thread's vectors lie in a row: vector k of the thread is at
// first + k * stride, so a warp's loads are contiguous.
struct Place {
  int team;    // which of the block's teams
  int rank;    // which block of the cluster
  int first;   // first vector index in the row
  int stride;  // distance between this thread's vectors
};

// Where this thread's vectors lie: a block of shape.teams teams of
// shape.team threads, each team spread over the shape.cluster blocks of a
// cluster.
__device__ inline Place ThreadPlace(const Shape& s) {
  const int lane_in_team = threadIdx.x % s.team;
  const int rank = blockIdx.x % s.cluster;
  return {static_cast<int>(threadIdx.x / s.team), rank,
          rank * s.team * s.vectors + lane_in_team, s.team};
}

// 1 / n, rounded once: kernels multiply by it where a division would cost
// a dozen instructions for every row.
inline float Reciprocal(int64_t n) {
  return static_cast<float>(1.0 / static_cast<double>(n));
}

// Shared memory for TeamSum. Alternate calls use alternate halves, so one
// barrier per call suffices: a slot is rewritten two calls later, after
// every thread of the team has passed the barrier of the call in between,
// so after all reads of it (a team reads only its own warps' slots). (In a
// cluster, a block sends its sum for call c + 2 only once the sums of call
// c + 1 from every block have landed, and each block sends those after its
// own barrier of that call.)
struct TeamSumSlots {
  float warps[2][kMaxThreads / kWarpSize];  // each warp's sum
  // Cluster teams: every block's sum, sent by each block to every block of
  // the cluster (blocks[half][sender]), and a barrier per half that
  // completes when all of them have landed.
  float blocks[2][kMaxCluster];
  uint64_t landed[2];
};

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Before the first TeamSum of teams spread over a cluster (kClustered):
// sets up the barriers that the blocks' sums land on, in every block of the
// cluster.
template <bool kClustered>
__device__ void StartClusterSums(TeamSumSlots& slots) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (!kClustered) return;
  if (threadIdx.x == 0) {
    for (uint64_t& landed : slots.landed) {
      // One arrival per phase: this block's thread 0, with the bytes due.
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
                       SharedAddress(&landed))
                   : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cg::this_cluster().sync();  // no block sends before every barrier is set
#else
  (void)slots;
#endif
}

// Sum of the blocks' totals over the cluster, through distributed shared
// memory. Thread 0 of each block sends its block's total to every block with
// an asynchronous store (st.async) that counts its bytes on the receiving
// block's barrier; each block waits for its own barrier, then adds up what
// landed. A cluster barrier would cost a memory fence at GPU scope (it waits
// for this thread's outstanding stores to global memory) in every call.
__device__ inline float ClusterSum(float block_total, int cluster, int rank,
                                   TeamSumSlots& slots, unsigned call) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int half = call % 2;
  const uint32_t landed = SharedAddress(&slots.landed[half]);
  if (threadIdx.x == 0) {
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(landed),
        "r"(static_cast<uint32_t>(cluster * sizeof(float)))
        : "memory");
    const uint32_t slot = SharedAddress(&slots.blocks[half][rank]);
    for (int r = 0; r < cluster; ++r) {
      uint32_t remote_slot, remote_landed;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                   : "=r"(remote_slot)
                   : "r"(slot), "r"(r));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                   : "=r"(remote_landed)
                   : "r"(landed), "r"(r));
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], "
          "%1, [%2];" ::"r"(remote_slot),
          "r"(__float_as_uint(block_total)), "r"(remote_landed)
          : "memory");
    }
  }
  // This half's barrier completes its phases on calls half, half + 2, ...
  const uint32_t phase = (call / 2) % 2;
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(landed), "r"(phase)
        : "memory");
  }
  float total = 0;
  for (int r = 0; r < cluster; ++r) total += slots.blocks[half][r];
  return total;
#else
  // Clusters exist from sm_90 on; the host never asks for one otherwise.
  (void)block_total, (void)cluster, (void)rank, (void)slots, (void)call;
  __trap();
#endif
}

// After the last TeamSum of teams spread over a cluster: blocks of a cluster
// must not exit while the others may still send to their shared memory.
// A block arrives once every sum sent to it has landed, so the arrival needs
// no memory order: a relaxed one skips the fence of cg's cluster sync, which
// waits for the block's stores to global memory.
template <bool kClustered>
__device__ void LeaveCluster() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kClustered) {
    asm volatile(
        "barrier.cluster.arrive.relaxed.aligned;\n\t"
        "barrier.cluster.wait.aligned;" ::: "memory");
  }
#endif
}

// Sum of v over the row team of `at` (every thread of the team gets it).
// Every thread of the block calls it the same number of times, counting the
// calls in `calls` (which starts at 0). Each warp adds up its lanes, then
// reads the team's warp sums (one per lane) and adds those up; teams spread
// over a cluster (kClustered, s.cluster > 1) then add up the blocks' sums.
// (Kernels for teams of one block leave the cluster code out: about a third
// fewer instructions.)
template <bool kClustered>
__device__ float TeamSum(float v, const Shape& s, const Place& at,
                         TeamSumSlots& slots, unsigned& calls) {
  const int half = calls % 2;
  v = WarpSum(v);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) slots.warps[half][warp] = v;
  // Teams that share a block wait only for their own warps: a team of one
  // warp needs no barrier, larger ones take named barrier 1 + team (0 is
  // the block's; a block holds at most 8 teams of 64 or more threads).
  if (s.teams == 1) {
    __syncthreads();
  } else if (s.team == kWarpSize) {
    __syncwarp();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + at.team), "r"(s.team)
                 : "memory");
  }
  const int team_warps = s.team / kWarpSize;
  const int first = at.team * team_warps;
  float total =
      WarpSum(lane < team_warps ? slots.warps[half][first + lane] : 0.0f);
  if constexpr (kClustered) {
    total = ClusterSum(total, s.cluster, at.rank, slots, calls);
  }
  ++calls;
  return total;
}

// The pack at p if `ok`, else zeros, chosen as 32-bit words rather than
// value by value: four selects a 16-byte vector instead of one per value.
template <typename P>
__device__ __forceinline__ P VectorOrZeros(bool ok, const P* p) {
  static_assert(sizeof(P) % 16 == 0, "whole 16-byte vectors");
  uint4 words[sizeof(P) / 16];
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(P) / 16); ++i) {
    words[i] = ok ? reinterpret_cast<const uint4*>(p)[i] : make_uint4(0, 0, 0, 0);
  }
  P v;
  memcpy(&v, words, sizeof(P));
  return v;
}

// This thread's vectors of a row (of x, dy or the weight) that starts at
// `row`; zeros past its end.
template <int kVectors, typename P>
__device__ void LoadVectors(const P* __restrict__ row, int row_vectors,
                            const Place& at, P (&v)[kVectors]) {
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    v[k] = VectorOrZeros(c < row_vectors, row + c);
  }
}

// Writes this thread's vectors of a row, value(k, e) for element e of its
// vector k, into the row at `row` (vectors past its end are skipped).
template <int kVectors, typename P, typename Value>
__device__ __forceinline__ void StoreVectors(P* __restrict__ row,
                                             int row_vectors, const Place& at,
                                             Value value) {
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    if (c < row_vectors) {
      P out;
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        out.v[e] = Storage<typename P::Type>::From(value(k, e));
      }
      row[c] = out;
    }
  }
}

// The sum of the squares of a thread's values of one row.
template <typename P, int kVectors>
__device__ __forceinline__ float SumSquares(const P (&v)[kVectors]) {
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) {
      const float value = Element(v[k], e);
      sum += value * value;
    }
  }
  return sum;
}

// Writes this thread's vectors of y = w * (inv * x) into the row at `y`
// (the weight's values beside each vector of x in PW, y's in PY), with the
// weight's vectors held in registers (wv)...
template <int kVectors, typename P, typename PW, typename PY>
__device__ void StoreNormalised(const P (&xv)[kVectors],
                                const PW (&wv)[kVectors], float inv,
                                PY* __restrict__ y, int row_vectors,
                                const Place& at) {
  static_assert(P::kSize == PW::kSize && P::kSize == PY::kSize, "values beside x's");
  StoreVectors<kVectors>(y, row_vectors, at, [&](int k, int e) {
    return Element(wv[k], e) * (inv * Element(xv[k], e));
  });
}

// ... or loaded from the weight's row (from L1 or L2), each vector just
// before the store that needs it, so that none holds registers before.
template <typename PW>
struct LateWeight {
  const PW* __restrict__ row;
};

template <int kVectors, typename P, typename PW, typename PY>
__device__ void StoreNormalised(const P (&xv)[kVectors], LateWeight<PW> w, float inv,
                                PY* __restrict__ y, int row_vectors, const Place& at) {
  static_assert(P::kSize == PW::kSize && P::kSize == PY::kSize, "values beside x's");
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    if (c < row_vectors) {
      const PW wk = w.row[c];
      PY out;
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        out.v[e] = Storage<typename PY::Type>::From(Element(wk, e) * (inv * Element(xv[k], e)));
      }
      y[c] = out;
    }
  }
}

// Writes this thread's vectors of dx = inv * (dy*w - x * correction) into
// the row at `dx` (correction = inv^2 * mean(dy*w*x)), reading values with
// ElementOf<kWords>.
template <bool kWords = false, int kVectors, typename P, typename PW, typename PY>
__device__ void StoreInputGradient(const PY (&dyv)[kVectors],
                                   const P (&xv)[kVectors],
                                   const PW (&wv)[kVectors], float inv,
                                   float correction, P* __restrict__ dx,
                                   int row_vectors, const Place& at) {
  StoreVectors<kVectors>(dx, row_vectors, at, [&](int k, int e) {
    const float dyw = ElementOf<kWords>(dyv[k], e) * ElementOf<kWords>(wv[k], e);
    return inv * (dyw - ElementOf<kWords>(xv[k], e) * correction);
  });
}

// Writes this thread's weight-gradient sums dw (for its vectors of the row)
// into `partial`, one float32 row of the partial-sum matrix.
template <int kVectors, int kSize>
__device__ void StorePartials(const float (&dw)[kVectors][kSize],
                              float* __restrict__ partial, int row_vectors,
                              const Place& at) {
  static_assert(kSize % 4 == 0, "a vector's sums are whole float4s");
  float4* out = reinterpret_cast<float4*>(partial);
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
    const int c = at.first + k * at.stride;
    if (c < row_vectors) {
#pragma unroll
      for (int q = 0; q < kSize / 4; ++q) {
        out[c * (kSize / 4) + q] = make_float4(
            dw[k][4 * q], dw[k][4 * q + 1], dw[k][4 * q + 2], dw[k][4 * q + 3]);
      }
    }
  }
}

// Launch settings for `blocks` blocks (or clusters of blocks) of `shape`
// with `shared_bytes` of dynamic shared memory.
inline cudaLaunchConfig_t LaunchConfig(const Shape& shape, int64_t blocks,
                                       int shared_bytes, cudaStream_t stream,
                                       cudaLaunchAttribute* cluster_dims) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks * shape.cluster));
  config.blockDim = dim3(static_cast<unsigned>(shape.teams * shape.team));
  config.dynamicSmemBytes = static_cast<size_t>(shared_bytes);
  config.stream = stream;
  if (shape.cluster > 1) {
    cluster_dims->id = cudaLaunchAttributeClusterDimension;
    cluster_dims->val.clusterDim.x = static_cast<unsigned>(shape.cluster);
    cluster_dims->val.clusterDim.y = 1;
    cluster_dims->val.clusterDim.z = 1;
    config.attrs = cluster_dims;
    config.numAttrs = 1;
  }
  return config;
}

// Allows launches of `kernel` with up to `shared_bytes` of dynamic shared
// memory (beyond the default 48 KiB, a kernel must ask). The limit only ever
// goes up: lowering it for one size would fail the launches of a larger size
// whose occupancy was computed (and cached) before. False if the GPU has less.
template <typename Kernel>
bool AllowSharedMemory(Kernel kernel, int shared_bytes) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (attributes.maxDynamicSharedSizeBytes >= shared_bytes) return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           shared_bytes) != cudaSuccess) {
    cudaGetLastError();  // more shared memory than this GPU has
    return false;
  }
  return true;
}

// How many blocks (or clusters of blocks) of `shape`, with `shared_bytes` of
// shared memory each, the GPU runs at once; 0 if it cannot run even one.
template <typename Kernel>
int64_t ResidentGroups(Kernel kernel, const Shape& shape, int shared_bytes) {
  const int device = CurrentDevice();
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel),
                                   device, shape.team * shape.teams,
                                   shape.cluster, shared_bytes);
  return Cached(key, [&]() -> int64_t {
    int groups = 0;
    if (!AllowSharedMemory(kernel, shared_bytes)) return 0;
    if (shape.cluster == 1) {
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(
              &groups, kernel, shape.team * shape.teams, shared_bytes) !=
          cudaSuccess) {
        cudaGetLastError();
        return 0;
      }
      return int64_t{groups} * CurrentSms();
    }
    cudaLaunchAttribute cluster_dims[1];
    const cudaLaunchConfig_t config =
        LaunchConfig(shape, 1, shared_bytes, nullptr, cluster_dims);
    if (cudaOccupancyMaxActiveClusters(&groups, kernel, &config) !=
        cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return groups;
  });
}

// Launches kernel<<<groups * shape.cluster, shape.teams * shape.team,
// shared_bytes>>> in clusters of shape.cluster blocks (a plan's launch: the
// planner has checked that the GPU runs such a block or cluster).
template <typename Kernel, typename... Args>
ffi::Error Launch(cudaStream_t stream, Kernel kernel, const Shape& shape,
                  int64_t groups, int shared_bytes, const char* what,
                  Args... args) {
  if (!AllowSharedMemory(kernel, shared_bytes)) {
    return ffi::Error::Internal(std::string("gpu_ops rms_norm: ") + what +
                                ": the GPU has too little shared memory");
  }
  cudaLaunchAttribute cluster_dims[1];
  const cudaLaunchConfig_t config =
      LaunchConfig(shape, groups, shared_bytes, stream, cluster_dims);
  return CudaStatus(cudaLaunchKernelEx(&config, kernel, args...), what);
}

inline bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether x is 16-bit and the weight float32 (Problem::float32_weight).
inline bool Float32Weight(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w) {
  const ffi::DataType t = x.element_type();
  return (t == ffi::DataType::F16 || t == ffi::DataType::BF16) &&
         w.element_type() == ffi::DataType::F32;
}

// Whether x, the weight and `buffers` share one of the fast kernels' dtypes
// (or x is 16-bit and the weight float32) and start on 16-byte boundaries
// (the planner's Problem::fast_dtypes).
template <typename... Buffers>
bool FastBuffers(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                 const Buffers&... buffers) {
  const ffi::DataType t = x.element_type();
  const bool fast_type = t == ffi::DataType::F16 || t == ffi::DataType::BF16 ||
                         t == ffi::DataType::F32;
  return fast_type && (w.element_type() == t || Float32Weight(x, w)) &&
         Aligned16(x.untyped_data()) && Aligned16(w.untyped_data()) &&
         (Aligned16(buffers.untyped_data()) && ...);
}

inline DType PlanDType(ffi::DataType t) {
  return t == ffi::DataType::F32    ? DType::kFloat32
         : t == ffi::DataType::BF16 ? DType::kBFloat16
                                    : DType::kFloat16;
}

// Calls fn(TypeTag<T>{}) for the element type T of `dtype`.
template <typename Fn>
decltype(auto) DispatchFastType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16: return fn(TypeTag<__half>{});
    case DType::kBFloat16: return fn(TypeTag<__nv_bfloat16>{});
    case DType::kFloat32: break;
  }
  return fn(TypeTag<float>{});
}

// Calls fn(TypeTag<T>{}, TypeTag<W>{}, TypeTag<Y>{}) for x's element type T,
// the weight's W and Y, that of `out` (y, or dy): W is T, or float with
// 16-bit x (Float32Weight); Y is W, or T (the caller's out_dtype).
template <typename Fn>
decltype(auto) DispatchRowTypes(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                                const ffi::AnyBuffer& out, Fn&& fn) {
  const bool float32_weight = Float32Weight(x, w);
  return DispatchFastType(PlanDType(x.element_type()), [&](auto t) {
    using T = typename decltype(t)::type;
    if constexpr (sizeof(T) == 2) {
      if (float32_weight) {
        return DispatchOutput<T, float>(x.element_type(), out.element_type(), [&](auto y) {
          return fn(t, TypeTag<float>{}, y);
        });
      }
    }
    return fn(t, t, t);
  });
}

// Calls fn(std::integral_constant<int, vectors>{}) for vectors a power of two
// from 1 to kMax (a plan's vectors per thread, as a template argument).
template <int kMax, typename Fn>
decltype(auto) DispatchVectors(int vectors, Fn&& fn) {
  if constexpr (kMax > 1) {
    if (vectors < kMax) return DispatchVectors<kMax / 2>(vectors, std::forward<Fn>(fn));
  }
  return fn(std::integral_constant<int, kMax>{});
}

}  // namespace gpu_ops

#endif  // GPU_OPS_FAST_KERNELS_COMMON_CUH_
