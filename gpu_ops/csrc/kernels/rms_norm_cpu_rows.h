// The rows of the CPU implementation (its handlers: ffi/rms_norm_cpu.cc),
// shared with the norm of a float8 input (ffi/rms_norm_from_fp8_cpu.cc): the
// forward's inverse RMS and its normalised or float8 output, and the
// backward, every sum in double.
#ifndef GPU_OPS_RMS_NORM_CPU_ROWS_H_
#define GPU_OPS_RMS_NORM_CPU_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu_half_types.h"
#include "kernels/dtype_dispatch.h"
#include "kernels/float8_e4m3.h"
#include "kernels/row_geometry.h"

namespace gpu_ops {

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

// The outputs ForwardRows writes (this one, and QuantisedRows in
// rms_norm_cpu.cc): each makes, for the element types of x and the weight,
// the function that writes a row.

// y = w * (inv * x), in y's dtype: the weight's, or x's, `x_type` (the
// caller's out_dtype).
struct NormalisedRows {
  const ffi::AnyBuffer& y;
  ffi::DataType x_type = ffi::DataType::INVALID;  // (none: y in the weight's dtype)

  template <typename X, typename W>
  auto For(const W* w, int64_t n) const {
    void* out = y.untyped_data();
    const ffi::DataType x_dtype = x_type, y_dtype = y.element_type();
    return [=](int64_t r, const X* row, double inv) {
      DispatchOutput<X, W>(x_dtype, y_dtype, [&](auto tag) {
        using Y = typename decltype(tag)::type;
        Y* y_row = static_cast<Y*>(out) + r * n;
        for (int64_t c = 0; c < n; ++c) {
          y_row[c] = Store<Y>::From(Load<double>(w[c]) * (inv * Load<double>(row[c])));
        }
      });
    };
  }
};

// y quantised to float8_e4m3fn in groups of kFloat8Group values of a row:
// each group's scale is its largest |y| over 448 (1 for a group of zeros),
// and its values are y / scale, rounded (float8_e4m3.h). With row_scales,
// every value of row r is y / row_scales[r] instead, and `scales` receives
// each group's largest |y|.
struct QuantisedRows {
  const ffi::AnyBuffer& values;
  const ffi::AnyBuffer& scales;
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
// BackwardRows computes dx (of dtype D, x's unless given) for rows
// [begin, end), from dy of dtype DY (the weight's unless given: y's), and
// adds their part of the weight gradient to dw_sum, splitting the rows in
// halves (each half into a vector of its own) down to kPairwiseLeaf rows:
// the weight gradient's sums over rows are pairwise too.
template <typename X, typename W, typename D = X, typename DY = W>
void BackwardRows(const DY* dy, const AccumulatorFor<X>* inv_rms, const X* x,
                  const W* w, D* dx, double* dw_sum, RowGeometry g,
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
    const DY* dy_row = dy + r * n;
    const double inv = inv_rms[r];
    const double dot = PairwiseSum(0, n, [&](int64_t c) {
      return Load<double>(dy_row[c]) * Load<double>(w[c]) * Load<double>(x_row[c]);
    });
    const double correction = inv * inv * dot / double(n);
    for (int64_t c = 0; c < n; ++c) {
      const double xv = Load<double>(x_row[c]);
      const double dyv = Load<double>(dy_row[c]);
      dx[r * n + c] = Store<D>::From(inv * (dyv * Load<double>(w[c]) - xv * correction));
      dw_sum[c] += dyv * xv * inv;
    }
  }
}

template <typename X, typename W, typename D = X, typename DY = W>
void Backward(const DY* dy, const AccumulatorFor<X>* inv_rms, const X* x,
              const W* w, D* dx, W* dw, RowGeometry g) {
  std::vector<double> dw_sum(static_cast<size_t>(g.row_length), 0.0);
  BackwardRows(dy, inv_rms, x, w, dx, dw_sum.data(), g, 0, g.rows);
  for (int64_t c = 0; c < g.row_length; ++c) {
    dw[c] = Store<W>::From(dw_sum[c]);
  }
}

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_CPU_ROWS_H_
