// The CPU handlers: RMS norm on the CPU, a straightforward reference
// implementation (kernels/rms_norm_cpu_rows.h), so that every chapter of the
// book runs on a machine without a GPU.
#include <cstdint>
#include <new>

#include "ffi/rms_norm_checks.h"
#include "ffi/rms_norm_handlers.h"
#include "ffi/variant_buffers.h"
#include "kernels/call_buffers.h"
#include "kernels/cpu_half_types.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/rms_norm_cpu_rows.h"

namespace gpu_ops {
namespace {

template <typename Fn>
ffi::Error DispatchCpu(ffi::DataType x_type, ffi::DataType w_type, Fn&& fn) {
  return DispatchFloatPair<Float16Bits, BFloat16Bits>(x_type, w_type, fn);
}

// The forward of x (or, where residual and sum are given, of x + residual)
// into `output` (NormalisedRows or QuantisedRows).
template <typename Output>
ffi::Error ForwardOnRows(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                         const ffi::AnyBuffer& inv_rms, RowGeometry g, double eps,
                         const Output& output, const ffi::AnyBuffer* residual,
                         const ffi::AnyBuffer* sum) {
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

// The forward, with a residual add where the call's attribute `residual`
// says so (then `added` holds the residual, `added_results` x + residual).
ffi::Error ForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::RemainingArgs added,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> inv_rms,
                      ffi::RemainingRets added_results, double eps, bool residual) {
  auto variants = TakeVariants(added, added_results, residual, /*scaled=*/false);
  if (variants.has_error()) return variants.error();
  const ResidualForwardBuffers b{x, w, *y, *inv_rms, variants->Residual(), variants->Sum()};
  RowGeometry g;
  if (auto err = CheckForward(b, eps, &g); err.failure()) return err;
  return ForwardOnRows(b.x, b.w, b.inv_rms, g, eps, NormalisedRows{b.y, b.x.element_type()},
                       b.residual, b.sum);
}

// The forward quantised to float8, with the variants the call's attributes
// name (a residual add, a given scale per row).
ffi::Error QuantisedForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::RemainingArgs added,
                               ffi::Result<ffi::AnyBuffer> values,
                               ffi::Result<ffi::AnyBuffer> inv_rms,
                               ffi::Result<ffi::AnyBuffer> scales,
                               ffi::RemainingRets added_results, double eps, bool residual,
                               bool scaled) {
  auto variants = TakeVariants(added, added_results, residual, scaled);
  if (variants.has_error()) return variants.error();
  const QuantisedForwardBuffers b{x, w, *values, *inv_rms, *scales, variants->Residual(),
                                  variants->Sum(), variants->RowScales()};
  RowGeometry g;
  if (auto err = CheckQuantisedForward(b, eps, &g); err.failure()) return err;
  return ForwardOnRows(b.x, b.w, b.inv_rms, g, eps,
                       QuantisedRows{b.values, b.scales, b.row_scales}, b.residual, b.sum);
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
          DispatchOutput<X, W>(x.element_type(), dy.element_type(), [&](auto tag) {
            using DY = typename decltype(tag)::type;
            Backward<X, W, X, DY>(
                static_cast<const DY*>(dy.untyped_data()),
                static_cast<const AccumulatorFor<X>*>(inv_rms.untyped_data()),
                static_cast<const X*>(x.untyped_data()),
                static_cast<const W*>(w.untyped_data()),
                static_cast<X*>(dx->untyped_data()),
                static_cast<W*>(dw->untyped_data()), g);
          });
          return ffi::Error::Success();
        });
  } catch (const std::bad_alloc&) {
    return ffi::Error::Internal(
        "gpu_ops rms_norm: out of memory for the weight-gradient accumulator");
  }
}

}  // namespace

GPU_OPS_DEFINE_CPU_HANDLER(Forward);
GPU_OPS_DEFINE_CPU_HANDLER(QuantisedForward);
GPU_OPS_DEFINE_CPU_HANDLER(Backward);
}  // namespace gpu_ops
