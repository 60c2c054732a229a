// The norm of a float8 input: x is float8_e4m3fn values with a float32
// scale per group of kFloat8Group (128) values of a row, dequantised as it
// is read, so that the forward and the backward read one byte per value of
// x (and a scale per 128) instead of two or four. The weight and y (dy, dx)
// are float16, bfloat16 or float32.
//
// A block takes a row (and every gridDim.x-th after it), and a warp a group:
// each of its 32 threads reads 4 consecutive values, one 32-bit load, and
// the group's scale. The forward reads its row twice, once for the sum of
// squares and once to normalise (the second time from L1 or L2). The
// backward's blocks each add their rows' share of the weight gradient into
// their own row of `partials`, columns a thread owns, which SumPartials
// then adds up.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/float8_warp_groups.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

// The 4 values of x a thread holds: its float8 word times the group's scale.
struct Dequantised {
  float v[kFloat8ValuesPerThread];

  __device__ Dequantised(const uint32_t* values, const float* scales, int64_t row,
                         int64_t row_length, int64_t group, int lane) {
    const int64_t groups = row_length / kFloat8Group;
    const uint32_t word =
        values[(row * row_length + group * kFloat8Group) / kFloat8ValuesPerThread + lane];
    const float scale = scales[row * groups + group];
#pragma unroll
    for (int k = 0; k < kFloat8ValuesPerThread; k += 2) {
      // little-endian: value k at byte k
      const __half2_raw pair = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(word >> (8 * k)), __NV_E4M3);
      const float2 f = __half22float2(__half2(pair));
      v[k] = f.x * scale;
      v[k + 1] = f.y * scale;
    }
  }
};

// The sum of v over the block, on every thread. The first barrier keeps a
// row's sums from overwriting those the last row's threads may still read.
__device__ float BlockSum(float v, float* warp_sums) {
  v = WarpSum(v);
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) warp_sums[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  float total = 0;
#pragma unroll
  for (int k = 0; k < kFloat8BlockWarps; ++k) total += warp_sums[k];
  return total;
}

template <typename W>
__global__ void __launch_bounds__(kFloat8BlockThreads)
    FromFloat8ForwardKernel(const uint32_t* __restrict__ values,
                            const float* __restrict__ scales,
                            const W* __restrict__ w, W* __restrict__ y,
                            float* __restrict__ inv_rms, int64_t rows,
                            int64_t row_length, double eps) {
  __shared__ float warp_sums[kFloat8BlockWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t groups = row_length / kFloat8Group;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float squares = 0;
    for (int64_t group = warp; group < groups; group += kFloat8BlockWarps) {
      const Dequantised x(values, scales, row, row_length, group, lane);
#pragma unroll
      for (int k = 0; k < kFloat8ValuesPerThread; ++k) squares += x.v[k] * x.v[k];
    }
    const float total = BlockSum(squares, warp_sums);
    const float inv =
        1.0f / sqrtf(total / static_cast<float>(row_length) + static_cast<float>(eps));
    if (threadIdx.x == 0) inv_rms[row] = inv;
    for (int64_t group = warp; group < groups; group += kFloat8BlockWarps) {
      const Dequantised x(values, scales, row, row_length, group, lane);
      const int64_t first = group * kFloat8Group + lane * kFloat8ValuesPerThread;
#pragma unroll
      for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
        y[row * row_length + first + k] =
            Storage<W>::From(ToAcc<float>(w[first + k]) * (inv * x.v[k]));
      }
    }
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x)), and the block's rows' share
// of the weight gradient, sum of dy*x*inv, in its own row of `partials`.
template <typename W>
__global__ void __launch_bounds__(kFloat8BlockThreads)
    FromFloat8BackwardKernel(const W* __restrict__ dy,
                             const float* __restrict__ inv_rms,
                             const uint32_t* __restrict__ values,
                             const float* __restrict__ scales,
                             const W* __restrict__ w, W* __restrict__ dx,
                             float* __restrict__ partials, int64_t rows,
                             int64_t row_length) {
  __shared__ float warp_sums[kFloat8BlockWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t groups = row_length / kFloat8Group;
  float* partial = partials + int64_t{blockIdx.x} * row_length;
  // Each thread keeps to these columns in every row, so it alone touches
  // its part of the block's partial row.
  for (int64_t group = warp; group < groups; group += kFloat8BlockWarps) {
    const int64_t first = group * kFloat8Group + lane * kFloat8ValuesPerThread;
#pragma unroll
    for (int k = 0; k < kFloat8ValuesPerThread; ++k) partial[first + k] = 0;
  }
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * row_length;
    float dot = 0;
    for (int64_t group = warp; group < groups; group += kFloat8BlockWarps) {
      const Dequantised x(values, scales, row, row_length, group, lane);
      const int64_t first = group * kFloat8Group + lane * kFloat8ValuesPerThread;
#pragma unroll
      for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
        dot += ToAcc<float>(dy[base + first + k]) * ToAcc<float>(w[first + k]) * x.v[k];
      }
    }
    const float inv = inv_rms[row];
    const float correction =
        inv * inv * BlockSum(dot, warp_sums) / static_cast<float>(row_length);
    for (int64_t group = warp; group < groups; group += kFloat8BlockWarps) {
      const Dequantised x(values, scales, row, row_length, group, lane);
      const int64_t first = group * kFloat8Group + lane * kFloat8ValuesPerThread;
#pragma unroll
      for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
        const float dyv = ToAcc<float>(dy[base + first + k]);
        dx[base + first + k] =
            Storage<W>::From(inv * (dyv * ToAcc<float>(w[first + k]) - x.v[k] * correction));
        partial[first + k] += dyv * x.v[k] * inv;
      }
    }
  }
}

}  // namespace

ffi::Error FromFloat8Forward(cudaStream_t stream, const FromFloat8ForwardBuffers& b,
                             RowGeometry g, double eps) {
  return DispatchFloat<__half, __nv_bfloat16>(b.w.element_type(), [&](auto wt) {
    using W = typename decltype(wt)::type;
    FromFloat8ForwardKernel<W><<<GridSize(g.rows, kMaxGrid), kFloat8BlockThreads, 0, stream>>>(
        static_cast<const uint32_t*>(b.values.untyped_data()),
        static_cast<const float*>(b.scales.untyped_data()),
        static_cast<const W*>(b.w.untyped_data()), static_cast<W*>(b.y.untyped_data()),
        static_cast<float*>(b.inv_rms.untyped_data()), g.rows, g.row_length, eps);
    return CheckLaunch("FromFloat8ForwardKernel");
  });
}

ffi::Error FromFloat8Backward(cudaStream_t stream, const FromFloat8BackwardBuffers& b,
                              RowGeometry g) {
  const int64_t num_partials = b.partials.dimensions()[0];
  if (auto err = DispatchFloat<__half, __nv_bfloat16>(b.w.element_type(), [&](auto wt) {
        using W = typename decltype(wt)::type;
        // One block per partial row: the scratch has at most 1024 (cuda_scratch.h).
        FromFloat8BackwardKernel<W><<<static_cast<unsigned>(num_partials), kFloat8BlockThreads, 0,
                                      stream>>>(
            static_cast<const W*>(b.dy.untyped_data()),
            static_cast<const float*>(b.inv_rms.untyped_data()),
            static_cast<const uint32_t*>(b.values.untyped_data()),
            static_cast<const float*>(b.scales.untyped_data()),
            static_cast<const W*>(b.w.untyped_data()), static_cast<W*>(b.dx.untyped_data()),
            static_cast<float*>(b.partials.untyped_data()), g.rows, g.row_length);
        return CheckLaunch("FromFloat8BackwardKernel");
      });
      err.failure()) {
    return err;
  }
  return SumPartials(stream, b.partials, b.dw, g);
}

}  // namespace gpu_ops
