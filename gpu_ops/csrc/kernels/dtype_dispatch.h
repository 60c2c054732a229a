// Turns the runtime dtypes of x and weight into C++ types for a templated
// implementation. Each platform names its own 16-bit storage types (the CPU
// code uses raw bit patterns, CUDA uses __half and __nv_bfloat16).
#ifndef GPU_OPS_DTYPE_DISPATCH_H_
#define GPU_OPS_DTYPE_DISPATCH_H_

#include <type_traits>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

template <typename T>
struct TypeTag {
  using type = T;
};

// Accumulation type: float64 for float64 inputs, float32 for everything else.
// It is also the dtype of the inverse RMS.
template <typename T>
using AccumulatorFor =
    std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls fn(TypeTag<T>{}) with T the C++ type for `dtype`.
template <typename Half, typename BFloat16, typename Fn>
xla::ffi::Error DispatchFloat(xla::ffi::DataType dtype, Fn&& fn) {
  switch (dtype) {
    case xla::ffi::DataType::F16: return fn(TypeTag<Half>{});
    case xla::ffi::DataType::BF16: return fn(TypeTag<BFloat16>{});
    case xla::ffi::DataType::F32: return fn(TypeTag<float>{});
    case xla::ffi::DataType::F64: return fn(TypeTag<double>{});
    default:
      return xla::ffi::Error::InvalidArgument(
          "gpu_ops rms_norm: unsupported dtype");
  }
}

// Calls fn(TypeTag<X>{}, TypeTag<W>{}) for the dtypes of x and weight.
template <typename Half, typename BFloat16, typename Fn>
xla::ffi::Error DispatchFloatPair(xla::ffi::DataType x_type,
                                  xla::ffi::DataType w_type, Fn&& fn) {
  return DispatchFloat<Half, BFloat16>(x_type, [&](auto x_tag) {
    return DispatchFloat<Half, BFloat16>(
        w_type, [&](auto w_tag) { return fn(x_tag, w_tag); });
  });
}

// Calls fn(TypeTag<Y>{}) for y's (or dy's) C++ type Y, whose dtype is
// `out_type`: X where that is x's, `x_type` (the caller's out_dtype), else
// the weight's, W.
template <typename X, typename W, typename Fn>
decltype(auto) DispatchOutput(xla::ffi::DataType x_type, xla::ffi::DataType out_type,
                              Fn&& fn) {
  if constexpr (!std::is_same_v<X, W>) {
    if (out_type == x_type) return fn(TypeTag<X>{});
  }
  return fn(TypeTag<W>{});
}

}  // namespace gpu_ops

#endif  // GPU_OPS_DTYPE_DISPATCH_H_
