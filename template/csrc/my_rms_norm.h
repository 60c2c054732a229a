// my_rms_norm's FFI handlers: float32 rows normalised over their last axis.
//   forward:  (x, weight; eps) -> (y, inv_rms)
//   backward: (dy, inv_rms, x, weight) -> (dx, dweight)
#ifndef MY_OPS_MY_RMS_NORM_H_
#define MY_OPS_MY_RMS_NORM_H_

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace my_ops {

namespace ffi = xla::ffi;

// x's number of rows into *rows and their length into *n, or an error where
// the weight is not one axis as long as x's last.
inline ffi::Error RowsOf(ffi::Buffer<ffi::F32>& x, ffi::Buffer<ffi::F32>& weight,
                         int64_t* rows, int64_t* n) {
  const auto dims = x.dimensions();
  if (dims.size() == 0 || weight.dimensions().size() != 1 ||
      weight.dimensions()[0] != dims.back()) {
    return ffi::Error::InvalidArgument("my_rms_norm: weight must be one axis as long as x's last");
  }
  *n = dims.back();
  *rows = *n == 0 ? 0 : x.element_count() / *n;
  return ffi::Error::Success();
}

XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormForwardCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormBackwardCpu);
#ifdef MY_OPS_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormForwardCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MyRmsNormBackwardCuda);
#endif

}  // namespace my_ops

#endif  // MY_OPS_MY_RMS_NORM_H_
