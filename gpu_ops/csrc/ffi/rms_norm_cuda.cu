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
#include "ffi/variant_buffers.h"
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
  int Sms() const override { return CurrentSms(); }
  int64_t Resident(Kernel kernel, DType dtype, const Shape& shape,
                   int shared_bytes) const override {
    switch (kernel) {
      case Kernel::kRowTeamsForward:
      case Kernel::kRowTeamsBackward:
        return RowTeamsResident(kernel, dtype, shape, shared_bytes);
      case Kernel::kShortRowsBackward:
        return ShortRowsResident(dtype, shape);
      case Kernel::kColumnSlices:
        return ColumnSlicesResident(dtype, shape);
      case Kernel::kRowsAndColumns:
        return RowsAndColumnsResident(dtype, shape);
    }
    return 0;
  }
};

// The one switch on the forward's path. Only some paths have a kernel with
// the residual add; the planner gives the others no residual call, and a
// plan that did must fail rather than leave the residual out.
ffi::Error LaunchForward(cudaStream_t stream, const Plan& plan,
                         const ResidualForwardBuffers& b, RowGeometry g, double eps) {
  const bool adds_residual = plan.path == Path::kBlockRows || plan.path == Path::kGeneral;
  if (b.residual != nullptr && !adds_residual) {
    return ffi::Error::Internal(std::string("gpu_ops rms_norm: plan ") + PathName(plan.path) +
                                " has no kernel with the residual add");
  }
  const ForwardBuffers plain{b.x, b.w, b.y, b.inv_rms};
  switch (plan.path) {
    case Path::kShortRows: return LaunchShortRowsForward(stream, plan, plain, g, eps);
    case Path::kWideRows: return LaunchWideRowsForward(stream, plan, plain, g, eps);
    case Path::kBlockRows: return LaunchBlockRowsForward(stream, plan, b, g, eps);
    case Path::kRowTeams: return LaunchRowTeamsForward(stream, plan, plain, g, eps);
    case Path::kGeneral: return GeneralForward(stream, b, g, eps);
    case Path::kColumnSlices:  // the backward's alone
    case Path::kRowsAndColumns: break;
  }
  return ffi::Error::Internal(std::string("gpu_ops rms_norm: no forward kernel for plan ") +
                              PathName(plan.path));
}

// The one switch on the backward's path.
ffi::Error LaunchBackward(cudaStream_t stream, const Plan& plan,
                          const BackwardBuffers& b, RowGeometry g) {
  switch (plan.path) {
    case Path::kShortRows: return LaunchShortRowsBackward(stream, plan, b, g);
    case Path::kColumnSlices: return LaunchColumnSlicesBackward(stream, plan, b, g);
    case Path::kRowsAndColumns: return LaunchRowsAndColumnsBackward(stream, plan, b, g);
    case Path::kRowTeams: return LaunchRowTeamsBackward(stream, plan, b, g);
    case Path::kGeneral: return GeneralBackward(stream, b, g);
    case Path::kWideRows:  // the forward's alone
    case Path::kBlockRows: break;
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
// The forward, with a residual add where the call's attribute `residual`
// says so (then `added` holds the residual, `added_results` x + residual).
ffi::Error ForwardCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                       ffi::RemainingArgs added, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> inv_rms, ffi::RemainingRets added_results,
                       double eps, bool residual) {
  auto variants = TakeVariants(added, added_results, residual, /*scaled=*/false);
  if (variants.has_error()) return variants.error();
  const ResidualForwardBuffers b{x, w, *y, *inv_rms, variants->Residual(), variants->Sum()};
  RowGeometry g;
  if (auto err = CheckForward(b, eps, &g); err.failure()) return err;
  if (g.rows == 0) return ffi::Error::Success();
  const bool fast_buffers =
      FastBuffers(b.x, b.w, b.y, b.inv_rms) &&
      (b.residual == nullptr || FastBuffers(b.x, b.w, *b.residual, *b.sum));
  Problem problem = ProblemOf(b.x, b.w, g, fast_buffers);
  problem.residual = b.residual != nullptr;
  return LaunchForward(stream, PlanForward(problem, CurrentGpu(), PathsLeftOutOfPlans()), b,
                       g, eps);
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

// The forward quantised to float8, with the variants the call's attributes
// name (a residual add, a given scale per row): one kernel for every shape.
// Where the scales per row are given, `scales` receives each group's
// largest |y|.
ffi::Error QuantisedForwardCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                                ffi::RemainingArgs added, ffi::Result<ffi::AnyBuffer> values,
                                ffi::Result<ffi::AnyBuffer> inv_rms,
                                ffi::Result<ffi::AnyBuffer> scales,
                                ffi::RemainingRets added_results, double eps, bool residual,
                                bool scaled) {
  auto variants = TakeVariants(added, added_results, residual, scaled);
  if (variants.has_error()) return variants.error();
  const QuantisedForwardBuffers b{x, w, *values, *inv_rms, *scales, variants->Residual(),
                                  variants->Sum(), variants->RowScales()};
  RowGeometry g;
  if (auto err = CheckQuantisedForward(b, eps, &g); err.failure()) return err;
  if (g.rows == 0) return ffi::Error::Success();
  return QuantisedForward(stream, b, g, eps);
}

}  // namespace

Plan PlanForwardOnCurrentGpu(const Problem& problem, PathSet without, Refusals* refused) {
  return PlanForward(problem, CurrentGpu(), without, refused);
}

Plan PlanBackwardOnCurrentGpu(const Problem& problem, PathSet without, Refusals* refused) {
  return PlanBackward(problem, CurrentGpu(), without, refused);
}

GPU_OPS_DEFINE_CUDA_HANDLER(Forward);
GPU_OPS_DEFINE_CUDA_HANDLER(QuantisedForward);
GPU_OPS_DEFINE_CUDA_HANDLER(Backward);
}  // namespace gpu_ops
