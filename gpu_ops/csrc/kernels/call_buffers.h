// A call's buffers, as a handler passes them on (to its checks, and to the
// CPU rows or the CUDA kernels): one struct per kind of call, its variants
// (a residual add, a given scale per row) as buffers that may be absent.
// Scratch buffers: see plan/cuda_scratch.h.
#ifndef GPU_OPS_CALL_BUFFERS_H_
#define GPU_OPS_CALL_BUFFERS_H_

#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

namespace ffi = xla::ffi;

struct ForwardBuffers {
  ffi::AnyBuffer x, w;        // inputs
  ffi::AnyBuffer y, inv_rms;  // results
};

struct BackwardBuffers {
  ffi::AnyBuffer dy, inv_rms, x, w;  // inputs
  ffi::AnyBuffer dx, dw;             // results
  ffi::AnyBuffer partials;           // scratch: (num_partials, row_length)
};

// A forward's operands and results; with a residual add where `residual`
// and `sum` (x + residual, a result) are given.
struct ResidualForwardBuffers {
  ffi::AnyBuffer x, w;        // inputs
  ffi::AnyBuffer y, inv_rms;  // results
  const ffi::AnyBuffer* residual = nullptr;
  const ffi::AnyBuffer* sum = nullptr;
};

// With a residual add where `residual` and `sum` (a result) are given; with
// a given scale per row where `row_scales` is (then `scales` receives each
// group's largest |y|).
struct QuantisedForwardBuffers {
  ffi::AnyBuffer x, w;                    // inputs
  ffi::AnyBuffer values, inv_rms, scales;  // results (float8, ..., float32)
  const ffi::AnyBuffer* residual = nullptr;
  const ffi::AnyBuffer* sum = nullptr;
  const ffi::AnyBuffer* row_scales = nullptr;
};

// The norm of float8_e4m3fn values with a float32 scale per group of
// kFloat8Group values of a row (rms_norm_from_fp8_checks.h).
struct FromFloat8ForwardBuffers {
  ffi::AnyBuffer values, w, scales;  // inputs
  ffi::AnyBuffer y, inv_rms;         // results
};

struct FromFloat8BackwardBuffers {
  ffi::AnyBuffer dy, inv_rms, values, w, scales;  // inputs
  ffi::AnyBuffer dx, dw;                          // results
  ffi::AnyBuffer partials;  // scratch: float32 (num_partials, row_length)
};

}  // namespace gpu_ops

#endif  // GPU_OPS_CALL_BUFFERS_H_
