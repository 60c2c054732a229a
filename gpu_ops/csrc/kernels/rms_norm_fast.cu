// RMS norm kernels built for memory bandwidth: the default on NVIDIA GPUs.
//
// RMS norm does a few flops per byte, so its speed is the speed at which it
// moves bytes. Compared with the general kernels (rms_norm_general.cu), and
// the seed tutorial's they follow:
// - every load and store moves 16 bytes (8 bfloat16/float16 or 4 float32);
// - a row is spread over a "row team" of threads (part of a block for short
//   rows, a whole block, or a cluster of up to 8 blocks sharing their sums
//   through distributed shared memory on Hopper for long rows), and each
//   thread keeps its part of the row on chip, so x is read from memory once
//   (rows too long for that take the general kernels);
// - the backward is one pass: a team computes dx for its rows and adds up
//   their weight gradient in registers; a block's teams then write it as
//   one row of partial sums, and a small kernel adds the partial rows;
// - loads stay in flight: in the forward of rows a block holds, each
//   thread loads its vectors of several rows into registers at once
//   (FastForwardKernel); where a row takes a cluster, and in the
//   backward, rows stream into a ring of shared-memory
//   slots by asynchronous copies (cp.async), two rows ahead of the one a
//   team works on, and each team works through many rows;
// - a team's sum costs one barrier: each warp adds up the team's warp sums
//   itself, from alternate halves of a small shared array.
// Without the ring and the one-barrier sum, barriers, shared memory and
// instruction issue, not loads, limited these kernels. For rows a block
// holds, loading several rows straight into registers beats the ring.
// The kernels for rows a block holds, and the backward's, also take 16-bit x
// with a float32 weight W (the weight gradient then float32, y and dy of Y,
// float32 or x's dtype): the weight's values beside each 16-byte vector of x
// are two vectors of W (PackBeside). The launch shape comes from the planner (rms_norm_plan.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

// TeamSum gives each team of 64 or more threads named barrier 1 + team.
static_assert(kTeamBlockThreads / (2 * kWarpSize) < 16);

// A ring of kStages row slots in shared memory, filled with asynchronous
// copies (cp.async): rows stream in kStages - 1 rows ahead of the one being
// worked on, without holding registers while they are in flight. A thread
// copies its own vectors of a row into its own slots and reads back only
// those, so it waits for its own copies and never for the block. A slot is
// a 16-byte word of each thread in turn, so that a warp's reads of a word
// are consecutive (a pack of two words, a float32 dy beside 16-bit x, takes
// two slots). The ring starts on a 128-byte boundary: where it started right
// after the kernel's static shared memory, the backward's speed depended on
// that memory's size.
template <typename P, int kVectors>
struct RowRing {
  uint4* slots;  // [kStages][kVectors][P::kWords][blockDim.x]

  __device__ uint4* Slot(int stage, int k, int word) const {
    return slots + ((stage * kVectors + k) * P::kWords + word) * blockDim.x + threadIdx.x;
  }
  // Starts copying this thread's vectors of the row at `row`, if it exists.
  __device__ void Start(const P* __restrict__ row, bool exists,
                        int row_vectors, const Place& at, int stage) const {
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int c = at.first + k * at.stride;
      if (exists && c < row_vectors) {
#pragma unroll
        for (int word = 0; word < P::kWords; ++word) {
          __pipeline_memcpy_async(Slot(stage, k, word),
                                  reinterpret_cast<const uint4*>(row + c) + word, 16);
        }
      }
    }
  }
  // This thread's vectors of the row in `stage`; zeros past the row's end,
  // and for a row that does not exist (its slots hold stale values, possibly
  // NaN, which even a zero factor would carry into a sum).
  __device__ void Read(int stage, bool exists, int row_vectors,
                       const Place& at, P (&v)[kVectors]) const {
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const bool ok = exists && at.first + k * at.stride < row_vectors;
      uint4 words[P::kWords];
#pragma unroll
      for (int word = 0; word < P::kWords; ++word) {
        words[word] = VectorOrZeros(ok, Slot(stage, k, word));
      }
      memcpy(&v[k], words, sizeof(P));
    }
  }
};


// This thread's vectors of rows first .. first + kRows - 1 of x, all loads
// in flight at once. Rows past the end load the last row again (and store
// nothing).
template <int kRows, int kVectors, typename P>
__device__ void LoadRows(const P* __restrict__ x, int64_t first, int64_t rows,
                         int row_vectors, const Place& at,
                         P (&xv)[kRows][kVectors]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = std::min(first + r, rows - 1);
    LoadVectors(x + row * row_vectors, row_vectors, at, xv[r]);
  }
}

// A row's inverse RMS from its sum of squares. Not inlined: the call
// between one row's stores and the next row's keeps ptxas from starting a
// row's arithmetic before the row before is stored, which is what lets
// FastForwardKernel's 16-bit rows fit in 40 registers (inlined, they spill).
__device__ __noinline__ float InverseRms(float total, float inv_row_length,
                                         float eps) {
  return rsqrtf(total * inv_row_length + eps);
}

// The block adds up the squares of each of its rows (one barrier for all of
// them, through warp_sums), then writes y = w * (x * inv) and inv_rms for
// the rows that exist.
// The weight is its vectors in registers, or a LateWeight (StoreNormalised).
template <int kRows, int kVectors, typename P, typename Weight, typename PY>
__device__ void NormaliseRows(const P (&xv)[kRows][kVectors], const Weight& weight,
                              float (&warp_sums)[kRows][kMaxThreads / kWarpSize],
                              int64_t first, int64_t rows, int row_vectors,
                              float inv_row_length, float eps,
                              PY* __restrict__ y, float* __restrict__ inv_rms,
                              const Place& at) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float sum_squares = WarpSum(SumSquares(xv[r]));
    if (lane == 0) warp_sums[r][warp] = sum_squares;
  }
  __syncthreads();
  const int warps = blockDim.x / kWarpSize;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float total = WarpSum(lane < warps ? warp_sums[r][lane] : 0.0f);
    const float inv = InverseRms(total, inv_row_length, eps);
    if (first + r < rows) {
      StoreNormalised(xv[r], weight, inv, y + (first + r) * row_vectors,
                      row_vectors, at);
      if (threadIdx.x == 0) inv_rms[first + r] = inv;
    }
  }
}

// Block b normalises kRows rows, b * kRows to b * kRows + kRows - 1. Each
// thread loads its vectors of all of them into registers at once, so
// kRows * kVectors loads are in flight; then the block adds up each row's
// squares and writes y.
// 16-bit rows take at most 40 registers a thread (no spill), so an SM holds
// 25 of the 64-thread blocks of rows of 1,024 values, 6 blocks of 256
// threads, 3 of 512, where 64 registers (float32's cap, that of blocks of
// 1024 threads) let it hold 16, 4 and 2: more blocks per SM, more loads in
// flight. Element's reads of 16-bit values are what keep it within 40.
// With kResidual (a residual add), the residual's vectors are in flight
// beside x's (so half the rows a block: RowsPerBlock), and each row becomes
// x + residual, rounded to T, stored in `sum` and normalised from registers.
// A float32 weight W of 16-bit x (y then float32, or x's dtype: Y) doubles
// the weight's registers: those instances take up to 64.
// kWeightLate, for a row a block of more than 512 threads (16-bit rows of
// 16,384, the planner's wide rows): with the weight in registers too, such a
// block would take over 32 registers a thread, so an SM would hold one, and
// while it waits at its barrier or stores, nothing loads: an H100 hardly
// notices, an H200, with more bandwidth to fill, does. Instead a thread
// keeps only its vectors of x and loads each vector of the weight just
// before the store that needs it: at most 32 registers (the build fails on a
// spill), so an SM holds two blocks, and one block's loads run while the
// other adds up and writes.
template <typename T, typename W, typename Y, int kVectors, int kRows, bool kResidual = false,
          bool kWeightLate = false>
__global__ void __maxnreg__(kWeightLate ? 32 : (sizeof(T) == 2 && sizeof(W) == 2 ? 40 : 64))
    FastForwardKernel(const T* __restrict__ x, const W* __restrict__ w,
                      Y* __restrict__ y, float* __restrict__ inv_rms,
                      int64_t rows, int row_vectors, float inv_row_length,
                      float eps, const T* __restrict__ residual,
                      T* __restrict__ sum) {
  static_assert(!kWeightLate || (kRows == 1 && !kResidual), "a row a block, no residual");
  using P = Pack<T>;
  using PW = PackBeside<T, W>;
  using PY = PackBeside<T, Y>;
  __shared__ float warp_sums[kRows][kMaxThreads / kWarpSize];
  const Place at{0, 0, static_cast<int>(threadIdx.x),
                 static_cast<int>(blockDim.x)};
  const int64_t first = int64_t{blockIdx.x} * kRows;
  P xv[kRows][kVectors];
  LoadRows(reinterpret_cast<const P*>(x), first, rows, row_vectors, at, xv);
  if constexpr (kResidual) {
    P rv[kRows][kVectors];
    LoadRows(reinterpret_cast<const P*>(residual), first, rows, row_vectors, at,
             rv);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int k = 0; k < kVectors; ++k) {
        P total;
#pragma unroll
        for (int e = 0; e < P::kSize; ++e) {
          total.v[e] =
              Storage<T>::From(Element(xv[r][k], e) + Element(rv[r][k], e));
        }
        xv[r][k] = total;
      }
      if (first + r < rows) {
        StoreVectors<kVectors>(
            reinterpret_cast<P*>(sum) + (first + r) * row_vectors, row_vectors,
            at, [&](int k, int e) { return Element(xv[r][k], e); });
      }
    }
  }
  const PW* wp = reinterpret_cast<const PW*>(w);
  if constexpr (kWeightLate) {
    NormaliseRows(xv, LateWeight<PW>{wp}, warp_sums, first, rows, row_vectors, inv_row_length, eps,
                  reinterpret_cast<PY*>(y), inv_rms, at);
  } else {
    PW wv[kVectors];
    LoadVectors(wp, row_vectors, at, wv);
    NormaliseRows(xv, wv, warp_sums, first, rows, row_vectors, inv_row_length, eps,
                  reinterpret_cast<PY*>(y), inv_rms, at);
  }
}

// The forward for rows spread over a cluster of blocks (rows too long for
// one block): cluster c normalises row c, then `step` rows further, and so
// on, with the next rows streaming into the ring; the weight stays in
// registers throughout.
template <typename T, int kVectors, bool kClustered>
__global__ void __launch_bounds__(kMaxThreads, 1)
    ClusterForwardKernel(const T* __restrict__ x, const T* __restrict__ w,
                      T* __restrict__ y, float* __restrict__ inv_rms,
                      int64_t rows, int row_vectors, Shape shape,
                      float row_length, float eps) {
  using P = Pack<T>;
  extern __shared__ __align__(128) float4 ring_memory[];  // see RowRing
  __shared__ TeamSumSlots sums;
  StartClusterSums<kClustered>(sums);
  unsigned calls = 0;
  const Place at = ThreadPlace(shape);
  const P* xp = reinterpret_cast<const P*>(x);
  P* yp = reinterpret_cast<P*>(y);
  const RowRing<P, kVectors> ring{reinterpret_cast<uint4*>(ring_memory)};
  P wv[kVectors];
  LoadVectors(reinterpret_cast<const P*>(w), row_vectors, at, wv);
  const int64_t step = int64_t{gridDim.x / shape.cluster} * shape.teams;
  const int64_t block_first = int64_t{blockIdx.x / shape.cluster} * shape.teams;
  int64_t row = block_first + at.team;
  for (int s = 0; s < kStages - 1; ++s) {
    const int64_t next = row + s * step;
    ring.Start(xp + next * row_vectors, next < rows, row_vectors, at, s);
    __pipeline_commit();
  }
  int stage = 0;
  // The loop runs the same number of times in every thread of the block.
  for (int64_t block_row = block_first; block_row < rows;
       block_row += step, row += step, stage = (stage + 1) % kStages) {
    const int64_t ahead = row + (kStages - 1) * step;
    ring.Start(xp + ahead * row_vectors, ahead < rows, row_vectors, at,
               (stage + kStages - 1) % kStages);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);  // this row's copies have landed
    P xv[kVectors];
    ring.Read(stage, row < rows, row_vectors, at, xv);
    const float total =
        TeamSum<kClustered>(SumSquares(xv), shape, at, sums, calls);
    const float inv = rsqrtf(total / row_length + eps);
    if (row < rows) {
      StoreNormalised(xv, wv, inv, yp + row * row_vectors, row_vectors, at);
      if (at.rank == 0 && threadIdx.x % shape.team == 0) inv_rms[row] = inv;
    }
  }
  LeaveCluster<kClustered>();
}

// Where a block holds several teams, they add up their weight-gradient sums
// in shared memory (the rings' memory, free once the rows are done), and
// team 0 writes them as one row of partial sums: a block writes one partial
// row, not one per team (a quarter of them for rows of 1,024 bfloat16
// values).
template <typename P, int kVectors>
__device__ void StoreBlockPartials(float (&dw)[kVectors][P::kSize],
                                   float* __restrict__ sums, float* partial,
                                   int row_vectors, const Place& at,
                                   const Shape& shape) {
  const int lane = threadIdx.x % shape.team;
  auto slot = [&](int k, int e, int team) -> float& {
    return sums[((k * P::kSize + e) * shape.teams + team) * shape.team + lane];
  };
  __pipeline_wait_prior(0);
  __syncthreads();  // every team is done with the rings
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) slot(k, e, at.team) = dw[k][e];
  }
  __syncthreads();
  if (at.team != 0) return;
#pragma unroll
  for (int k = 0; k < kVectors; ++k) {
#pragma unroll
    for (int e = 0; e < P::kSize; ++e) {
      float sum = 0;
#pragma unroll 1
      for (int team = 0; team < shape.teams; ++team) sum += slot(k, e, team);
      dw[k][e] = sum;
    }
  }
  StorePartials(dw, partial, row_vectors, at);
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.
// Team i of the grid takes the rows of segment i (rows_per_partial of them,
// streaming in through two rings, for dy and x) and adds up their weight
// gradient; each block (or cluster) writes its teams' sum to row b of
// `partials`, b the block's (or cluster's) index.
template <typename T, typename W, typename Y, int kVectors, bool kClustered>
__global__ void __launch_bounds__(kMaxThreads, 1)
    FastBackwardKernel(const Y* __restrict__ dy,
                       const float* __restrict__ inv_rms,
                       const T* __restrict__ x, const W* __restrict__ w,
                       T* __restrict__ dx, float* __restrict__ partials,
                       int64_t rows, int row_vectors, int64_t num_partials,
                       int rows_per_partial, Shape shape,
                       float inv_row_length) {
  using P = Pack<T>;
  using PW = PackBeside<T, W>;
  using PY = PackBeside<T, Y>;
  extern __shared__ __align__(128) float4 ring_memory[];  // see RowRing
  __shared__ TeamSumSlots sums;
  StartClusterSums<kClustered>(sums);
  unsigned calls = 0;
  const Place at = ThreadPlace(shape);
  const int64_t segment =
      int64_t{blockIdx.x / shape.cluster} * shape.teams + at.team;
  // The segment's rows that exist: none for a team past the last segment.
  const bool has_segment = segment < num_partials;
  const int64_t begin = has_segment ? segment * rows_per_partial : 0;
  const int count = has_segment ? static_cast<int>(std::clamp<int64_t>(
                                      rows - begin, 0, rows_per_partial))
                                : 0;
  // The segment's rows, each row_vectors vectors after the one before.
  const PY* dyp = reinterpret_cast<const PY*>(dy) + begin * row_vectors;
  const P* xp = reinterpret_cast<const P*>(x) + begin * row_vectors;
  P* dxp = reinterpret_cast<P*>(dx) + begin * row_vectors;
  const float* invs = inv_rms + begin;
  uint4* ring_slots = reinterpret_cast<uint4*>(ring_memory);
  const RowRing<PY, kVectors> dy_ring{ring_slots};
  const RowRing<P, kVectors> x_ring{ring_slots + kStages * kVectors * PY::kWords * blockDim.x};
  PW wv[kVectors];
  LoadVectors(reinterpret_cast<const PW*>(w), row_vectors, at, wv);
  for (int s = 0; s < kStages - 1; ++s) {
    const int64_t offset = int64_t{s} * row_vectors;
    dy_ring.Start(dyp + offset, s < count, row_vectors, at, s);
    x_ring.Start(xp + offset, s < count, row_vectors, at, s);
    __pipeline_commit();
  }
  // The bookkeeping of a row is kept small: 32-bit row counts and stages,
  // pointers set once per segment, inv_rms loaded ahead, and the row
  // length's inverse multiplied rather than divided by: for short rows the
  // backward is bound by instruction issue, not by memory, otherwise.
  const int64_t ahead_offset = int64_t{kStages - 1} * row_vectors;
  float dw[kVectors][P::kSize] = {};
  // Where a row takes a cluster, inv_rms is loaded two rows ahead, so that
  // its load is never waited for; rows a block holds stay one row ahead,
  // where two cost more registers than they hide.
  float inv_next = count > 0 ? invs[0] : 0.0f;
  float inv_after = kClustered && count > 1 ? invs[1] : 0.0f;
  int stage = 0;
  int64_t offset = 0;  // of row i: i * row_vectors
  // The loop runs the same number of times in every thread of the block.
  for (int i = 0; i < rows_per_partial; ++i, offset += row_vectors) {
    const bool exists = i < count;
    const float inv = inv_next;  // 0 for a row that does not exist
    if constexpr (kClustered) {
      inv_next = inv_after;
      inv_after = i + 2 < count ? invs[i + 2] : 0.0f;
    } else {
      inv_next = i + 1 < count ? invs[i + 1] : 0.0f;
    }
    const int ahead_stage = stage == 0 ? kStages - 1 : stage - 1;
    const bool ahead_exists = i + kStages - 1 < count;
    dy_ring.Start(dyp + offset + ahead_offset, ahead_exists, row_vectors, at,
                  ahead_stage);
    x_ring.Start(xp + offset + ahead_offset, ahead_exists, row_vectors, at,
                 ahead_stage);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);  // this row's copies have landed
    PY dyv[kVectors];
    P xv[kVectors];
    dy_ring.Read(stage, exists, row_vectors, at, dyv);
    x_ring.Read(stage, exists, row_vectors, at, xv);
    // Where a row takes a cluster, bfloat16 values are read from their
    // words (Element), which saves that kernel registers; the other
    // backwards read 16-bit values, which ran at least as fast for them.
    float dot = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
#pragma unroll
      for (int e = 0; e < P::kSize; ++e) {
        const float d = ElementOf<kClustered>(dyv[k], e);
        const float v = ElementOf<kClustered>(xv[k], e);
        dot += d * ElementOf<kClustered>(wv[k], e) * v;
        dw[k][e] += d * v * inv;
      }
    }
    const float correction =
        inv * inv * TeamSum<kClustered>(dot, shape, at, sums, calls) *
        inv_row_length;
    if (exists) {
      StoreInputGradient<kClustered>(dyv, xv, wv, inv, correction,
                                     dxp + offset, row_vectors, at);
    }
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  StartNextKernel();  // the weight-gradient sum (SumPartials)
  float* partial =
      partials + int64_t{blockIdx.x / shape.cluster} * row_vectors * P::kSize;
  if constexpr (!kClustered) {  // (a cluster's blocks hold one team each)
    if (shape.teams > 1) {
      static_assert(P::kSize * sizeof(float) <= kStages * (sizeof(P) + sizeof(PY)),
                    "the teams' sums fit in the rings' memory");
      StoreBlockPartials<P>(dw, reinterpret_cast<float*>(ring_memory),
                            partial, row_vectors, at, shape);
      return;
    }
  }
  // One team per block (or cluster): the grid has one per segment.
  StorePartials(dw, partial, row_vectors, at);
  LeaveCluster<kClustered>();
}

// Calls fn(kernel) with the instance of `kernels` for a plan's shape: the
// cluster kernel for teams spread over a cluster, else the one for teams of
// one block.
template <typename Fn, typename Kernel>
decltype(auto) ForCluster(const Shape& shape, Kernel clustered, Kernel single,
                          Fn&& fn) {
  return fn(shape.cluster > 1 ? clustered : single);
}

template <typename T>
constexpr int kForwardVectors = kMaxForwardValues / Pack<T>::kSize;
template <typename T>
constexpr int kBackwardVectors = kMaxBackwardValues / Pack<T>::kSize;

}  // namespace

bool RunsClusters() {
  return RunsHopperCode(ClusterForwardKernel<float, 1, true>);
}

// The instances of x's dtype alone answer for those with a float32 weight
// too: the planner gives those the same shapes, __launch_bounds__ caps
// both alike, and the shared memory asked about is the call's.
int64_t RowTeamsResident(Kernel kernel, DType dtype, const Shape& shape,
                         int shared_bytes) {
  return DispatchFastType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    const auto resident = [&](auto instance) {
      return ResidentGroups(instance, shape, shared_bytes);
    };
    switch (kernel) {
      case Kernel::kRowTeamsForward:
        return DispatchVectors<kForwardVectors<T>>(shape.vectors, [&](auto v) {
          constexpr int kV = decltype(v)::value;
          return ForCluster(shape, ClusterForwardKernel<T, kV, true>,
                            ClusterForwardKernel<T, kV, false>, resident);
        });
      case Kernel::kRowTeamsBackward:
        return DispatchVectors<kBackwardVectors<T>>(shape.vectors, [&](auto v) {
          constexpr int kV = decltype(v)::value;
          return ForCluster(shape, FastBackwardKernel<T, T, T, kV, true>,
                            FastBackwardKernel<T, T, T, kV, false>, resident);
        });
      default:
        return int64_t{0};
    }
  });
}

namespace {

// What the forward kernels of this file are given, typed for the call's
// dtypes: x of T, the weight of W, y of Y (DispatchRowTypes), and, with a
// residual add, the residual and the sum x + residual, of T (else null).
template <typename TX, typename TW, typename TY>
struct RowsForwardArgs {
  using T = TX;
  using W = TW;
  using Y = TY;
  const T* x;
  const W* w;
  Y* y;
  float* inv_rms;
  int64_t rows;
  int row_vectors;
  float inv_row_length;
  float eps;
  const T* residual;
  T* sum;
};

// Calls fn(RowsForwardArgs<T, W, Y>{...}) for b's dtypes.
template <typename Fn>
ffi::Error WithForwardArgs(const ResidualForwardBuffers& b, RowGeometry g, double eps,
                           Fn&& fn) {
  return DispatchRowTypes(b.x, b.w, b.y, [&](auto t, auto u, auto v) {
    using T = typename decltype(t)::type;
    using W = typename decltype(u)::type;
    using Y = typename decltype(v)::type;
    return fn(RowsForwardArgs<T, W, Y>{
        static_cast<const T*>(b.x.untyped_data()), static_cast<const W*>(b.w.untyped_data()),
        static_cast<Y*>(b.y.untyped_data()), static_cast<float*>(b.inv_rms.untyped_data()),
        g.rows, static_cast<int>(g.row_length / Pack<T>::kSize), Reciprocal(g.row_length),
        static_cast<float>(eps),
        b.residual ? static_cast<const T*>(b.residual->untyped_data()) : nullptr,
        b.sum ? static_cast<T*>(b.sum->untyped_data()) : nullptr});
  });
}

// Launches FastForwardKernel for a's dtypes: plan.groups blocks of one team.
template <int kVectors, int kRows, bool kResidual, bool kWeightLate = false, typename A>
ffi::Error LaunchFastForward(cudaStream_t stream, const Plan& plan, const A& a) {
  FastForwardKernel<typename A::T, typename A::W, typename A::Y, kVectors, kRows, kResidual,
                    kWeightLate>
      <<<static_cast<unsigned>(plan.groups), plan.shape.team, 0, stream>>>(
          a.x, a.w, a.y, a.inv_rms, a.rows, a.row_vectors, a.inv_row_length, a.eps,
          a.residual, a.sum);
  return CheckLaunch(kResidual ? "launching the residual forward kernel"
                               : "launching the forward kernel");
}

// A plan the launcher has no kernel for: the planner gives none such, and
// one that did must fail, not compute something else.
ffi::Error NoKernel(const Plan& plan, const std::string& what) {
  return ffi::Error::Internal(std::string("gpu_ops rms_norm: no ") + PathName(plan.path) +
                              " kernel for " + what);
}

}  // namespace

// 16-bit rows, a row a 1024-thread block with its weight loaded late.
ffi::Error LaunchWideRowsForward(cudaStream_t stream, const Plan& plan,
                                 const ForwardBuffers& b, RowGeometry g, double eps) {
  return WithForwardArgs({b.x, b.w, b.y, b.inv_rms}, g, eps, [&](const auto& a) -> ffi::Error {
    using T = typename std::decay_t<decltype(a)>::T;
    if constexpr (sizeof(T) == 2) {
      return DispatchVectors<kForwardVectors<T>>(plan.shape.vectors, [&](auto vectors) {
        return LaunchFastForward<decltype(vectors)::value, 1, false, true>(stream, plan, a);
      });
    } else {
      return NoKernel(plan, "float32 x");
    }
  });
}

// A block's rows at once, a template argument: the plan's, one or
// RowsPerBlock of its vectors.
ffi::Error LaunchBlockRowsForward(cudaStream_t stream, const Plan& plan,
                                  const ResidualForwardBuffers& b, RowGeometry g,
                                  double eps) {
  return WithForwardArgs(b, g, eps, [&](const auto& a) {
    using T = typename std::decay_t<decltype(a)>::T;
    return DispatchVectors<kForwardVectors<T>>(plan.shape.vectors, [&](auto vectors) {
      constexpr int kV = decltype(vectors)::value;
      const auto launch = [&](auto with_residual) -> ffi::Error {
        constexpr bool kResidual = decltype(with_residual)::value;
        constexpr int kRows = RowsPerBlock(kV, kResidual);
        if (plan.team_rows == 1) return LaunchFastForward<kV, 1, kResidual>(stream, plan, a);
        if (plan.team_rows == kRows) {
          return LaunchFastForward<kV, kRows, kResidual>(stream, plan, a);
        }
        return NoKernel(plan, std::to_string(plan.team_rows) + " rows a block");
      };
      return a.residual ? launch(std::true_type{}) : launch(std::false_type{});
    });
  });
}

// Rows over a cluster's blocks, or teams streaming rows through shared
// memory; x, the weight and y of one dtype (the planner's kOneDType).
ffi::Error LaunchRowTeamsForward(cudaStream_t stream, const Plan& plan,
                                 const ForwardBuffers& b, RowGeometry g, double eps) {
  return WithForwardArgs({b.x, b.w, b.y, b.inv_rms}, g, eps, [&](const auto& a) -> ffi::Error {
    using A = std::decay_t<decltype(a)>;
    using T = typename A::T;
    if constexpr (std::is_same_v<T, typename A::W> && std::is_same_v<T, typename A::Y>) {
      return DispatchVectors<kForwardVectors<T>>(plan.shape.vectors, [&](auto vectors) {
        constexpr int kV = decltype(vectors)::value;
        return ForCluster(
            plan.shape, ClusterForwardKernel<T, kV, true>, ClusterForwardKernel<T, kV, false>,
            [&](auto kernel) {
              return Launch(stream, kernel, plan.shape, plan.groups, plan.shared_bytes,
                            "launching the forward kernel", a.x, a.w, a.y, a.inv_rms, a.rows,
                            a.row_vectors, plan.shape, static_cast<float>(g.row_length),
                            a.eps);
            });
      });
    } else {
      return NoKernel(plan, "x, weight and y of different dtypes");
    }
  });
}

ffi::Error LaunchRowTeamsBackward(cudaStream_t stream, const Plan& plan,
                                  const BackwardBuffers& b, RowGeometry g) {
  const int64_t num_partials = b.partials.dimensions()[0];
  float* partials = static_cast<float*>(b.partials.untyped_data());
  return DispatchRowTypes(b.x, b.w, b.dy, [&](auto t, auto u, auto v) {
    using T = typename decltype(t)::type;
    using W = typename decltype(u)::type;
    using Y = typename decltype(v)::type;
    const int row_vectors = static_cast<int>(g.row_length / Pack<T>::kSize);
    const ffi::Error launched = DispatchVectors<kBackwardVectors<T>>(
        plan.shape.vectors, [&](auto vectors) {
          constexpr int kV = decltype(vectors)::value;
          return ForCluster(
              plan.shape, FastBackwardKernel<T, W, Y, kV, true>,
              FastBackwardKernel<T, W, Y, kV, false>, [&](auto kernel) {
                return Launch(
                    stream, kernel, plan.shape, plan.groups, plan.shared_bytes,
                    "launching the backward kernel",
                    static_cast<const Y*>(b.dy.untyped_data()),
                    static_cast<const float*>(b.inv_rms.untyped_data()),
                    static_cast<const T*>(b.x.untyped_data()),
                    static_cast<const W*>(b.w.untyped_data()),
                    static_cast<T*>(b.dx.untyped_data()), partials, g.rows,
                    row_vectors, num_partials,
                    static_cast<int>(plan.rows_per_partial), plan.shape,
                    Reciprocal(g.row_length));
              });
        });
    if (launched.failure()) return launched;
    return SumPartials(stream, partials, static_cast<W*>(b.dw.untyped_data()),
                       plan.groups, g.row_length);
  });
}

}  // namespace gpu_ops
