// float8_e4m3fn on the host: 1 sign bit, 4 exponent bits (bias 7) and 3
// mantissa bits, no infinities, one NaN pattern per sign (0x7f, 0xff); the
// largest finite value is 448. CUDA has its own conversion (cuda_fp8.h).
#ifndef GPU_OPS_FLOAT8_E4M3_H_
#define GPU_OPS_FLOAT8_E4M3_H_

#include <cmath>
#include <cstdint>

namespace gpu_ops {

constexpr float kFloat8E4M3Max = 448.0f;

// v rounded to the nearest float8_e4m3fn value (ties to even), saturating:
// values beyond +-448 become +-448, as cuda_fp8.h's __NV_SATFINITE does.
inline uint8_t ToFloat8E4M3(double v) {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);
  if (a >= kFloat8E4M3Max) return sign | 0x7e;
  // Below the smallest normal, 2^-6, values are multiples of 2^-9; a
  // multiple of 8 of them is 2^-6 itself, whose bits read the same way.
  if (a < std::ldexp(1.0, -6)) {
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int exponent = 0;
  const double fraction = std::frexp(a, &exponent);  // a = fraction * 2^exponent
  // a = (1 + m / 8) * 2^(exponent - 1), m rounded to even.
  int mantissa = static_cast<int>(std::nearbyint((2 * fraction - 1) * 8));
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  return sign | static_cast<uint8_t>(((exponent - 1 + 7) << 3) | mantissa);
}

// The value of float8_e4m3fn bits, exactly (every one is a float).
inline float FromFloat8E4M3(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0x0f;
  const int mantissa = bits & 0x07;
  if (exponent == 0x0f && mantissa == 0x07) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
}

}  // namespace gpu_ops

#endif  // GPU_OPS_FLOAT8_E4M3_H_
