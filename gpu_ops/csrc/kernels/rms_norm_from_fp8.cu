// The norm of a float8 input: x is float8_e4m3fn values with a float32
// scale per group of kFloat8Group (128) values of a row, dequantised as it
// is read, so that the forward and the backward read one byte per value of
// x (and a scale per 128) instead of two or four. The weight and y (dy, dx)
// are float16, bfloat16 or float32.
//
// These are the general kernels (general_rows.cuh) with Float8Rows for their
// input: a thread takes chunks of 4 consecutive values, one 32-bit load, and
// their group's scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/float8_warp_groups.cuh"
#include "kernels/general_rows.cuh"
#include "kernels/rms_norm_cuda_kernels.h"
#include "kernels/sum_partials.cuh"

namespace gpu_ops {
namespace {

// Rows of float8 values (4 a 32-bit word) with a scale per group: a chunk's
// 4 values are its word's times its group's scale.
struct Float8Rows {
  using Acc = float;
  static constexpr int kValues = kFloat8ValuesPerThread;
  const uint32_t* __restrict__ values;
  const float* __restrict__ scales;
  int64_t row_length;

  __device__ void Read(int64_t row, int64_t chunk, float (&v)[kValues]) const {
    const uint32_t word = values[row * row_length / kValues + chunk];
    const float scale =
        scales[row * (row_length / kFloat8Group) + chunk * kValues / kFloat8Group];
#pragma unroll
    for (int k = 0; k < kValues; k += 2) {
      // little-endian: value k at byte k
      const __half2_raw pair = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(word >> (8 * k)), __NV_E4M3);
      const float2 f = __half22float2(__half2(pair));
      v[k] = f.x * scale;
      v[k + 1] = f.y * scale;
    }
  }
  __device__ void First(int64_t row, int64_t chunk, float (&v)[kValues]) const {
    Read(row, chunk, v);
  }
};

}  // namespace

ffi::Error FromFloat8Forward(cudaStream_t stream, const FromFloat8ForwardBuffers& b,
                             RowGeometry g, double eps) {
  return DispatchFloat<__half, __nv_bfloat16>(b.w.element_type(), [&](auto wt) {
    using W = typename decltype(wt)::type;
    GeneralForwardKernel<<<GridSize(g.rows, kMaxGrid), kFloat8BlockThreads, 0, stream>>>(
        Float8Rows{static_cast<const uint32_t*>(b.values.untyped_data()),
                   static_cast<const float*>(b.scales.untyped_data()), g.row_length},
        NormalisedOut<W, W>{static_cast<const W*>(b.w.untyped_data()),
                            static_cast<W*>(b.y.untyped_data()), g.row_length},
        static_cast<float*>(b.inv_rms.untyped_data()), g.rows, g.row_length, eps);
    return CheckLaunch("GeneralForwardKernel (float8 input)");
  });
}

ffi::Error FromFloat8Backward(cudaStream_t stream, const FromFloat8BackwardBuffers& b,
                              RowGeometry g) {
  const int64_t num_partials = b.partials.dimensions()[0];
  if (auto err = DispatchFloat<__half, __nv_bfloat16>(b.w.element_type(), [&](auto wt) {
        using W = typename decltype(wt)::type;
        // One block per partial row: the scratch has at most 1024 (cuda_scratch.h).
        GeneralBackwardKernel<Float8Rows, W, W, W>
            <<<static_cast<unsigned>(num_partials), kFloat8BlockThreads, 0, stream>>>(
                static_cast<const W*>(b.dy.untyped_data()),
                static_cast<const float*>(b.inv_rms.untyped_data()),
                Float8Rows{static_cast<const uint32_t*>(b.values.untyped_data()),
                           static_cast<const float*>(b.scales.untyped_data()), g.row_length},
                static_cast<const W*>(b.w.untyped_data()), static_cast<W*>(b.dx.untyped_data()),
                static_cast<float*>(b.partials.untyped_data()), g.rows, g.row_length);
        return CheckLaunch("GeneralBackwardKernel (float8 input)");
      });
      err.failure()) {
    return err;
  }
  return SumPartials(stream, b.partials, b.dw, g);
}

}  // namespace gpu_ops
