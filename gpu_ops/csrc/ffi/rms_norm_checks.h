// Buffer validation shared by the CPU and CUDA handlers.
//
// XLA hands a handler raw buffers; nothing stops a caller of the FFI target
// (jax.ffi.ffi_call, a hand-written custom call) from passing buffers that do
// not fit together. Every handler therefore checks dtypes and sizes here and
// returns an ffi::Error instead of reading or writing out of bounds.
#ifndef GPU_OPS_RMS_NORM_CHECKS_H_
#define GPU_OPS_RMS_NORM_CHECKS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/call_buffers.h"
#include "kernels/row_geometry.h"
#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

namespace ffi = xla::ffi;

inline bool IsSupportedFloat(ffi::DataType t) {
  return t == ffi::DataType::F16 || t == ffi::DataType::BF16 ||
         t == ffi::DataType::F32 || t == ffi::DataType::F64;
}

// The inverse RMS is float32 for 16-bit inputs and the input's dtype otherwise.
inline ffi::DataType InvRmsType(ffi::DataType x_type) {
  return x_type == ffi::DataType::F64 ? ffi::DataType::F64
                                      : ffi::DataType::F32;
}

inline const char* DTypeName(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F16: return "float16";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::F64: return "float64";
    case ffi::DataType::F8E4M3FN: return "float8_e4m3fn";
    default: return "a non-floating or unsupported type";
  }
}

inline std::string DimsToString(ffi::AnyBuffer::Dimensions dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(dims[i]);
  }
  return s + (dims.size() == 1 ? ",)" : ")");
}

inline ffi::Error Invalid(const std::string& message) {
  return ffi::Error::InvalidArgument("gpu_ops rms_norm: " + message);
}

inline ffi::Error ExpectBuffer(const char* name, const ffi::AnyBuffer& buffer,
                               ffi::DataType dtype,
                               ffi::AnyBuffer::Dimensions dims) {
  if (buffer.element_type() != dtype) {
    return Invalid(std::string(name) + " has dtype " +
                   DTypeName(buffer.element_type()) + ", expected " +
                   DTypeName(dtype));
  }
  if (!(buffer.dimensions() == dims)) {
    return Invalid(std::string(name) + " has shape " +
                   DimsToString(buffer.dimensions()) + ", expected " +
                   DimsToString(dims));
  }
  return ffi::Error::Success();
}

// y's dtype (and so dy's): the weight's, or x's (the caller's out_dtype).
inline ffi::DataType OutputType(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                                const ffi::AnyBuffer& y) {
  return y.element_type() == x.element_type() ? x.element_type() : w.element_type();
}

// x and weight: supported dtypes, weight is x's trailing dimensions.
inline ffi::Error CheckInputs(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w,
                              double eps, RowGeometry* geometry) {
  if (!IsSupportedFloat(x.element_type())) {
    return Invalid("x must be float16, bfloat16, float32 or float64");
  }
  if (!IsSupportedFloat(w.element_type())) {
    return Invalid("weight must be float16, bfloat16, float32 or float64");
  }
  auto x_dims = x.dimensions();
  auto w_dims = w.dimensions();
  if (w_dims.size() == 0 || w_dims.size() > x_dims.size()) {
    return Invalid("weight must have between 1 and x.ndim dimensions, got " +
                   std::to_string(w_dims.size()));
  }
  const size_t lead = x_dims.size() - w_dims.size();
  for (size_t i = 0; i < w_dims.size(); ++i) {
    if (x_dims[lead + i] != w_dims[i]) {
      return Invalid("weight shape " + DimsToString(w_dims) +
                     " is not the trailing shape of x " +
                     DimsToString(x_dims));
    }
  }
  const int64_t row_length = static_cast<int64_t>(w.element_count());
  if (row_length < 1) return Invalid("weight must not be empty");
  if (!std::isfinite(eps) || eps < 0) {
    return Invalid("eps must be a finite number >= 0");
  }
  geometry->row_length = row_length;
  geometry->rows = static_cast<int64_t>(x.element_count()) / row_length;
  return ffi::Error::Success();
}

// The leading (non-normalised) dimensions of x: the shape of the inverse RMS.
inline ffi::AnyBuffer::Dimensions LeadingDims(const ffi::AnyBuffer& x,
                                              const ffi::AnyBuffer& w) {
  return x.dimensions().first(x.dimensions().size() - w.dimensions().size());
}

// The residual add's operand and result (x + residual): x's dtype and shape.
inline ffi::Error CheckResidualBuffers(const ffi::AnyBuffer& x,
                                       const ffi::AnyBuffer& residual,
                                       const ffi::AnyBuffer& sum) {
  if (auto err = ExpectBuffer("residual", residual, x.element_type(),
                              x.dimensions());
      err.failure()) {
    return err;
  }
  return ExpectBuffer("x + residual", sum, x.element_type(), x.dimensions());
}

// The forward's buffers, and the residual add's where b has one.
inline ffi::Error CheckForward(const ResidualForwardBuffers& b, double eps,
                               RowGeometry* geometry) {
  if (auto err = CheckInputs(b.x, b.w, eps, geometry); err.failure()) return err;
  const ffi::Error checks[] = {
      ExpectBuffer("y", b.y, OutputType(b.x, b.w, b.y), b.x.dimensions()),
      ExpectBuffer("inv_rms", b.inv_rms, InvRmsType(b.x.element_type()),
                   LeadingDims(b.x, b.w)),
      b.residual == nullptr ? ffi::Error::Success()
                            : CheckResidualBuffers(b.x, *b.residual, *b.sum),
  };
  for (const ffi::Error& err : checks) {
    if (err.failure()) return err;
  }
  return ffi::Error::Success();
}

// The forward quantised to float8_e4m3fn: values of x's shape, and a float32
// scale per group of kFloat8Group values of a row (weight of one dimension,
// a multiple of kFloat8Group long); the residual add's buffers where b has
// them; and where b has a float32 scale per row given (row_scales, of x's
// leading shape), `scales` holds each group's largest |y|, for the caller's
// next scale.
inline ffi::Error CheckQuantisedForward(const QuantisedForwardBuffers& b, double eps,
                                        RowGeometry* geometry) {
  if (auto err = CheckInputs(b.x, b.w, eps, geometry); err.failure()) return err;
  if (b.w.dimensions().size() != 1 || geometry->row_length % kFloat8Group != 0) {
    return Invalid("a quantised forward needs a weight of one dimension, a "
                   "multiple of " + std::to_string(kFloat8Group) +
                   " long; got shape " + DimsToString(b.w.dimensions()));
  }
  const auto dims = b.x.dimensions();
  std::vector<int64_t> scale_dims(dims.begin(), dims.end());
  scale_dims.back() = geometry->row_length / kFloat8Group;
  const ffi::Error checks[] = {
      ExpectBuffer("values", b.values, ffi::DataType::F8E4M3FN, dims),
      ExpectBuffer("inv_rms", b.inv_rms, InvRmsType(b.x.element_type()),
                   LeadingDims(b.x, b.w)),
      ExpectBuffer("scales", b.scales, ffi::DataType::F32,
                   ffi::AnyBuffer::Dimensions(scale_dims.data(), scale_dims.size())),
      b.residual == nullptr ? ffi::Error::Success()
                            : CheckResidualBuffers(b.x, *b.residual, *b.sum),
      b.row_scales == nullptr ? ffi::Error::Success()
                              : ExpectBuffer("row_scales", *b.row_scales, ffi::DataType::F32,
                                             LeadingDims(b.x, b.w)),
  };
  for (const ffi::Error& err : checks) {
    if (err.failure()) return err;
  }
  return ffi::Error::Success();
}

inline ffi::Error CheckBackwardBuffers(
    const ffi::AnyBuffer& dy, const ffi::AnyBuffer& inv_rms,
    const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, double eps,
    const ffi::AnyBuffer& dx, const ffi::AnyBuffer& dw,
    RowGeometry* geometry) {
  if (auto err = CheckInputs(x, w, eps, geometry); err.failure()) return err;
  const ffi::Error checks[] = {
      ExpectBuffer("dy", dy, OutputType(x, w, dy), x.dimensions()),
      ExpectBuffer("inv_rms", inv_rms, InvRmsType(x.element_type()),
                   LeadingDims(x, w)),
      ExpectBuffer("dx", dx, x.element_type(), x.dimensions()),
      ExpectBuffer("dweight", dw, w.element_type(), w.dimensions()),
  };
  for (const ffi::Error& err : checks) {
    if (err.failure()) return err;
  }
  return ffi::Error::Success();
}

// The CUDA backward's weight-gradient scratch: a matrix (num_partials >= 1,
// row_length) of x's accumulation type (cuda_scratch.h).
inline ffi::Error CheckPartials(const ffi::AnyBuffer& partials,
                                ffi::DataType x_type, RowGeometry g) {
  auto dims = partials.dimensions();
  if (partials.element_type() != InvRmsType(x_type) || dims.size() != 2 ||
      dims[0] < 1 || dims[1] != g.row_length) {
    return Invalid("dweight_partials must be a " +
                   std::string(DTypeName(InvRmsType(x_type))) +
                   " matrix (num_partials >= 1, " +
                   std::to_string(g.row_length) + "), got shape " +
                   DimsToString(dims));
  }
  return ffi::Error::Success();
}

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_CHECKS_H_
