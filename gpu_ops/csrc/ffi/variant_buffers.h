// The buffers of a target's variants (ffi_targets.h), taken from the
// operands and results that follow the target's own.
//
// The call's bool attributes say which variants it is; the buffers must
// match them exactly. A variant's buffers come in the order of the
// attributes: the residual operand before the given scales per row, and the
// sum x + residual as the one variant result.
#ifndef GPU_OPS_VARIANT_BUFFERS_H_
#define GPU_OPS_VARIANT_BUFFERS_H_

#include <optional>
#include <string>

#include "ffi/rms_norm_checks.h"
#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

struct VariantBuffers {
  std::optional<ffi::AnyBuffer> residual, sum, row_scales;

  // The call_buffers.h pointers: null where the call is not that variant.
  const ffi::AnyBuffer* Residual() const { return residual ? &*residual : nullptr; }
  const ffi::AnyBuffer* Sum() const { return sum ? &*sum : nullptr; }
  const ffi::AnyBuffer* RowScales() const { return row_scales ? &*row_scales : nullptr; }
};

// The variant buffers of a call with attributes `residual` and `scaled`, or
// an error where `operands` and `results` (those after the target's own)
// are not exactly the buffers those variants take.
inline ffi::ErrorOr<VariantBuffers> TakeVariants(const ffi::RemainingArgs& operands,
                                                 const ffi::RemainingRets& results,
                                                 bool residual, bool scaled) {
  const size_t want_operands = (residual ? 1 : 0) + (scaled ? 1 : 0);
  const size_t want_results = residual ? 1 : 0;
  if (operands.size() != want_operands || results.size() != want_results) {
    return ffi::Unexpected(Invalid(
        std::string("the call's attributes (residual=") + (residual ? "true" : "false") +
        (scaled ? ", scaled=true" : "") + ") take " + std::to_string(want_operands) +
        " more operand(s) and " + std::to_string(want_results) +
        " more result(s) than the target's own, got " + std::to_string(operands.size()) +
        " and " + std::to_string(results.size())));
  }
  VariantBuffers taken;
  size_t next = 0;
  if (residual) {
    auto operand = operands.get<ffi::AnyBuffer>(next++);
    auto result = results.get<ffi::AnyBuffer>(0);
    if (operand.has_error()) return ffi::Unexpected(operand.error());
    if (result.has_error()) return ffi::Unexpected(result.error());
    taken.residual = *operand;
    taken.sum = **result;
  }
  if (scaled) {
    auto operand = operands.get<ffi::AnyBuffer>(next++);
    if (operand.has_error()) return ffi::Unexpected(operand.error());
    taken.row_scales = *operand;
  }
  return taken;
}

}  // namespace gpu_ops

#endif  // GPU_OPS_VARIANT_BUFFERS_H_
