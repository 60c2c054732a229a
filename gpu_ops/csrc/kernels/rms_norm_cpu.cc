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

namespace gpu_ops {
namespace {

// Every sum is taken in double, pairwise: its rounding error grows with the
// logarithm of its length, not with the length, so a row of 2^25 values or a
// weight gradient over millions of rows is as exact as a short one. (A
// sequential float32 sum of 2^25 ones stops growing at 2^24.)
constexpr int64_t kPairwiseLeaf = 128;

template <typename F>
double PairwiseSum(int64_t begin, int64_t end, const F& term) {
  if (end - begin <= kPairwiseLeaf) {
    double sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += term(i);
    return sum;
  }
  const int64_t middle = begin + (end - begin) / 2;
  return PairwiseSum(begin, middle, term) + PairwiseSum(middle, end, term);
}

// sum = x + residual, rounded to x's dtype once, as jnp's x + residual is:
// the sum of two values of x's dtype is exact in double for 16-bit values,
// and rounds to the nearest float32 or float64 as their own addition does.
// Returns sum, for the caller to normalise while it is still in the cache.
template <typename X>
const X* AddRow(const X* x, const X* residual, X* sum, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    sum[c] = Store<X>::From(Load<double>(x[c]) + Load<double>(residual[c]));
  }
  return sum;
}

// Each row of x, or with a residual of x + residual (AddRow): its inverse
// RMS into inv_rms, then write(r, row, inv) writes its output.
template <typename X, typename Write>
void ForwardRows(const X* x, AccumulatorFor<X>* inv_rms, RowGeometry g,
                 double eps, const X* residual, X* sum, Write write) {
  const int64_t n = g.row_length;
  for (int64_t r = 0; r < g.rows; ++r) {
    const X* x_row = x + r * n;
    if (residual != nullptr) {
      x_row = AddRow(x_row, residual + r * n, sum + r * n, n);
    }
    const double sum_squares = PairwiseSum(0, n, [&](int64_t c) {
      const double v = Load<double>(x_row[c]);
      return v * v;
    });
    const double inv = 1.0 / std::sqrt(sum_squares / double(n) + eps);
    inv_rms[r] = static_cast<AccumulatorFor<X>>(inv);
    write(r, x_row, inv);
  }
}

// The outputs ForwardRows writes: each makes, for the element types of x
// and the weight, the function that writes a row.

// y = w * (inv * x), in the weight's dtype.
struct NormalisedRows {
  ffi::AnyBuffer& y;

  template <typename X, typename W>
  auto For(const W* w, int64_t n) const {
    W* out = static_cast<W*>(y.untyped_data());
    return [=](int64_t r, const X* row, double inv) {
      for (int64_t c = 0; c < n; ++c) {
        out[r * n + c] = Store<W>::From(Load<double>(w[c]) * (inv * Load<double>(row[c])));
      }
    };
  }
};

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

// dx = inv * (dy*w - x * inv^2 * mean(dy*w*x));  dweight = sum_rows dy*x*inv
//
// BackwardRows computes dx for rows [begin, end) and adds their part of the
// weight gradient to dw_sum, splitting the rows in halves (each half into a
// vector of its own) down to kPairwiseLeaf rows: the weight gradient's sums
// over rows are pairwise too.
template <typename X, typename W>
void BackwardRows(const W* dy, const AccumulatorFor<X>* inv_rms, const X* x,
                  const W* w, X* dx, double* dw_sum, RowGeometry g,
                  int64_t begin, int64_t end) {
  const int64_t n = g.row_length;
  if (end - begin > kPairwiseLeaf) {
    const int64_t middle = begin + (end - begin) / 2;
    std::vector<double> second_half(static_cast<size_t>(n), 0.0);
    BackwardRows(dy, inv_rms, x, w, dx, dw_sum, g, begin, middle);
    BackwardRows(dy, inv_rms, x, w, dx, second_half.data(), g, middle, end);
    for (int64_t c = 0; c < n; ++c) dw_sum[c] += second_half[c];
    return;
  }
  for (int64_t r = begin; r < end; ++r) {
    const X* x_row = x + r * n;
    const W* dy_row = dy + r * n;
    const double inv = inv_rms[r];
    const double dot = PairwiseSum(0, n, [&](int64_t c) {
      return Load<double>(dy_row[c]) * Load<double>(w[c]) * Load<double>(x_row[c]);
    });
    const double correction = inv * inv * dot / double(n);
    for (int64_t c = 0; c < n; ++c) {
      const double xv = Load<double>(x_row[c]);
      const double dyv = Load<double>(dy_row[c]);
      dx[r * n + c] = Store<X>::From(inv * (dyv * Load<double>(w[c]) - xv * correction));
      dw_sum[c] += dyv * xv * inv;
    }
  }
}

template <typename X, typename W>
void Backward(const W* dy, const AccumulatorFor<X>* inv_rms, const X* x,
              const W* w, X* dx, W* dw, RowGeometry g) {
  std::vector<double> dw_sum(static_cast<size_t>(g.row_length), 0.0);
  BackwardRows(dy, inv_rms, x, w, dx, dw_sum.data(), g, 0, g.rows);
  for (int64_t c = 0; c < g.row_length; ++c) {
    dw[c] = Store<W>::From(dw_sum[c]);
  }
}

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
