// The CUDA FFI handlers of the norm of a float8 input: validate the buffers,
// then launch rms_norm_from_fp8.cu's kernels (one forward and one backward
// for every shape). The backward takes its weight-gradient scratch as an
// extra result, as the other backward does (cuda_scratch.h).
#include <cuda_runtime.h>

#include "ffi/rms_norm_checks.h"
#include "ffi/rms_norm_from_fp8_checks.h"
#include "ffi/rms_norm_handlers.h"
#include "kernels/cuda_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"

namespace gpu_ops {
namespace {

ffi::Error FromFloat8ForwardCuda(cudaStream_t stream, ffi::AnyBuffer values,
                                 ffi::AnyBuffer w, ffi::AnyBuffer scales,
                                 ffi::Result<ffi::AnyBuffer> y,
                                 ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckFromFloat8ForwardBuffers(values, w, scales, eps, *y,
                                               *inv_rms, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  return FromFloat8Forward(stream, {values, w, scales, *y, *inv_rms}, g, eps);
}

ffi::Error FromFloat8BackwardCuda(cudaStream_t stream, ffi::AnyBuffer dy,
                                  ffi::AnyBuffer inv_rms, ffi::AnyBuffer values,
                                  ffi::AnyBuffer w, ffi::AnyBuffer scales,
                                  ffi::Result<ffi::AnyBuffer> dx,
                                  ffi::Result<ffi::AnyBuffer> dw,
                                  ffi::Result<ffi::AnyBuffer> partials, double eps) {
  RowGeometry g;
  if (auto err = CheckFromFloat8BackwardBuffers(dy, inv_rms, values, w, scales,
                                                eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckPartials(*partials, ffi::DataType::F32, g); err.failure()) {
    return err;
  }
  if (g.rows == 0) return ClearWeightGradient(stream, *dw);
  return FromFloat8Backward(
      stream, {dy, inv_rms, values, w, scales, *dx, *dw, *partials}, g);
}

}  // namespace

GPU_OPS_DEFINE_CUDA_HANDLER(FromFloat8Forward);
GPU_OPS_DEFINE_CUDA_HANDLER(FromFloat8Backward);
}  // namespace gpu_ops
