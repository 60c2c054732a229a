// The CUDA FFI handlers: validate the buffers, then launch the kernels the
// planner (rms_norm_plan.h) chooses for the operands and the GPU: the
// forward, the forward with a residual add, and the backward. The forward
// quantised to float8 has one kernel for every shape.
//
// A benchmark or a test can narrow the plans (LeaveOutOfPlans,
// rms_norm_plan.h), so that one GPU runs and measures every path.
#include <cuda_runtime.h>

#include <string>

#include "ffi/rms_norm_checks.h"
#include "ffi/rms_norm_handlers.h"
#include "kernels/cuda_common.cuh"
#include "kernels/fast_kernels_common.cuh"
#include "kernels/rms_norm_cuda_kernels.h"
#include "plan/rms_norm_plan.h"

namespace gpu_ops {
namespace {

// The planner's questions, answered for the current GPU.
class CurrentGpu final : public DeviceModel {
 public:
  bool Clusters() const override {
    return RunsClusters() && !ClustersLeftOutOfPlans();
  }
  int64_t Resident(Kernel kernel, DType dtype, const Shape& shape,
                   int shared_bytes) const override {
    switch (kernel) {
      case Kernel::kFewRowsForward:
      case Kernel::kRowTeamsForward:
      case Kernel::kRowTeamsBackward:
        return RowTeamsResident(kernel, dtype, shape, shared_bytes);
      case Kernel::kShortRowsBackward:
        return ShortRowsResident(dtype, shape);
      case Kernel::kColumnSlices:
        return ColumnSlicesResident(dtype, shape);
    }
    return 0;
  }
};

ffi::Error LaunchForward(cudaStream_t stream, const Plan& plan,
                         const ForwardBuffers& b, RowGeometry g, double eps) {
  switch (plan.path) {
    case Path::kShortRows: return LaunchShortRowsForward(stream, plan, b, g, eps);
    case Path::kFewRows:
    case Path::kWideRows:
    case Path::kBlockRows:
    case Path::kRowTeams:
      return LaunchRowsForward(stream, plan, {b.x, b.w, b.y, b.inv_rms}, g, eps);
    case Path::kColumnSlices:  // the backward's alone
      return ffi::Error::Internal("gpu_ops rms_norm: no forward kernel for plan column_slices");
    case Path::kGeneral: break;
  }
  return GeneralForward(stream, {b.x, b.w, b.y, b.inv_rms}, g, eps);
}

ffi::Error LaunchBackward(cudaStream_t stream, const Plan& plan,
                          const BackwardBuffers& b, RowGeometry g) {
  switch (plan.path) {
    case Path::kShortRows: return LaunchShortRowsBackward(stream, plan, b, g);
    case Path::kColumnSlices: return LaunchColumnSlicesBackward(stream, plan, b, g);
    case Path::kRowTeams: return LaunchRowTeamsBackward(stream, plan, b, g);
    case Path::kGeneral: return GeneralBackward(stream, b, g);
    default: break;
  }
  return ffi::Error::Internal(
      std::string("gpu_ops rms_norm: no backward kernel for plan ") +
      PathName(plan.path));
}

// The planner's view of a call on x and the weight `w` (FastBuffers: whether
// the fast kernels take its buffers), with no scratch memory.
Problem ProblemOf(const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, RowGeometry g,
                  bool fast_buffers) {
  Problem problem{g.rows, g.row_length, fast_buffers, PlanDType(x.element_type()), 0};
  problem.float32_weight = Float32Weight(x, w);
  return problem;
}

// [forward-handler]
ffi::Error ForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                       ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckForwardBuffers(x, w, eps, *y, *inv_rms, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  const Problem problem = ProblemOf(x, w, g, FastBuffers(x, w, *y, *inv_rms));
  return LaunchForward(stream, PlanForward(problem, CurrentGpu(), PathsLeftOutOfPlans()),
                       {x, w, *y, *inv_rms}, g, eps);
}
// [forward-handler-end]

ffi::Error BackwardCuda(cudaStream_t stream, ffi::AnyBuffer dy,
                        ffi::AnyBuffer inv_rms, ffi::AnyBuffer x,
                        ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dw,
                        ffi::Result<ffi::AnyBuffer> partials, double eps) {
  RowGeometry g;
  if (auto err = CheckBackwardBuffers(dy, inv_rms, x, w, eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckPartials(*partials, x.element_type(), g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ClearWeightGradient(stream, *dw);
  const BackwardBuffers buffers{dy, inv_rms, x, w, *dx, *dw, *partials};
  Problem problem = ProblemOf(x, w, g,
                              FastBuffers(x, w, dy, inv_rms, *dx, *dw, *partials) &&
                                  partials->element_type() == ffi::DataType::F32);
  problem.num_partials = partials->dimensions()[0];
  return LaunchBackward(stream, PlanBackward(problem, CurrentGpu(), PathsLeftOutOfPlans()),
                        buffers, g);
}

ffi::Error ResidualForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                               ffi::AnyBuffer w, ffi::AnyBuffer residual,
                               ffi::Result<ffi::AnyBuffer> y,
                               ffi::Result<ffi::AnyBuffer> inv_rms,
                               ffi::Result<ffi::AnyBuffer> sum, double eps) {
  RowGeometry g;
  if (auto err = CheckResidualForwardBuffers(x, w, residual, eps, *y, *inv_rms,
                                             *sum, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  const ResidualForwardBuffers buffers{x, w, *y, *inv_rms, &residual, &*sum};
  Problem problem = ProblemOf(x, w, g, FastBuffers(x, w, residual, *y, *inv_rms, *sum));
  problem.residual = true;
  const Plan plan = PlanForward(problem, CurrentGpu(), PathsLeftOutOfPlans());
  if (plan.path == Path::kGeneral) return GeneralForward(stream, buffers, g, eps);
  return LaunchRowsForward(stream, plan, buffers, g, eps);
}

ffi::Error QuantisedForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                                ffi::AnyBuffer w,
                                ffi::Result<ffi::AnyBuffer> values,
                                ffi::Result<ffi::AnyBuffer> inv_rms,
                                ffi::Result<ffi::AnyBuffer> scales, double eps) {
  RowGeometry g;
  if (auto err = CheckQuantisedForwardBuffers(x, w, eps, *values, *inv_rms,
                                              *scales, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  return QuantisedForward(stream, {x, w, *values, *inv_rms, *scales}, g, eps);
}

ffi::Error ResidualQuantisedForwardCuda(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
    ffi::AnyBuffer residual, ffi::Result<ffi::AnyBuffer> values,
    ffi::Result<ffi::AnyBuffer> inv_rms, ffi::Result<ffi::AnyBuffer> scales,
    ffi::Result<ffi::AnyBuffer> sum, double eps) {
  RowGeometry g;
  if (auto err = CheckResidualQuantisedForwardBuffers(
          x, w, residual, eps, *values, *inv_rms, *scales, *sum, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  return QuantisedForward(
      stream, {x, w, *values, *inv_rms, *scales, &residual, &*sum}, g, eps);
}

ffi::Error ScaledQuantisedForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                                      ffi::AnyBuffer w, ffi::AnyBuffer row_scales,
                                      ffi::Result<ffi::AnyBuffer> values,
                                      ffi::Result<ffi::AnyBuffer> inv_rms,
                                      ffi::Result<ffi::AnyBuffer> largest,
                                      double eps) {
  RowGeometry g;
  if (auto err = CheckScaledQuantisedForwardBuffers(x, w, row_scales, eps, *values,
                                                    *inv_rms, *largest, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  QuantisedForwardBuffers buffers{x, w, *values, *inv_rms, *largest};
  buffers.row_scales = &row_scales;
  return QuantisedForward(stream, buffers, g, eps);
}

ffi::Error ResidualScaledQuantisedForwardCuda(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
    ffi::AnyBuffer residual, ffi::AnyBuffer row_scales,
    ffi::Result<ffi::AnyBuffer> values, ffi::Result<ffi::AnyBuffer> inv_rms,
    ffi::Result<ffi::AnyBuffer> largest, ffi::Result<ffi::AnyBuffer> sum,
    double eps) {
  RowGeometry g;
  if (auto err = CheckScaledQuantisedForwardBuffers(
          x, w, row_scales, eps, *values, *inv_rms, *largest, &g, &residual, &*sum);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  return QuantisedForward(stream,
                          {x, w, *values, *inv_rms, *largest, &residual, &*sum,
                           &row_scales},
                          g, eps);
}

}  // namespace

Plan PlanForwardOnCurrentGpu(const Problem& problem, PathSet without, Refusals* refused) {
  return PlanForward(problem, CurrentGpu(), without, refused);
}

Plan PlanBackwardOnCurrentGpu(const Problem& problem, PathSet without, Refusals* refused) {
  return PlanBackward(problem, CurrentGpu(), without, refused);
}

GPU_OPS_DEFINE_CUDA_HANDLER(Forward);
GPU_OPS_DEFINE_CUDA_HANDLER(ResidualForward);
GPU_OPS_DEFINE_CUDA_HANDLER(QuantisedForward);
GPU_OPS_DEFINE_CUDA_HANDLER(ResidualQuantisedForward);
GPU_OPS_DEFINE_CUDA_HANDLER(ScaledQuantisedForward);
GPU_OPS_DEFINE_CUDA_HANDLER(ResidualScaledQuantisedForward);
GPU_OPS_DEFINE_CUDA_HANDLER(Backward);
}  // namespace gpu_ops
