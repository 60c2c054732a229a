// my_rms_norm's FFI handlers: rows of float16, bfloat16 or float32 normalised
// over their last axis, with sums in float32 (double on the CPU).
//   forward:  (x, weight; eps) -> (y, inv_rms)
//   backward: (dy, inv_rms, x, weight) -> (dx, dweight)
// x, weight, y, dy, dx and dweight share one dtype; inv_rms is float32.
#ifndef MY_OPS_MY_RMS_NORM_H_
#define MY_OPS_MY_RMS_NORM_H_

#include <cstdint>
#include <initializer_list>

#include "xla/ffi/api/ffi.h"

namespace my_ops {

namespace ffi = xla::ffi;

// x's number of rows into *rows and their length into *n, or an error where
// a buffer does not fit x: the weight and `like_weight` (dweight) one axis as
// long as x's last, `like_x` (y, dy, dx) x's size, inv_rms one value per row,
// and all but inv_rms x's dtype. XLA passes what the Python side declared;
// this check turns a mistake there into an error, not a write out of bounds.
inline ffi::Error RowsOf(const ffi::AnyBuffer& x, const ffi::AnyBuffer& weight,
                         const ffi::Buffer<ffi::F32>& inv_rms,
                         std::initializer_list<ffi::AnyBuffer> like_x,
                         std::initializer_list<ffi::AnyBuffer> like_weight, int64_t* rows,
                         int64_t* n) {
  const auto dims = x.dimensions();
  if (dims.size() == 0) return ffi::Error::InvalidArgument("my_rms_norm: x must have an axis");
  *n = dims.back();
  *rows = 1;
  for (size_t axis = 0; axis + 1 < dims.size(); ++axis) *rows *= dims[axis];
  auto fits = [&](const ffi::AnyBuffer& buffer, size_t count) {
    return buffer.element_type() == x.element_type() && buffer.element_count() == count;
  };
  bool ok = weight.dimensions().size() == 1 && fits(weight, *n) &&
            inv_rms.element_count() == size_t(*rows);
  for (const auto& buffer : like_x) ok = ok && fits(buffer, x.element_count());
  for (const auto& buffer : like_weight) ok = ok && fits(buffer, *n);
  if (!ok) {
    return ffi::Error::InvalidArgument(
        "my_rms_norm: the weight (and dweight) must be one axis as long as x's last, y, dy "
        "and dx x's size, inv_rms one float32 per row, and all but inv_rms x's dtype");
  }
  return ffi::Error::Success();
}

// fn(T{}) with T this platform's C++ type for `dtype`: each platform names
// its own 16-bit types (the CPU raw bits, CUDA __half and __nv_bfloat16), and
// this is the one place that says which dtypes the handlers take.
template <typename Half, typename BFloat16, typename Fn>
ffi::Error ByDtype(ffi::DataType dtype, Fn&& fn) {
  switch (dtype) {
    case ffi::DataType::F16: return fn(Half{});
    case ffi::DataType::BF16: return fn(BFloat16{});
    case ffi::DataType::F32: return fn(float{});
    default:
      return ffi::Error::InvalidArgument("my_rms_norm: x must be float16, bfloat16 or float32");
  }
}

XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormForwardCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormBackwardCpu);
#ifdef MY_OPS_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormForwardCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormBackwardCuda);
#endif

}  // namespace my_ops

#endif  // MY_OPS_MY_RMS_NORM_H_
