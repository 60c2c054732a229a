// A polynomial activation, y = clip(c0 + c1 x + c2 x^2 + ..., low, high):
// the attributes recipe (an array attribute and a dictionary attribute) and
// one handler over two dtypes. What both platforms share is here; each
// library includes it from one source file.
#pragma once

#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// The coefficients travel to a GPU kernel by value, so their number is bounded.
constexpr int64_t kMaxCoefficients = 16;

struct Polynomial {
  float coefficients[kMaxCoefficients];  // c0 first
  int count;
  float low, high;

#ifdef __CUDACC__
  __host__ __device__
#endif
  float operator()(float x) const {
    float y = 0.0f;
    for (int k = count - 1; k >= 0; --k) y = y * x + coefficients[k];  // Horner
    return y < low ? low : (y > high ? high : y);
  }
};

// The attributes of a call, checked: an array of float32 coefficients, and a
// dictionary {"low": float, "high": float}.
inline ffi::ErrorOr<Polynomial> ReadPolynomial(ffi::Span<const float> coefficients,
                                               const ffi::Dictionary& clip) {
  if (coefficients.size() == 0 || coefficients.size() > kMaxCoefficients) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(
        "polynomial: 1 to 16 coefficients, got " + std::to_string(coefficients.size())));
  }
  ffi::ErrorOr<double> low = clip.get<double>("low");
  if (low.has_error()) return ffi::Unexpected(low.error());
  ffi::ErrorOr<double> high = clip.get<double>("high");
  if (high.has_error()) return ffi::Unexpected(high.error());
  Polynomial polynomial{};
  for (size_t k = 0; k < coefficients.size(); ++k) polynomial.coefficients[k] = coefficients[k];
  polynomial.count = static_cast<int>(coefficients.size());
  polynomial.low = static_cast<float>(*low);
  polynomial.high = static_cast<float>(*high);
  return polynomial;
}

// x and y have one dtype and one size; which dtypes a platform computes is
// its handler's switch.
inline ffi::Error CheckLike(const ffi::AnyBuffer& x, const ffi::AnyBuffer& y) {
  if (y.element_type() != x.element_type() || y.element_count() != x.element_count()) {
    return ffi::Error::InvalidArgument("polynomial: y must have x's shape and dtype");
  }
  return ffi::Error::Success();
}

inline ffi::Error UnsupportedDtype() {
  return ffi::Error::InvalidArgument("polynomial: x must be float32 or bfloat16");
}
