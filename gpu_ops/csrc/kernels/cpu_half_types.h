// 16-bit floating-point storage types for the CPU implementation.
//
// XLA passes float16 and bfloat16 buffers to CPU handlers as raw 16-bit
// patterns; these types convert them to and from float with IEEE
// round-to-nearest-even, so the CPU results match the CUDA ones.
#ifndef GPU_OPS_CPU_HALF_TYPES_H_
#define GPU_OPS_CPU_HALF_TYPES_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace gpu_ops {

struct Float16Bits {
  uint16_t bits;
};

struct BFloat16Bits {
  uint16_t bits;
};

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float ToFloat(Float16Bits h) {
  const uint32_t sign = (h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {  // infinity or NaN
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline Float16Bits ToFloat16(float f) {
  const uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity stays, NaN stays quiet NaN
    return {static_cast<uint16_t>(sign | 0x7c00u |
                                  (magnitude > 0x7f800000u ? 0x200u : 0u))};
  }
  if (magnitude >= 0x477ff000u) {  // rounds to 65536 or more: infinity
    return {static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (magnitude < 0x38800000u) {  // below 2^-14: a float16 subnormal
    const float scaled = BitsToFloat(magnitude) * 16777216.0f;  // * 2^24
    return {static_cast<uint16_t>(sign | static_cast<uint32_t>(
                                             std::nearbyint(scaled)))};
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return {static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13))};
}

inline float ToFloat(BFloat16Bits b) {
  return BitsToFloat(static_cast<uint32_t>(b.bits) << 16);
}

inline BFloat16Bits ToBFloat16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN
    return {static_cast<uint16_t>((x >> 16) | 0x40u)};
  }
  return {static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

// Load any supported storage type as the accumulation type A, and store back.
template <typename A>
inline A Load(float v) { return static_cast<A>(v); }
template <typename A>
inline A Load(double v) { return static_cast<A>(v); }
template <typename A>
inline A Load(Float16Bits v) { return static_cast<A>(ToFloat(v)); }
template <typename A>
inline A Load(BFloat16Bits v) { return static_cast<A>(ToFloat(v)); }

template <typename T>
struct Store;
template <>
struct Store<float> {
  template <typename A>
  static float From(A v) { return static_cast<float>(v); }
};
template <>
struct Store<double> {
  template <typename A>
  static double From(A v) { return static_cast<double>(v); }
};
template <>
struct Store<Float16Bits> {
  template <typename A>
  static Float16Bits From(A v) { return ToFloat16(static_cast<float>(v)); }
};
template <>
struct Store<BFloat16Bits> {
  template <typename A>
  static BFloat16Bits From(A v) { return ToBFloat16(static_cast<float>(v)); }
};

}  // namespace gpu_ops

#endif  // GPU_OPS_CPU_HALF_TYPES_H_
