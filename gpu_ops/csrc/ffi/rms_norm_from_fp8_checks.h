// Buffer validation for the norm of a float8 input (rms_norm_checks.h has
// the rest): float8_e4m3fn values, one float32 scale per group of
// kFloat8Group values of a row, and a weight of one dimension, a multiple of
// kFloat8Group long, of float16, bfloat16 or float32. y, dy and dx have the
// weight's dtype; inv_rms is float32.
#ifndef GPU_OPS_RMS_NORM_FROM_FP8_CHECKS_H_
#define GPU_OPS_RMS_NORM_FROM_FP8_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ffi/rms_norm_checks.h"

namespace gpu_ops {

// values, weight and scales fit together; `geometry` receives the rows.
inline ffi::Error CheckFloat8Input(const ffi::AnyBuffer& values,
                                   const ffi::AnyBuffer& w,
                                   const ffi::AnyBuffer& scales, double eps,
                                   RowGeometry* geometry) {
  if (values.element_type() != ffi::DataType::F8E4M3FN) {
    return Invalid(std::string("values must be float8_e4m3fn, got ") +
                   DTypeName(values.element_type()));
  }
  const ffi::DataType w_type = w.element_type();
  if (w_type != ffi::DataType::F16 && w_type != ffi::DataType::BF16 &&
      w_type != ffi::DataType::F32) {
    return Invalid("weight must be float16, bfloat16 or float32");
  }
  const auto dims = values.dimensions();
  if (w.dimensions().size() != 1 || dims.size() < 1 ||
      dims.back() != w.dimensions()[0] || w.dimensions()[0] < 1 ||
      w.dimensions()[0] % kFloat8Group != 0) {
    return Invalid("the weight must be one axis as long as the values' last, a "
                   "multiple of " + std::to_string(kFloat8Group) +
                   "; got values " + DimsToString(dims) + " and weight " +
                   DimsToString(w.dimensions()));
  }
  if (!std::isfinite(eps) || eps < 0) {
    return Invalid("eps must be a finite number >= 0");
  }
  geometry->row_length = w.dimensions()[0];
  geometry->rows = static_cast<int64_t>(values.element_count()) / geometry->row_length;
  std::vector<int64_t> scale_dims(dims.begin(), dims.end());
  scale_dims.back() = geometry->row_length / kFloat8Group;
  return ExpectBuffer(
      "scales", scales, ffi::DataType::F32,
      ffi::AnyBuffer::Dimensions(scale_dims.data(), scale_dims.size()));
}

inline ffi::Error CheckFromFloat8ForwardBuffers(
    const ffi::AnyBuffer& values, const ffi::AnyBuffer& w,
    const ffi::AnyBuffer& scales, double eps, const ffi::AnyBuffer& y,
    const ffi::AnyBuffer& inv_rms, RowGeometry* geometry) {
  if (auto err = CheckFloat8Input(values, w, scales, eps, geometry); err.failure()) {
    return err;
  }
  if (auto err = ExpectBuffer("y", y, w.element_type(), values.dimensions());
      err.failure()) {
    return err;
  }
  return ExpectBuffer("inv_rms", inv_rms, ffi::DataType::F32, LeadingDims(values, w));
}

inline ffi::Error CheckFromFloat8BackwardBuffers(
    const ffi::AnyBuffer& dy, const ffi::AnyBuffer& inv_rms,
    const ffi::AnyBuffer& values, const ffi::AnyBuffer& w,
    const ffi::AnyBuffer& scales, double eps, const ffi::AnyBuffer& dx,
    const ffi::AnyBuffer& dw, RowGeometry* geometry) {
  if (auto err = CheckFloat8Input(values, w, scales, eps, geometry); err.failure()) {
    return err;
  }
  const ffi::Error checks[] = {
      ExpectBuffer("dy", dy, w.element_type(), values.dimensions()),
      ExpectBuffer("inv_rms", inv_rms, ffi::DataType::F32, LeadingDims(values, w)),
      ExpectBuffer("dx", dx, w.element_type(), values.dimensions()),
      ExpectBuffer("dweight", dw, w.element_type(), w.dimensions()),
  };
  for (const ffi::Error& err : checks) {
    if (err.failure()) return err;
  }
  return ffi::Error::Success();
}

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_FROM_FP8_CHECKS_H_
