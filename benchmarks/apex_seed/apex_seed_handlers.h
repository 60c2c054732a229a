// The FFI handlers of the seed's kernels (rms_norm_apex_seed.cu):
//   forward:  (x, weight; eps) -> (y, inv_rms)
//   backward: (dy, inv_rms, x, weight; eps) -> (dx, dweight, dweight_partials)
// with gpu_ops' dtypes and shapes (gpu_ops/csrc/ffi/rms_norm_handlers.h).
#ifndef GPU_OPS_APEX_SEED_HANDLERS_H_
#define GPU_OPS_APEX_SEED_HANDLERS_H_

#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

XLA_FFI_DECLARE_HANDLER_SYMBOL(ApexSeedForwardCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(ApexSeedBackwardCuda);

}  // namespace gpu_ops

#endif  // GPU_OPS_APEX_SEED_HANDLERS_H_
