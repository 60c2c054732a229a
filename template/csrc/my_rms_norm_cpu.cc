// my_rms_norm on the CPU: a loop over rows, sums in double.
#include <cmath>
#include <cstring>
#include <vector>

#include "my_rms_norm.h"

namespace my_ops {
namespace {

// float16 and bfloat16 reach a CPU handler as raw 16-bit patterns. These
// types hold them, and Load and Store convert them to float and back with
// round-to-nearest-even, as the GPU's conversions do.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

uint32_t BitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

float FloatOf(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float Load(float v) { return v; }
float Load(BFloat16 v) { return FloatOf(uint32_t{v.bits} << 16); }
float Load(Half v) {
  const uint32_t sign = uint32_t{v.bits & 0x8000u} << 16;
  const uint32_t exponent = (v.bits >> 10) & 0x1fu, mantissa = v.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    return FloatOf(sign | BitsOf(std::ldexp(static_cast<float>(mantissa), -24)));
  }
  if (exponent == 0x1f) return FloatOf(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return FloatOf(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

template <typename T>
T Store(float f);
template <>
float Store(float f) { return f; }
template <>
BFloat16 Store(float f) {
  const uint32_t bits = BitsOf(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {uint16_t((bits >> 16) | 0x40u)};  // NaN
  return {uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16)};
}
template <>
Half Store(float f) {
  const uint32_t bits = BitsOf(f), magnitude = bits & 0x7fffffffu;
  const uint16_t sign = (bits >> 16) & 0x8000u;
  if (magnitude > 0x7f800000u) return {uint16_t(sign | 0x7e00u)};    // NaN
  if (magnitude >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};   // 65520 and up: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: subnormal, in units of 2^-24
    return {uint16_t(sign | uint16_t(std::nearbyint(FloatOf(magnitude) * 16777216.0f)))};
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return {uint16_t(sign | ((rounded - ((127u - 15u) << 23)) >> 13))};
}

// The forward, a row at a time.
template <typename T>
void ForwardRows(const T* in, const T* w, double eps, int64_t rows, int64_t n, T* out,
                 float* inv_rms) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * n;
    double squares = 0;
    for (int64_t j = 0; j < n; ++j) squares += double(Load(row[j])) * Load(row[j]);
    const float inv = static_cast<float>(1.0 / std::sqrt(squares / n + eps));
    inv_rms[r] = inv;
    for (int64_t j = 0; j < n; ++j) out[r * n + j] = Store<T>(Load(row[j]) * inv * Load(w[j]));
  }
}

ffi::Error Forward(ffi::AnyBuffer x, ffi::AnyBuffer weight, double eps,
                   ffi::Result<ffi::AnyBuffer> y, ffi::ResultBuffer<ffi::F32> inv_rms) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, *inv_rms, {*y}, {}, &rows, &n); error.failure()) {
    return error;
  }
  return ByDtype<Half, BFloat16>(x.element_type(), [&](auto type) {
    using T = decltype(type);
    ForwardRows(x.reinterpret_data<T>(), weight.reinterpret_data<T>(), eps, rows, n,
                y->reinterpret_data<T>(), inv_rms->typed_data());
    return ffi::Error::Success();
  });
}

// The backward, a row at a time; dweight sums over the rows in double.
template <typename T>
void BackwardRows(const T* g, const float* inv_rms, const T* in, const T* w, int64_t rows,
                  int64_t n, T* dx, T* dweight) {
  std::vector<double> dw(n, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double inv = inv_rms[r];
    double mean_gwx = 0;  // mean(dy * weight * x) over the row
    for (int64_t j = 0; j < n; ++j) {
      mean_gwx += double(Load(g[r * n + j])) * Load(w[j]) * Load(in[r * n + j]);
    }
    mean_gwx /= n;
    for (int64_t j = 0; j < n; ++j) {
      const double gi = Load(g[r * n + j]), xi = Load(in[r * n + j]);
      const double dxi = inv * (gi * Load(w[j]) - xi * inv * inv * mean_gwx);
      dx[r * n + j] = Store<T>(static_cast<float>(dxi));
      dw[j] += gi * xi * inv;
    }
  }
  for (int64_t j = 0; j < n; ++j) dweight[j] = Store<T>(static_cast<float>(dw[j]));
}

ffi::Error Backward(ffi::AnyBuffer dy, ffi::Buffer<ffi::F32> inv_rms, ffi::AnyBuffer x,
                    ffi::AnyBuffer weight, ffi::Result<ffi::AnyBuffer> dx,
                    ffi::Result<ffi::AnyBuffer> dweight) {
  int64_t rows, n;
  if (auto error = RowsOf(x, weight, inv_rms, {dy, *dx}, {*dweight}, &rows, &n);
      error.failure()) {
    return error;
  }
  return ByDtype<Half, BFloat16>(x.element_type(), [&](auto type) {
    using T = decltype(type);
    BackwardRows(dy.reinterpret_data<T>(), inv_rms.typed_data(), x.reinterpret_data<T>(),
                 weight.reinterpret_data<T>(), rows, n, dx->reinterpret_data<T>(),
                 dweight->reinterpret_data<T>());
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormForwardCpu, Forward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Attr<double>("eps")
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::Buffer<ffi::F32>>());  // inv_rms

XLA_FFI_DEFINE_HANDLER_SYMBOL(MyRmsNormBackwardCpu, Backward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::Buffer<ffi::F32>>()  // inv_rms
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>());  // dweight

}  // namespace my_ops
