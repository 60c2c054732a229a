// RMS norm on the CPU: a straightforward reference implementation, so that
// every chapter of the book runs on a machine without a GPU.
#include <cmath>
#include <cstdint>
#include <new>
#include <vector>

#include "cpu_half_types.h"
#include "dtype_dispatch.h"
#include "rms_norm_checks.h"
#include "rms_norm_handlers.h"

namespace gpu_ops {
namespace {

template <typename X, typename W>
void ForwardRows(const X* x, const W* w, W* y, AccumulatorFor<X>* inv_rms,
                 RowGeometry g, double eps) {
  using A = AccumulatorFor<X>;
  for (int64_t r = 0; r < g.rows; ++r) {
    const X* x_row = x + r * g.row_length;
    W* y_row = y + r * g.row_length;
    A sum_squares = 0;
    for (int64_t c = 0; c < g.row_length; ++c) {
      const A v = Load<A>(x_row[c]);
      sum_squares += v * v;
    }
    const A inv = A(1) / std::sqrt(sum_squares / A(g.row_length) + A(eps));
    for (int64_t c = 0; c < g.row_length; ++c) {
      y_row[c] = Store<W>::From(Load<A>(w[c]) * (inv * Load<A>(x_row[c])));
    }
    inv_rms[r] = inv;
  }
}

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv
template <typename X, typename W>
void BackwardRows(const W* dy, const AccumulatorFor<X>* inv_rms, const X* x,
                  const W* w, X* dx, W* dw, RowGeometry g) {
  using A = AccumulatorFor<X>;
  std::vector<A> dw_sum(static_cast<size_t>(g.row_length), A(0));
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t offset = r * g.row_length;
    const A inv = inv_rms[r];
    A dot = 0;
    for (int64_t c = 0; c < g.row_length; ++c) {
      const A xv = Load<A>(x[offset + c]);
      const A dyv = Load<A>(dy[offset + c]);
      dot += dyv * Load<A>(w[c]) * xv;
      dw_sum[c] += dyv * xv * inv;
    }
    const A correction = inv * inv * dot / A(g.row_length);
    for (int64_t c = 0; c < g.row_length; ++c) {
      const A xv = Load<A>(x[offset + c]);
      const A dyw = Load<A>(dy[offset + c]) * Load<A>(w[c]);
      dx[offset + c] = Store<X>::From(inv * (dyw - xv * correction));
    }
  }
  for (int64_t c = 0; c < g.row_length; ++c) {
    dw[c] = Store<W>::From(dw_sum[c]);
  }
}

template <typename Fn>
ffi::Error DispatchCpu(ffi::DataType x_type, ffi::DataType w_type, Fn&& fn) {
  return DispatchFloatPair<Float16Bits, BFloat16Bits>(x_type, w_type, fn);
}

ffi::Error ForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer w,
                      ffi::Result<ffi::AnyBuffer> y,
                      ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckForwardBuffers(x, w, eps, *y, *inv_rms, &g);
      err.failure()) {
    return err;
  }
  return DispatchCpu(x.element_type(), w.element_type(), [&](auto xt, auto wt) {
    using X = typename decltype(xt)::type;
    using W = typename decltype(wt)::type;
    ForwardRows(static_cast<const X*>(x.untyped_data()),
                static_cast<const W*>(w.untyped_data()),
                static_cast<W*>(y->untyped_data()),
                static_cast<AccumulatorFor<X>*>(inv_rms->untyped_data()), g,
                eps);
    return ffi::Error::Success();
  });
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
          BackwardRows(
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
