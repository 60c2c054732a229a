// The XLA FFI handlers that gpu_ops exports, one per platform and direction.
//
//   forward:  (x, weight; eps, residual=false) -> (y, inv_rms)
//   forward with a residual: (x, weight, residual; eps, residual=true)
//             -> (y, inv_rms, x + residual), y normalising x + residual
//   forward quantised to float8: (x, weight; eps, residual, scaled)
//             -> (values, inv_rms, scales): float8_e4m3fn values and a
//             float32 scale per group of 128; with residual=true the
//             residual and x + residual as above; with scaled=true a given
//             float32 scale per row as the last operand, and `scales`
//             receives each group's largest |y| instead
//   backward: (dy, inv_rms, x, weight; eps) -> (dx, dweight)
// The CUDA backward has a scratch result besides (cuda_scratch.h):
// dweight_partials after its results.
//
//   forward of a float8 input: (values, weight, scales; eps) -> (y, inv_rms),
//             x the float8_e4m3fn values times their groups' float32 scales
//   backward of a float8 input: (dy, inv_rms, values, weight, scales; eps)
//             -> (dx, dweight), dx in the weight's dtype; on CUDA with
//             dweight_partials after them
//
// y and dy have the weight's dtype or x's (rms_norm's out_dtype; a float8
// input's, the weight's), dx has x's dtype, inv_rms has x's leading
// (non-normalised) shape and is float32 unless x is float64.
#ifndef GPU_OPS_RMS_NORM_HANDLERS_H_
#define GPU_OPS_RMS_NORM_HANDLERS_H_

#include "ffi/ffi_targets.h"
#include "plan/rms_norm_plan.h"
#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

// RmsNorm<Name>Cpu and, in a build with CUDA, RmsNorm<Name>Cuda, for each
// target of ffi_targets.h.
#define GPU_OPS_DECLARE_CPU(name, ...) XLA_FFI_DECLARE_HANDLER_SYMBOL(RmsNorm##name##Cpu);
GPU_OPS_FFI_TARGETS(GPU_OPS_DECLARE_CPU)
#undef GPU_OPS_DECLARE_CPU

#ifdef GPU_OPS_WITH_CUDA
#define GPU_OPS_DECLARE_CUDA(name, ...) XLA_FFI_DECLARE_HANDLER_SYMBOL(RmsNorm##name##Cuda);
GPU_OPS_FFI_TARGETS(GPU_OPS_DECLARE_CUDA)
#undef GPU_OPS_DECLARE_CUDA
// The plans the handlers make on the current GPU, given the paths left out
// of the plans (LeaveOutOfPlans; with the same occupancy answers and the same
// clusters setting), and the paths passed over on the way.
Plan PlanForwardOnCurrentGpu(const Problem& problem, PathSet without, Refusals* refused);
Plan PlanBackwardOnCurrentGpu(const Problem& problem, PathSet without, Refusals* refused);
#endif

}  // namespace gpu_ops

#endif  // GPU_OPS_RMS_NORM_HANDLERS_H_
