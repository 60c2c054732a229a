// The forward quantised to float8_e4m3fn for the next matmul: y in groups
// of kFloat8Group (128) values of a row, each group with a float32 scale,
// its largest |y| over 448, and its values y / scale, from one pass over x
// (or over x + residual, added in the same pass). Given a scale per row
// (row_scales; a tensor's one scale, broadcast), the values are y / that
// scale instead, and `scales` receives each group's largest |y|, from which
// the caller takes the tensor's for its next scale.
//
// It is the general forward (general_rows.cuh) with QuantisedOut for its
// output: a thread takes chunks of 4 consecutive values, so a warp's 32
// chunks are a group, whose largest |y| is one warp reduction, and the 4
// float8 values a thread writes are one 32-bit store. Any dtype pair.
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

namespace gpu_ops {
namespace {

constexpr float kFloat8Max = 448.0f;

// y = w * (inv * x) of a chunk of kFloat8ValuesPerThread values, quantised:
// the warp's chunks are one group (the caller's blocks are whole warps, and
// rows whole groups, so every lane of a warp stores a chunk of one group).
template <typename W>
struct QuantisedOut {
  const W* __restrict__ w;
  uint32_t* __restrict__ values;
  float* __restrict__ scales;
  const float* __restrict__ row_scales;  // or nullptr
  int64_t row_length;

  template <typename A>
  __device__ void Store(int64_t row, int64_t chunk, A inv,
                        const A (&x)[kFloat8ValuesPerThread]) const {
    float y[kFloat8ValuesPerThread];
    float largest = 0;
#pragma unroll
    for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
      const int64_t c = chunk * kFloat8ValuesPerThread + k;
      y[k] = static_cast<float>(ToAcc<A>(w[c]) * (inv * x[k]));
      largest = fmaxf(largest, fabsf(y[k]));
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    }
    const float scale = row_scales != nullptr ? row_scales[row]
                        : largest > 0         ? largest / kFloat8Max
                                              : 1.0f;
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < kFloat8ValuesPerThread; ++k) {
      const uint32_t bits = __nv_cvt_float_to_fp8(y[k] / scale, __NV_SATFINITE, __NV_E4M3);
      word |= bits << (8 * k);  // little-endian: value k at byte k
    }
    values[row * row_length / kFloat8ValuesPerThread + chunk] = word;
    if (threadIdx.x % kWarpSize == 0) {
      const int64_t group = chunk * kFloat8ValuesPerThread / kFloat8Group;
      scales[row * (row_length / kFloat8Group) + group] =
          row_scales != nullptr ? largest : scale;
    }
  }
};

}  // namespace

ffi::Error QuantisedForward(cudaStream_t stream, const QuantisedForwardBuffers& b,
                            RowGeometry g, double eps) {
  return DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        const QuantisedOut<W> out{
            static_cast<const W*>(b.w.untyped_data()),
            static_cast<uint32_t*>(b.values.untyped_data()),
            static_cast<float*>(b.scales.untyped_data()),
            b.row_scales == nullptr ? nullptr
                                    : static_cast<const float*>(b.row_scales->untyped_data()),
            g.row_length};
        const auto launch = [&](auto in) {
          GeneralForwardKernel<<<GridSize(g.rows, kMaxGrid), kFloat8BlockThreads, 0, stream>>>(
              in, out, static_cast<AccumulatorFor<X>*>(b.inv_rms.untyped_data()), g.rows,
              g.row_length, eps);
          return CheckLaunch("GeneralForwardKernel (float8 output)");
        };
        const X* x = static_cast<const X*>(b.x.untyped_data());
        if (b.residual == nullptr) {
          return launch(PlainRows<X, kFloat8ValuesPerThread>{x, g.row_length});
        }
        return launch(PlainRows<X, kFloat8ValuesPerThread, true>{
            x, g.row_length, static_cast<const X*>(b.residual->untyped_data()),
            static_cast<X*>(b.sum->untyped_data())});
      });
}

}  // namespace gpu_ops
