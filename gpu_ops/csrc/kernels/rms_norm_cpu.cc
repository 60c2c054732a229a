// RMS norm on the CPU: a straightforward reference implementation, so that
// every chapter of the book runs on a machine without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <vector>

#include "ffi/rms_norm_checks.h"
#include "ffi/rms_norm_handlers.h"
#include "kernels/cpu_half_types.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/float8_e4m3.h"
#include "kernels/rms_norm_cpu_rows.h"

namespace gpu_ops {
namespace {

// y quantised to float8_e4m3fn in groups of kFloat8Group values of a row:
// each group's scale is its largest |y| over 448 (1 for a group of zeros),
// and its values are y / scale, rounded (float8_e4m3.h). With row_scales,
// every value of row r is y / row_scales[r] instead, and `scales` receives
// each group's largest |y|.
struct QuantisedRows {
  ffi::AnyBuffer& values;
  ffi::AnyBuffer& scales;
  const ffi::AnyBuffer* row_scales = nullptr;

  template <typename X, typename W>
  auto For(const W* w, int64_t n) const {
    uint8_t* out = static_cast<uint8_t*>(values.untyped_data());
    float* out_scales = static_cast<float*>(scales.untyped_data());
    const float* given = row_scales == nullptr
                             ? nullptr
                             : static_cast<const float*>(row_scales->untyped_data());
    return [=](int64_t r, const X* row, double inv) {
      const int64_t groups = n / kFloat8Group;
      double y[kFloat8Group];
      for (int64_t group = 0; group < groups; ++group) {
        const int64_t first = group * kFloat8Group;
        double largest = 0;
        for (int64_t k = 0; k < kFloat8Group; ++k) {
          y[k] = Load<double>(w[first + k]) * (inv * Load<double>(row[first + k]));
          largest = std::max(largest, std::fabs(y[k]));
        }
        const float scale =
            given != nullptr ? given[r]
            : largest > 0    ? static_cast<float>(largest / kFloat8E4M3Max)
                             : 1.0f;
        out_scales[r * groups + group] =
            given != nullptr ? static_cast<float>(largest) : scale;
        for (int64_t k = 0; k < kFloat8Group; ++k) {
          out[r * n + first + k] = ToFloat8E4M3(y[k] / scale);
        }
      }
    };
  }
};


template <typename Fn>
ffi::Error DispatchCpu(ffi::DataType x_type, ffi::DataType w_type, Fn&& fn) {
  return DispatchFloatPair<Float16Bits, BFloat16Bits>(x_type, w_type, fn);
}

// The forward of x (or, where residual and sum are given, of x + residual)
// into `output` (NormalisedRows or QuantisedRows).
template <typename Output>
ffi::Error ForwardOnRows(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                         ffi::AnyBuffer& inv_rms, RowGeometry g, double eps,
                         const Output& output,
                         const ffi::AnyBuffer* residual = nullptr,
                         ffi::AnyBuffer* sum = nullptr) {
  return DispatchCpu(x.element_type(), w.element_type(), [&](auto xt, auto wt) {
    using X = typename decltype(xt)::type;
    using W = typename decltype(wt)::type;
    ForwardRows(static_cast<const X*>(x.untyped_data()),
                static_cast<AccumulatorFor<X>*>(inv_rms.untyped_data()), g, eps,
                residual ? static_cast<const X*>(residual->untyped_data()) : nullptr,
                sum ? static_cast<X*>(sum->untyped_data()) : nullptr,
                output.template For<X>(static_cast<const W*>(w.untyped_data()),
                                       g.row_length));
    return ffi::Error::Success();
  });
}

ffi::Error ForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w,
                      ffi::Result<ffi::AnyBuffer> y,
                      ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckForwardBuffers(x, w, eps, *y, *inv_rms, &g);
      err.failure()) {
    return err;
  }
  return ForwardOnRows(x, w, *inv_rms, g, eps, NormalisedRows{*y});
}

ffi::Error ResidualForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w,
                              ffi::AnyBuffer residual,
                              ffi::Result<ffi::AnyBuffer> y,
                              ffi::Result<ffi::AnyBuffer> inv_rms,
                              ffi::Result<ffi::AnyBuffer> sum, double eps) {
  RowGeometry g;
  if (auto err = CheckResidualForwardBuffers(x, w, residual, eps, *y, *inv_rms,
                                             *sum, &g);
      err.failure()) {
    return err;
  }
  return ForwardOnRows(x, w, *inv_rms, g, eps, NormalisedRows{*y}, &residual,
                       &*sum);
}

ffi::Error QuantisedForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w,
                               ffi::Result<ffi::AnyBuffer> values,
                               ffi::Result<ffi::AnyBuffer> inv_rms,
                               ffi::Result<ffi::AnyBuffer> scales, double eps) {
  RowGeometry g;
  if (auto err = CheckQuantisedForwardBuffers(x, w, eps, *values, *inv_rms,
                                              *scales, &g);
      err.failure()) {
    return err;
  }
  return ForwardOnRows(x, w, *inv_rms, g, eps, QuantisedRows{*values, *scales});
}

ffi::Error ResidualQuantisedForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w,
                                       ffi::AnyBuffer residual,
                                       ffi::Result<ffi::AnyBuffer> values,
                                       ffi::Result<ffi::AnyBuffer> inv_rms,
                                       ffi::Result<ffi::AnyBuffer> scales,
                                       ffi::Result<ffi::AnyBuffer> sum,
                                       double eps) {
  RowGeometry g;
  if (auto err = CheckResidualQuantisedForwardBuffers(
          x, w, residual, eps, *values, *inv_rms, *scales, *sum, &g);
      err.failure()) {
    return err;
  }
  return ForwardOnRows(x, w, *inv_rms, g, eps, QuantisedRows{*values, *scales},
                       &residual, &*sum);
}

ffi::Error ScaledQuantisedForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w,
                                     ffi::AnyBuffer row_scales,
                                     ffi::Result<ffi::AnyBuffer> values,
                                     ffi::Result<ffi::AnyBuffer> inv_rms,
                                     ffi::Result<ffi::AnyBuffer> largest,
                                     double eps) {
  RowGeometry g;
  if (auto err = CheckScaledQuantisedForwardBuffers(x, w, row_scales, eps, *values,
                                                    *inv_rms, *largest, &g);
      err.failure()) {
    return err;
  }
  return ForwardOnRows(x, w, *inv_rms, g, eps,
                       QuantisedRows{*values, *largest, &row_scales});
}

ffi::Error ResidualScaledQuantisedForwardCpu(
    ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer residual,
    ffi::AnyBuffer row_scales, ffi::Result<ffi::AnyBuffer> values,
    ffi::Result<ffi::AnyBuffer> inv_rms, ffi::Result<ffi::AnyBuffer> largest,
    ffi::Result<ffi::AnyBuffer> sum, double eps) {
  RowGeometry g;
  if (auto err = CheckScaledQuantisedForwardBuffers(
          x, w, row_scales, eps, *values, *inv_rms, *largest, &g, &residual, &*sum);
      err.failure()) {
    return err;
  }
  return ForwardOnRows(x, w, *inv_rms, g, eps,
                       QuantisedRows{*values, *largest, &row_scales}, &residual,
                       &*sum);
}

ffi::Error BackwardCpu(ffi::AnyBuffer dy, ffi::AnyBuffer inv_rms,
                       ffi::AnyBuffer x, ffi::AnyBuffer w,
                       ffi::Result<ffi::AnyBuffer> dx,
                       ffi::Result<ffi::AnyBuffer> dw, double eps) {
  RowGeometry g;
  if (auto err = CheckBackwardBuffers(dy, inv_rms, x, w, eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  try {
    return DispatchCpu(
        x.element_type(), w.element_type(), [&](auto xt, auto wt) {
          using X = typename decltype(xt)::type;
          using W = typename decltype(wt)::type;
          Backward(
              static_cast<const W*>(dy.untyped_data()),
              static_cast<const AccumulatorFor<X>*>(inv_rms.untyped_data()),
              static_cast<const X*>(x.untyped_data()),
              static_cast<const W*>(w.untyped_data()),
              static_cast<X*>(dx->untyped_data()),
              static_cast<W*>(dw->untyped_data()), g);
          return ffi::Error::Success();
        });
  } catch (const std::bad_alloc&) {
    return ffi::Error::Internal(
        "gpu_ops rms_norm: out of memory for the weight-gradient accumulator");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormForwardCpu, ForwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // inv_rms
                                  .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormResidualForwardCpu, ResidualForwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Arg<ffi::AnyBuffer>()  // residual
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // inv_rms
                                  .Ret<ffi::AnyBuffer>()  // x + residual
                                  .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormQuantisedForwardCpu, QuantisedForwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Ret<ffi::AnyBuffer>()  // float8 values of y
                                  .Ret<ffi::AnyBuffer>()  // inv_rms
                                  .Ret<ffi::AnyBuffer>()  // scales
                                  .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormResidualQuantisedForwardCpu,
                              ResidualQuantisedForwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Arg<ffi::AnyBuffer>()  // residual
                                  .Ret<ffi::AnyBuffer>()  // float8 values of y
                                  .Ret<ffi::AnyBuffer>()  // inv_rms
                                  .Ret<ffi::AnyBuffer>()  // scales
                                  .Ret<ffi::AnyBuffer>()  // x + residual
                                  .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormScaledQuantisedForwardCpu,
                              ScaledQuantisedForwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Arg<ffi::AnyBuffer>()  // row_scales
                                  .Ret<ffi::AnyBuffer>()  // float8 values of y
                                  .Ret<ffi::AnyBuffer>()  // inv_rms
                                  .Ret<ffi::AnyBuffer>()  // groups' largest |y|
                                  .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormResidualScaledQuantisedForwardCpu,
                              ResidualScaledQuantisedForwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Arg<ffi::AnyBuffer>()  // residual
                                  .Arg<ffi::AnyBuffer>()  // row_scales
                                  .Ret<ffi::AnyBuffer>()  // float8 values of y
                                  .Ret<ffi::AnyBuffer>()  // inv_rms
                                  .Ret<ffi::AnyBuffer>()  // groups' largest |y|
                                  .Ret<ffi::AnyBuffer>()  // x + residual
                                  .Attr<double>("eps"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormBackwardCpu, BackwardCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::AnyBuffer>()  // inv_rms
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>()  // dweight
                                  .Attr<double>("eps"));

}  // namespace gpu_ops
