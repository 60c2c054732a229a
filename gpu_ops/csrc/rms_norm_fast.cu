// RMS norm kernels built for memory bandwidth: the default on NVIDIA GPUs.
//
// RMS norm does a few flops per byte, so its speed is the speed at which it
// moves bytes. Compared with the seed's kernels (rms_norm_apex_seed.cu):
// - every load and store moves 16 bytes (8 bfloat16/float16 or 4 float32);
// - a row is spread over a "row team" of threads (part of a block for short
//   rows, a whole block, or a cluster of blocks sharing their sums through
//   distributed shared memory on Hopper for very long rows), and each thread
//   keeps its part of the row in registers, so x is read from memory once;
// - the backward is one pass: a team computes dx for its rows and adds up
//   their weight gradient in registers, then writes it as one row of partial
//   sums; a small kernel adds the partial rows.
// The launch shape comes from the row length (PickShape).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <algorithm>
#include <optional>
#include <type_traits>

#include "cuda_common.cuh"
#include "dtype_dispatch.h"
#include "rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxThreads = 1024;
constexpr int kTeamBlockThreads = 512;  // block size when teams share a block
constexpr int kMaxCluster = 16;         // Hopper's non-portable cluster limit
// Registers per thread are capped at 64 by __launch_bounds__(1024): the
// forward holds up to 4 vectors of x, the backward up to 8 values each of dy,
// x and their weight-gradient sums (the build fails on a register spill).
constexpr int kMaxForwardVectors = 4;
constexpr int kMaxBackwardValues = 8;

// 16 bytes of T, loaded and stored as one vector.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// How a row is spread over threads.
struct Shape {
  int cluster;  // blocks per row (1: no cluster)
  int team;     // threads per row in one block, a multiple of 32
  int teams;    // rows a block works on at once; blockDim.x = teams * team
  int vectors;  // 16-byte vectors per thread
};

// Where this thread's vectors lie in a row: vector k of the thread is at
// first + k * stride, so a warp's loads are contiguous.
struct Place {
  int team;    // which of the block's teams
  int rank;    // which block of the cluster
  int first;   // first vector index in the row
  int stride;  // distance between this thread's vectors
};

__device__ Place ThreadPlace(const Shape& s) {
  const int lane_in_team = threadIdx.x % s.team;
  const int rank = blockIdx.x % s.cluster;
  return {static_cast<int>(threadIdx.x / s.team), rank,
          rank * s.team * s.vectors + lane_in_team, s.team};
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum of the blocks' totals over the cluster, through distributed shared
// memory. `slots` alternates between two entries so that one cluster barrier
// per row suffices: a slot is rewritten two rows later, after every block has
// passed the barrier of the row in between, so after it finished reading.
__device__ float ClusterSum(float block_total, int cluster, float* slots,
                            int& parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cg::cluster_group group = cg::this_cluster();
  if (threadIdx.x == 0) slots[parity] = block_total;
  group.sync();
  float total = 0;
  for (int r = 0; r < cluster; ++r) {
    total += *group.map_shared_rank(&slots[parity], r);
  }
  parity ^= 1;
  return total;
#else
  // Clusters exist from sm_90 on; the host never asks for one otherwise.
  (void)block_total, (void)cluster, (void)slots, (void)parity;
  __trap();
#endif
}

// Blocks of a cluster must not exit while the others may read their shared
// memory.
__device__ void LeaveCluster(const Shape& s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (s.cluster > 1) cg::this_cluster().sync();
#else
  (void)s;
#endif
}

// Sum of v over the row team (every thread of the team gets it). Every thread
// of the block calls it the same number of times.
__device__ float TeamSum(float v, const Shape& s, float* warp_sums,
                         float* cluster_slots, int& parity) {
  v = WarpSum(v);
  const int warp = threadIdx.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) warp_sums[warp] = v;
  __syncthreads();
  const int team_warps = s.team / kWarpSize;
  const int first = warp / team_warps * team_warps;
  float total = 0;
  for (int i = 0; i < team_warps; ++i) total += warp_sums[first + i];
  __syncthreads();
  if (s.cluster > 1) total = ClusterSum(total, s.cluster, cluster_slots, parity);
  return total;
}

// [forward-kernel]
template <typename T, int kVectors>
__global__ void __launch_bounds__(kMaxThreads, 1)
    FastForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                      T* __restrict__ y, float* __restrict__ inv_rms,
                      int64_t rows, int row_vectors, Shape shape,
                      float row_length, float eps) {
  using P = Pack<T>;
  __shared__ float warp_sums[kMaxThreads / kWarpSize];
  __shared__ float cluster_slots[2];
  int parity = 0;
  const Place at = ThreadPlace(shape);
  const P* xp = reinterpret_cast<const P*>(x);
  const P* wp = reinterpret_cast<const P*>(w);
  P* yp = reinterpret_cast<P*>(y);
  const int64_t row_step = int64_t{gridDim.x / shape.cluster} * shape.teams;
  for (int64_t first_row = int64_t{blockIdx.x / shape.cluster} * shape.teams;
       first_row < rows; first_row += row_step) {
    const int64_t row = first_row + at.team;
    const bool active = row < rows;
    const P* x_row = xp + row * row_vectors;
    P xv[kVectors] = {};
    float sum_squares = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (active && c < row_vectors) {
        xv[k] = x_row[c];
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          const float v = ToAcc<float>(xv[k].v[e]);
          sum_squares += v * v;
        }
      }
    }
    const float total =
        TeamSum(sum_squares, shape, warp_sums, cluster_slots, parity);
    const float inv = rsqrtf(total / row_length + eps);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (active && c < row_vectors) {
        const P wv = wp[c];
        P out;
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          out.v[e] = Storage<T>::From(ToAcc<float>(wv.v[e]) *
                                      (inv * ToAcc<float>(xv[k].v[e])));
        }
        yp[row * row_vectors + c] = out;
      }
    }
    if (active && at.rank == 0 && threadIdx.x % shape.team == 0) {
      inv_rms[row] = inv;
    }
  }
  LeaveCluster(shape);
}
// [forward-kernel-end]

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.
// Team i of the grid takes the rows of segment i (rows_per_partial of them)
// and writes their weight gradient to row i of `partials`.
template <typename T, int kVectors>
__global__ void __launch_bounds__(kMaxThreads, 1)
    FastBackwardKernel(const T* __restrict__ dy,
                       const float* __restrict__ inv_rms,
                       const T* __restrict__ x, const T* __restrict__ w,
                       T* __restrict__ dx, float* __restrict__ partials,
                       int64_t rows, int row_vectors, int64_t num_partials,
                       int64_t rows_per_partial, Shape shape,
                       float row_length) {
  using P = Pack<T>;
  __shared__ float warp_sums[kMaxThreads / kWarpSize];
  __shared__ float cluster_slots[2];
  int parity = 0;
  const Place at = ThreadPlace(shape);
  const int64_t segment =
      int64_t{blockIdx.x / shape.cluster} * shape.teams + at.team;
  const bool has_segment = segment < num_partials;
  const P* dyp = reinterpret_cast<const P*>(dy);
  const P* xp = reinterpret_cast<const P*>(x);
  P* dxp = reinterpret_cast<P*>(dx);

  const P* wp = reinterpret_cast<const P*>(w);
  float dw[kVectors][P::kSize] = {};
  for (int64_t i = 0; i < rows_per_partial; ++i) {
    const int64_t row = segment * rows_per_partial + i;
    const bool active = has_segment && row < rows;
    const float inv = active ? inv_rms[row] : 0.0f;
    const P* dy_row = dyp + row * row_vectors;
    const P* x_row = xp + row * row_vectors;
    P dyv[kVectors] = {};
    P xv[kVectors] = {};
    float dot = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (active && c < row_vectors) {
        dyv[k] = dy_row[c];
        xv[k] = x_row[c];
        const P wv = wp[c];
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          const float d = ToAcc<float>(dyv[k].v[e]);
          const float v = ToAcc<float>(xv[k].v[e]);
          dot += d * ToAcc<float>(wv.v[e]) * v;
          dw[k][e] += d * v * inv;
        }
      }
    }
    const float correction =
        inv * inv * TeamSum(dot, shape, warp_sums, cluster_slots, parity) /
        row_length;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (active && c < row_vectors) {
        const P wv = wp[c];
        P out;
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          const float dyw = ToAcc<float>(dyv[k].v[e]) * ToAcc<float>(wv.v[e]);
          out.v[e] = Storage<T>::From(
              inv * (dyw - ToAcc<float>(xv[k].v[e]) * correction));
        }
        dxp[row * row_vectors + c] = out;
      }
    }
  }
  if (has_segment) {
    float4* out = reinterpret_cast<float4*>(
        partials + segment * row_vectors * P::kSize);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (c < row_vectors) {
#pragma unroll
        for (int q = 0; q < P::kSize / 4; ++q) {
          out[c * (P::kSize / 4) + q] =
              make_float4(dw[k][4 * q], dw[k][4 * q + 1], dw[k][4 * q + 2],
                          dw[k][4 * q + 3]);
        }
      }
    }
  }
  LeaveCluster(shape);
}

// dw[c] = sum_p partials[p, c]. A block is 32 columns by 32 lanes down the
// partial rows, added up in shared memory, in a fixed order.
constexpr int kSumColumns = 32;
constexpr int kSumLanes = 32;

template <typename T>
__global__ void __launch_bounds__(kSumColumns* kSumLanes)
    SumPartialsKernel(const float* __restrict__ partials, T* __restrict__ dw,
                      int64_t num_partials, int64_t row_length) {
  __shared__ float sums[kSumLanes][kSumColumns + 1];
  const int64_t col = int64_t{blockIdx.x} * kSumColumns + threadIdx.x;
  float sum = 0;
  if (col < row_length) {
#pragma unroll 4
    for (int64_t p = threadIdx.y; p < num_partials; p += kSumLanes) {
      sum += partials[p * row_length + col];
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < row_length) {
    float total = 0;
    for (int i = 0; i < kSumLanes; ++i) total += sums[i][threadIdx.x];
    dw[col] = Storage<T>::From(total);
  }
}

// The smallest cluster, then the most vectors per thread (loads in flight are
// what keeps memory busy), that fit a row of `row_vectors` into at most 1024
// threads per block.
std::optional<Shape> PickShape(int64_t row_vectors, int max_vectors,
                               int max_cluster) {
  for (int cluster = 1; cluster <= max_cluster; cluster *= 2) {
    for (int vectors = max_vectors; vectors >= 1; vectors /= 2) {
      const int64_t threads =
          CeilDiv(CeilDiv(row_vectors, int64_t{cluster} * vectors), kWarpSize) *
          kWarpSize;
      if (threads > kMaxThreads) continue;
      const int team = static_cast<int>(threads);
      const int teams = cluster == 1 ? std::max(1, kTeamBlockThreads / team) : 1;
      return Shape{cluster, team, teams, vectors};
    }
  }
  return std::nullopt;
}

template <typename Kernel>
bool ClustersAvailable(Kernel kernel) {
  int device = 0;
  int major = 0;
  cudaFuncAttributes attributes{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) {
    cudaGetLastError();  // a failed query only means: no clusters
    return false;
  }
  return major >= 9 && attributes.binaryVersion >= 90;
}

// Launches kernel<<<blocks * shape.cluster, shape.teams * shape.team>>> in
// clusters of shape.cluster blocks. Returns nullopt if the GPU cannot hold
// such a cluster (the caller falls back to the seed's kernels).
template <typename Kernel, typename... Args>
std::optional<ffi::Error> LaunchInClusters(cudaStream_t stream, Kernel kernel,
                                           const Shape& shape, int64_t blocks,
                                           const char* what, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks * shape.cluster));
  config.blockDim = dim3(static_cast<unsigned>(shape.teams * shape.team));
  config.stream = stream;
  cudaLaunchAttribute cluster_dims[1];
  cluster_dims[0].id = cudaLaunchAttributeClusterDimension;
  cluster_dims[0].val.clusterDim.x = static_cast<unsigned>(shape.cluster);
  cluster_dims[0].val.clusterDim.y = 1;
  cluster_dims[0].val.clusterDim.z = 1;
  if (shape.cluster > 1) {
    config.attrs = cluster_dims;
    config.numAttrs = 1;
    if (shape.cluster > 8 &&
        cudaFuncSetAttribute(kernel,
                             cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) !=
            cudaSuccess ||
        clusters < 1) {
      cudaGetLastError();
      return std::nullopt;
    }
  }
  return CudaStatus(cudaLaunchKernelEx(&config, kernel, args...), what);
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The fast kernels take x and weight of one 16- or 32-bit float dtype, whole
// 16-byte vectors per row, and 16-byte aligned buffers.
template <typename... Buffers>
bool Covered(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, RowGeometry g,
             const Buffers&... buffers) {
  const ffi::DataType t = x.element_type();
  if (w.element_type() != t || t == ffi::DataType::F64) return false;
  const int64_t per_vector = 16 / ffi::ByteWidth(t);
  return g.row_length % per_vector == 0 &&
         g.row_length / per_vector <= std::numeric_limits<int>::max() &&
         Aligned16(x.untyped_data()) &&
         Aligned16(w.untyped_data()) && (Aligned16(buffers.untyped_data()) && ...);
}

// Calls fn(TypeTag<T>{}, std::integral_constant<int, V>{}) for x's dtype and
// V = vectors, a power of two up to kMaxForwardVectors.
template <typename Fn>
std::optional<ffi::Error> DispatchFast(ffi::DataType dtype, int vectors,
                                       Fn&& fn) {
  auto with_type = [&](auto tag) -> std::optional<ffi::Error> {
    switch (vectors) {
      case 1: return fn(tag, std::integral_constant<int, 1>{});
      case 2: return fn(tag, std::integral_constant<int, 2>{});
      case 4: return fn(tag, std::integral_constant<int, 4>{});
      default: return std::nullopt;
    }
  };
  switch (dtype) {
    case ffi::DataType::F16: return with_type(TypeTag<__half>{});
    case ffi::DataType::BF16: return with_type(TypeTag<__nv_bfloat16>{});
    case ffi::DataType::F32: return with_type(TypeTag<float>{});
    default: return std::nullopt;
  }
}

}  // namespace

std::optional<ffi::Error> TryFastForward(cudaStream_t stream,
                                         const ForwardBuffers& b,
                                         RowGeometry g, double eps) {
  if (!Covered(b.x, b.w, g, b.y, b.inv_rms)) return std::nullopt;
  const int64_t per_vector = 16 / ffi::ByteWidth(b.x.element_type());
  const int row_vectors = static_cast<int>(g.row_length / per_vector);
  return DispatchFast(
      b.x.element_type(), 1, [&](auto tag, auto) -> std::optional<ffi::Error> {
        using T = typename decltype(tag)::type;
        const bool clusters = ClustersAvailable(FastForwardKernel<T, 1>);
        const std::optional<Shape> shape = PickShape(
            row_vectors, kMaxForwardVectors, clusters ? kMaxCluster : 1);
        if (!shape) return std::nullopt;
        return DispatchFast(
            b.x.element_type(), shape->vectors,
            [&](auto, auto vectors) -> std::optional<ffi::Error> {
              constexpr int kVectors = decltype(vectors)::value;
              const int64_t row_groups = CeilDiv(g.rows, shape->teams);
              const int64_t blocks =
                  std::min<int64_t>(row_groups, (1 << 20) / shape->cluster);
              return LaunchInClusters(
                  stream, FastForwardKernel<T, kVectors>, *shape, blocks,
                  "launching the forward kernel",
                  static_cast<const T*>(b.x.untyped_data()),
                  static_cast<const T*>(b.w.untyped_data()),
                  static_cast<T*>(b.y.untyped_data()),
                  static_cast<float*>(b.inv_rms.untyped_data()), g.rows,
                  row_vectors, *shape, static_cast<float>(g.row_length),
                  static_cast<float>(eps));
            });
      });
}

std::optional<ffi::Error> TryFastBackward(cudaStream_t stream,
                                          const BackwardBuffers& b,
                                          RowGeometry g) {
  if (!Covered(b.x, b.w, g, b.dy, b.inv_rms, b.dx, b.dw, b.partials)) {
    return std::nullopt;
  }
  const int64_t per_vector = 16 / ffi::ByteWidth(b.x.element_type());
  const int row_vectors = static_cast<int>(g.row_length / per_vector);
  const int64_t num_partials = b.partials.dimensions()[0];
  return DispatchFast(
      b.x.element_type(), 1, [&](auto tag, auto) -> std::optional<ffi::Error> {
        using T = typename decltype(tag)::type;
        const bool clusters = ClustersAvailable(FastBackwardKernel<T, 1>);
        const std::optional<Shape> shape =
            PickShape(row_vectors, kMaxBackwardValues / Pack<T>::kSize,
                      clusters ? kMaxCluster : 1);
        if (!shape) return std::nullopt;
        float* partials = static_cast<float*>(b.partials.untyped_data());
        std::optional<ffi::Error> launched = DispatchFast(
            b.x.element_type(), shape->vectors,
            [&](auto, auto vectors) -> std::optional<ffi::Error> {
              constexpr int kVectors = decltype(vectors)::value;
              if constexpr (kVectors * Pack<T>::kSize > kMaxBackwardValues) {
                return std::nullopt;
              } else {
                return LaunchInClusters(
                    stream, FastBackwardKernel<T, kVectors>, *shape,
                    CeilDiv(num_partials, shape->teams),
                    "launching the backward kernel",
                    static_cast<const T*>(b.dy.untyped_data()),
                    static_cast<const float*>(b.inv_rms.untyped_data()),
                    static_cast<const T*>(b.x.untyped_data()),
                    static_cast<const T*>(b.w.untyped_data()),
                    static_cast<T*>(b.dx.untyped_data()), partials, g.rows,
                    row_vectors, num_partials, CeilDiv(g.rows, num_partials),
                    *shape, static_cast<float>(g.row_length));
              }
            });
        if (!launched || launched->failure()) return launched;
        const dim3 block(kSumColumns, kSumLanes);
        SumPartialsKernel<T><<<GridSize(CeilDiv(g.row_length, kSumColumns),
                                        (int64_t{1} << 31) - 1),
                               block, 0, stream>>>(
            partials, static_cast<T*>(b.dw.untyped_data()), num_partials,
            g.row_length);
        return CheckLaunch("launching the weight-gradient reduction kernel");
      });
}

}  // namespace gpu_ops
