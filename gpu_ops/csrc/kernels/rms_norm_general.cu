// The general kernels (general_rows.cuh) on rows of x: every dtype pair (x
// and the weight may differ, and float64 is accumulated in float64), every
// row length and any alignment. They take what the fast kernels do not (the
// planner's kGeneral path), and the forward with a residual add of rows the
// fast residual kernel does not hold.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/dtype_dispatch.h"
#include "kernels/general_rows.cuh"
#include "kernels/rms_norm_cuda_kernels.h"
#include "kernels/sum_partials.cuh"

namespace gpu_ops {
namespace {

// A thread for every four values of a row, in whole warps, up to 512.
int GeneralThreads(int64_t row_length) {
  const int64_t wanted = CeilDiv(row_length, int64_t{4});
  return static_cast<int>(std::clamp<int64_t>(CeilDiv(wanted, int64_t{kWarpSize}) * kWarpSize,
                                              kWarpSize, kGeneralMaxThreads));
}

}  // namespace

ffi::Error GeneralForward(cudaStream_t stream, const ResidualForwardBuffers& b,
                          RowGeometry g, double eps) {
  const unsigned blocks = GridSize(g.rows, kMaxGrid);
  const int threads = GeneralThreads(g.row_length);
  return DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        return DispatchOutput<X, W>(b.x.element_type(), b.y.element_type(), [&](auto yt) {
          using Y = typename decltype(yt)::type;
          const NormalisedOut<W, Y> out{static_cast<const W*>(b.w.untyped_data()),
                                        static_cast<Y*>(b.y.untyped_data()), g.row_length};
          const auto launch = [&](auto in) {
            GeneralForwardKernel<<<blocks, threads, 0, stream>>>(
                in, out, static_cast<AccumulatorFor<X>*>(b.inv_rms.untyped_data()), g.rows,
                g.row_length, eps);
            return CheckLaunch("GeneralForwardKernel");
          };
          const X* x = static_cast<const X*>(b.x.untyped_data());
          if (b.residual == nullptr) return launch(PlainRows<X, 1>{x, g.row_length});
          return launch(PlainRows<X, 1, true>{
              x, g.row_length, static_cast<const X*>(b.residual->untyped_data()),
              static_cast<X*>(b.sum->untyped_data())});
        });
      });
}

ffi::Error GeneralBackward(cudaStream_t stream, const BackwardBuffers& b,
                           RowGeometry g) {
  const int64_t num_partials = b.partials.dimensions()[0];
  const int threads = GeneralThreads(g.row_length);
  const ffi::Error err = DispatchFloatPair<__half, __nv_bfloat16>(
      b.x.element_type(), b.w.element_type(), [&](auto xt, auto wt) {
        using X = typename decltype(xt)::type;
        using W = typename decltype(wt)::type;
        using A = AccumulatorFor<X>;
        return DispatchOutput<X, W>(b.x.element_type(), b.dy.element_type(), [&](auto yt) {
          using Y = typename decltype(yt)::type;
          // One block per partial row: the backward's scratch has at most
          // 1024 (cuda_scratch.h).
          GeneralBackwardKernel<PlainRows<X, 1>, W, Y, X>
              <<<static_cast<unsigned>(num_partials), threads, 0, stream>>>(
                  static_cast<const Y*>(b.dy.untyped_data()),
                  static_cast<const A*>(b.inv_rms.untyped_data()),
                  PlainRows<X, 1>{static_cast<const X*>(b.x.untyped_data()), g.row_length},
                  static_cast<const W*>(b.w.untyped_data()),
                  static_cast<X*>(b.dx.untyped_data()),
                  static_cast<A*>(b.partials.untyped_data()), g.rows, g.row_length);
          return CheckLaunch("GeneralBackwardKernel");
        });
      });
  if (err.failure()) return err;
  return SumPartials(stream, b.partials, b.dw, g);
}

ffi::Error SumPartials(cudaStream_t stream, const ffi::AnyBuffer& partials,
                       const ffi::AnyBuffer& dw, RowGeometry g) {
  const int64_t num_partials = partials.dimensions()[0];
  const auto launch = [&](auto accumulator) {
    using A = typename decltype(accumulator)::type;
    return DispatchFloat<__half, __nv_bfloat16>(dw.element_type(), [&](auto wt) {
      using W = typename decltype(wt)::type;
      return SumPartials(stream, static_cast<const A*>(partials.untyped_data()),
                         static_cast<W*>(dw.untyped_data()), num_partials, g.row_length);
    });
  };
  return partials.element_type() == ffi::DataType::F64 ? launch(TypeTag<double>{})
                                                      : launch(TypeTag<float>{});
}

}  // namespace gpu_ops
