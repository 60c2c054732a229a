// RMS norm of short rows: up to 256 values, such as the QK-norm over each
// attention head (head_dim 64 to 256), where a model has hundreds of
// thousands of such rows.
//
// The row-team kernels (rms_norm_fast.cu) give a row at least a warp, and a
// 16-bit row of 128 values is 16 vectors of 16 bytes: half a warp's lanes
// would idle, and every row would pay a barrier. Here a group of 8, 16 or 32
// lanes of one warp takes a row, 8 values a lane (16 bytes of 16-bit x, 32
// of float32), adding up a row's squares with shuffles in the group; a warp
// holds 4, 2 or 1 rows, and its loads are whole consecutive rows.
// - The forward: each thread loads its values of kShortRowsForwardRows rows
//   at once (all in flight), then normalises them; a block takes its rows
//   in one go.
// - The backward: a grid of at most as many blocks as the GPU holds goes
//   through the rows, each thread keeping dy's and x's values of
//   kShortRowsBackwardRows rows in flight and adding up its columns' weight
//   gradient in registers; a block then adds up its groups' sums in shared
//   memory and writes one row of partial sums, and SumPartials adds those.
// Both take 16-bit x with a float32 weight (W), which then is the weight
// gradient's dtype and y's and dy's (Y), or x's for those (out_dtype), as a
// model keeping its weights in float32 has them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/dependent_launch.cuh"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

// A lane's kShortRowLaneValues consecutive values of a row: one 16-byte
// vector of 16-bit values, two of float32.
template <typename T>
using LaneValues = Pack<T, kShortRowLaneValues>;

// The values of lane `lane` of the row at `row` if `ok`, else zeros (the
// memory is not read).
template <typename T>
__device__ LaneValues<T> LoadLane(const T* __restrict__ row, int lane, bool ok) {
  return VectorOrZeros(ok, reinterpret_cast<const LaneValues<T>*>(row) + lane);
}

// Writes value(e) for the values of lane `lane` of the row at `row`.
template <typename T, typename Value>
__device__ void StoreLane(T* __restrict__ row, int lane, Value value) {
  LaneValues<T> out;
#pragma unroll
  for (int e = 0; e < kShortRowLaneValues; ++e) out.v[e] = Storage<T>::From(value(e));
  reinterpret_cast<LaneValues<T>*>(row)[lane] = out;
}

// The sum of v over the kLanes lanes of this thread's group (every lane of
// the warp calls it; each group gets its own sum).
template <int kLanes>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Where this thread's rows lie: group g of a block takes rows first + g,
// first + g + kGroups, ... (kGroups groups a block), so that a warp's loads
// of a row index are consecutive rows.
template <int kLanes>
struct LanePlace {
  static constexpr int kGroups = kShortRowsThreads / kLanes;
  __device__ explicit LanePlace(int row_length)
      : lane(static_cast<int>(threadIdx.x % kLanes)),
        group(static_cast<int>(threadIdx.x / kLanes)),
        active(lane * kShortRowLaneValues < row_length) {}
  int lane;
  int group;
  bool active;  // lanes past a row's end load zeros and store nothing
};

// Block b normalises rows b * kGroups * kRows to (b + 1) * kGroups * kRows - 1.
// Rows past the end load the last row again and store nothing.
template <typename T, typename W, typename Y, int kLanes, int kRows>
__global__ void __launch_bounds__(kShortRowsThreads)
    ShortRowsForwardKernel(const T* __restrict__ x, const W* __restrict__ w,
                           Y* __restrict__ y, float* __restrict__ inv_rms,
                           int64_t rows, int row_length, float inv_row_length,
                           float eps) {
  const LanePlace<kLanes> at(row_length);
  constexpr int kGroups = LanePlace<kLanes>::kGroups;
  const int64_t first = int64_t{blockIdx.x} * kGroups * kRows + at.group;
  LaneValues<T> xv[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = std::min(first + r * kGroups, rows - 1);
    xv[r] = LoadLane(x + row * row_length, at.lane, at.active);
  }
  const LaneValues<W> wv = LoadLane(w, at.lane, at.active);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float squares = 0;
#pragma unroll
    for (int e = 0; e < kShortRowLaneValues; ++e) squares += Element(xv[r], e) * Element(xv[r], e);
    const float inv = rsqrtf(GroupSum<kLanes>(squares) * inv_row_length + eps);
    const int64_t row = first + r * kGroups;
    if (row < rows) {
      if (at.active) {
        StoreLane(y + row * row_length, at.lane,
                  [&](int e) { return Element(wv, e) * (inv * Element(xv[r], e)); });
      }
      if (at.lane == 0) inv_rms[row] = inv;
    }
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv.
// Block b takes rows b * kGroups * kRows, ... and then those gridDim.x *
// kGroups * kRows further, and so on; it writes its sum of the weight
// gradient to row b of `partials`. An SM holds kShortRowsBackwardBlocks
// blocks whatever the dtypes (with 4, float32's spilled on an A100).
template <typename T, typename W, typename Y, int kLanes, int kRows>
__global__ void __launch_bounds__(kShortRowsThreads, kShortRowsBackwardBlocks)
    ShortRowsBackwardKernel(const Y* __restrict__ dy, const float* __restrict__ inv_rms,
                            const T* __restrict__ x, const W* __restrict__ w,
                            T* __restrict__ dx, float* __restrict__ partials,
                            int64_t rows, int row_length, float inv_row_length) {
  constexpr int kGroups = LanePlace<kLanes>::kGroups;
  __shared__ float sums[kGroups][kLanes * kShortRowLaneValues];
  const LanePlace<kLanes> at(row_length);
  const LaneValues<W> wv = LoadLane(w, at.lane, at.active);
  float dw[kShortRowLaneValues] = {};
  const int64_t step = int64_t{gridDim.x} * kGroups * kRows;
  // The loop runs the same number of times in every thread of the block.
  for (int64_t block_first = int64_t{blockIdx.x} * kGroups * kRows; block_first < rows;
       block_first += step) {
    LaneValues<Y> dyv[kRows];
    LaneValues<T> xv[kRows];
    float inv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = block_first + at.group + r * kGroups;
      const bool exists = row < rows;
      dyv[r] = LoadLane(dy + row * row_length, at.lane, exists && at.active);
      xv[r] = LoadLane(x + row * row_length, at.lane, exists && at.active);
      inv[r] = exists ? inv_rms[row] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float dot = 0;
#pragma unroll
      for (int e = 0; e < kShortRowLaneValues; ++e) {
        const float d = Element(dyv[r], e), v = Element(xv[r], e);
        dot += d * Element(wv, e) * v;
        dw[e] += d * v * inv[r];
      }
      const float correction = inv[r] * inv[r] * GroupSum<kLanes>(dot) * inv_row_length;
      const int64_t row = block_first + at.group + r * kGroups;
      if (row < rows && at.active) {
        StoreLane(dx + row * row_length, at.lane, [&](int e) {
          return inv[r] * (Element(dyv[r], e) * Element(wv, e) - Element(xv[r], e) * correction);
        });
      }
    }
  }
  StartNextKernel();  // the weight-gradient sum (SumPartials)
#pragma unroll
  for (int e = 0; e < kShortRowLaneValues; ++e) {
    sums[at.group][at.lane * kShortRowLaneValues + e] = dw[e];
  }
  __syncthreads();
  float* partial = partials + int64_t{blockIdx.x} * row_length;
  for (int c = threadIdx.x; c < row_length; c += kShortRowsThreads) {
    float sum = 0;
#pragma unroll 8
    for (int g = 0; g < kGroups; ++g) sum += sums[g][c];
    partial[c] = sum;
  }
}

// Calls fn(std::integral_constant<int, lanes>{}) for a plan's lanes a row.
template <typename Fn>
decltype(auto) DispatchLanes(int lanes, Fn&& fn) {
  static_assert(kShortRowsMinLanes == 8);
  if (lanes == 8) return fn(std::integral_constant<int, 8>{});
  if (lanes == 16) return fn(std::integral_constant<int, 16>{});
  return fn(std::integral_constant<int, kWarpSize>{});
}

}  // namespace

int64_t ShortRowsResident(DType dtype, const Shape& shape) {
  // The weight's dtype is left out: every instance's __launch_bounds__ caps
  // its registers, and the planner needs only to know about how many
  // blocks fill the GPU.
  return DispatchFastType(dtype, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    return DispatchLanes(shape.team, [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      return ResidentGroups(ShortRowsBackwardKernel<T, T, T, kLanes, kShortRowsBackwardRows>,
                            shape, 0);
    });
  });
}

ffi::Error LaunchShortRowsForward(cudaStream_t stream, const Plan& plan,
                                  const ForwardBuffers& b, RowGeometry g, double eps) {
  return DispatchRowTypes(b.x, b.w, b.y, [&](auto t, auto u, auto v) {
    using T = typename decltype(t)::type;
    using W = typename decltype(u)::type;
    using Y = typename decltype(v)::type;
    return DispatchLanes(plan.shape.team, [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(plan.groups), kShortRowsThreads, 0, stream>>>(
            static_cast<const T*>(b.x.untyped_data()),
            static_cast<const W*>(b.w.untyped_data()),
            static_cast<Y*>(b.y.untyped_data()),
            static_cast<float*>(b.inv_rms.untyped_data()), g.rows,
            static_cast<int>(g.row_length), Reciprocal(g.row_length),
            static_cast<float>(eps));
        return CheckLaunch("launching the short-row forward kernel");
      };
      // A team's rows at once, a template argument: the plan's, one or
      // kShortRowsForwardRows.
      if (plan.team_rows == 1) return launch(ShortRowsForwardKernel<T, W, Y, kLanes, 1>);
      if (plan.team_rows == kShortRowsForwardRows) {
        return launch(ShortRowsForwardKernel<T, W, Y, kLanes, kShortRowsForwardRows>);
      }
      return ffi::Error::Internal("gpu_ops rms_norm: no short-row forward kernel for " +
                                  std::to_string(plan.team_rows) + " rows a team");
    });
  });
}

ffi::Error LaunchShortRowsBackward(cudaStream_t stream, const Plan& plan,
                                   const BackwardBuffers& b, RowGeometry g) {
  float* partials = static_cast<float*>(b.partials.untyped_data());
  return DispatchRowTypes(b.x, b.w, b.dy, [&](auto t, auto u, auto v) {
    using T = typename decltype(t)::type;
    using W = typename decltype(u)::type;
    using Y = typename decltype(v)::type;
    const ffi::Error launched = DispatchLanes(plan.shape.team, [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      ShortRowsBackwardKernel<T, W, Y, kLanes, kShortRowsBackwardRows>
          <<<static_cast<unsigned>(plan.groups), kShortRowsThreads, 0, stream>>>(
              static_cast<const Y*>(b.dy.untyped_data()),
              static_cast<const float*>(b.inv_rms.untyped_data()),
              static_cast<const T*>(b.x.untyped_data()),
              static_cast<const W*>(b.w.untyped_data()),
              static_cast<T*>(b.dx.untyped_data()), partials, g.rows,
              static_cast<int>(g.row_length), Reciprocal(g.row_length));
      return CheckLaunch("launching the short-row backward kernel");
    });
    if (launched.failure()) return launched;
    return SumPartials(stream, partials, static_cast<W*>(b.dw.untyped_data()), plan.groups,
                       g.row_length);
  });
}

}  // namespace gpu_ops
