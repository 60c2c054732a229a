// The polynomial on the CPU, over float32 or bfloat16 (read as float32,
// computed in float32, rounded to nearest even on the way back).
#include <cstring>

#include "polynomial.h"

static float FromBFloat16(uint16_t bits) {
  const uint32_t widened = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

static uint16_t ToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

static ffi::Error PolynomialCpu(ffi::AnyBuffer x, ffi::Span<const float> coefficients,
                                ffi::Dictionary clip, ffi::Result<ffi::AnyBuffer> y) {
  ffi::ErrorOr<Polynomial> polynomial = ReadPolynomial(coefficients, clip);
  if (polynomial.has_error()) return polynomial.error();
  if (ffi::Error error = CheckLike(x, *y); error.failure()) return error;
  const size_t n = x.element_count();
  switch (x.element_type()) {
    case ffi::DataType::F32: {
      const float* in = static_cast<const float*>(x.untyped_data());
      float* out = static_cast<float*>(y->untyped_data());
      for (size_t i = 0; i < n; ++i) out[i] = (*polynomial)(in[i]);
      return ffi::Error::Success();
    }
    case ffi::DataType::BF16: {
      const uint16_t* in = static_cast<const uint16_t*>(x.untyped_data());
      uint16_t* out = static_cast<uint16_t*>(y->untyped_data());
      for (size_t i = 0; i < n; ++i) out[i] = ToBFloat16((*polynomial)(FromBFloat16(in[i])));
      return ffi::Error::Success();
    }
    default:
      return UnsupportedDtype();
  }
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(PolynomialCpuHandler, PolynomialCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const float>>("coefficients")
                                  .Attr<ffi::Dictionary>("clip")
                                  .Ret<ffi::AnyBuffer>());
