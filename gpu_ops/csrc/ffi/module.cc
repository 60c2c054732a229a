// The Python extension module gpu_ops._native: hands the FFI handlers to
// Python as capsules, grouped by platform, for jax.ffi.register_ffi_target.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ffi/rms_norm_handlers.h"
#include "plan/cuda_scratch.h"
#include "plan/described_gpu.h"
#include "plan/rms_norm_plan.h"
#include "xla/ffi/api/c_api.h"

namespace py = pybind11;

namespace {

template <typename Handler>
py::capsule Capsule(Handler* handler) {
  return py::capsule(reinterpret_cast<void*>(handler));
}

// Each platform's {target name: handler capsule}, from ffi_targets.h's list.
py::dict Targets() {
  py::dict cpu;
#define GPU_OPS_CPU_TARGET(name, target, ...) cpu[target] = Capsule(gpu_ops::RmsNorm##name##Cpu);
  GPU_OPS_FFI_TARGETS(GPU_OPS_CPU_TARGET)
#undef GPU_OPS_CPU_TARGET
  py::dict targets;
  targets["cpu"] = cpu;
#ifdef GPU_OPS_WITH_CUDA
  py::dict cuda;
#define GPU_OPS_CUDA_TARGET(name, target, ...) \
  cuda[target] = Capsule(gpu_ops::RmsNorm##name##Cuda);
  GPU_OPS_FFI_TARGETS(GPU_OPS_CUDA_TARGET)
#undef GPU_OPS_CUDA_TARGET
  targets["CUDA"] = cuda;
#endif
  return targets;
}

// {handler name: target name} of ffi_targets.h's list, where each target's
// name is written: the Python side takes the names from here.
py::dict TargetNames() {
  py::dict names;
#define GPU_OPS_TARGET_NAME(name, target, ...) names[#name] = target;
  GPU_OPS_FFI_TARGETS(GPU_OPS_TARGET_NAME)
#undef GPU_OPS_TARGET_NAME
  return names;
}

// The operands of a call on (rows, row_length) x and weight of `dtype`
// (x's, or "<x's>/float32" for a float32 weight), with the scratch the
// lowering gives it (XLA's buffers are 16-byte aligned).
gpu_ops::Problem CallProblem(int64_t rows, int64_t row_length, std::string dtype) {
  gpu_ops::Problem problem{rows, row_length, true, gpu_ops::DType::kFloat32,
                           gpu_ops::DweightPartialRows(rows, row_length)};
  constexpr const char* kFloat32Weight = "/float32";
  const size_t slash = dtype.find('/');
  if (slash != std::string::npos && dtype.substr(slash) == kFloat32Weight) {
    dtype.resize(slash);
    problem.float32_weight = dtype == "float16" || dtype == "bfloat16";
    problem.fast_dtypes = problem.float32_weight;
  }
  if (dtype == "float16") {
    problem.dtype = gpu_ops::DType::kFloat16;
  } else if (dtype == "bfloat16") {
    problem.dtype = gpu_ops::DType::kBFloat16;
  } else if (dtype != "float32") {
    problem.fast_dtypes = false;  // the general kernels
  }
  return problem;
}

// The CUDA kernels a plan launches, in order.
py::list PlanKernels(gpu_ops::Path path, bool forward) {
  using gpu_ops::Path;
  std::vector<const char*> names;
  switch (path) {
    case Path::kShortRows:
      names = forward ? std::vector{"ShortRowsForwardKernel"}
                      : std::vector{"ShortRowsBackwardKernel", "SumPartialsKernel"};
      break;
    case Path::kColumnSlices: names = {"ColumnSlicesBackwardKernel"}; break;
    case Path::kRowsAndColumns: names = {"RowsAndColumnsBackwardKernel"}; break;
    case Path::kBlockRows:
    case Path::kWideRows: names = {"FastForwardKernel"}; break;
    case Path::kRowTeams:
      names = forward ? std::vector{"ClusterForwardKernel"}
                      : std::vector{"FastBackwardKernel", "SumPartialsKernel"};
      break;
    case Path::kGeneral:
      names = forward ? std::vector{"GeneralForwardKernel"}
                      : std::vector{"GeneralBackwardKernel", "SumPartialsKernel"};
      break;
  }
  py::list list;
  for (const char* name : names) list.append(name);
  return list;
}

// A plan as kernel_plans.kernel_plan reports it: the path, its kernels,
// the launch of the first (blocks, threads a block, blocks a cluster,
// dynamic shared memory), what each thread, block or cluster takes under
// names that say so, and the paths refused before it, each with the reason.
py::dict PlanDict(const gpu_ops::Plan& plan, bool forward, int64_t rows,
                  const gpu_ops::Refusals& refused) {
  using gpu_ops::Path;
  const gpu_ops::Shape& s = plan.shape;
  py::dict d;
  d["path"] = gpu_ops::PathName(plan.path);
  d["kernels"] = PlanKernels(plan.path, forward);
  if (plan.path != Path::kGeneral) {  // the general kernels' launcher sizes its own launch
    d["blocks"] = plan.groups * s.cluster;
    d["threads"] = s.team * s.teams;
    d["cluster"] = s.cluster;
    d["shared_bytes"] = plan.shared_bytes;
  }
  switch (plan.path) {
    case Path::kShortRows:
      d["lanes_per_row"] = s.team;
      // The backward's blocks go on through the rows, a grid's width apart.
      d[forward ? "rows_per_block" : "rows_per_block_pass"] = int64_t{s.teams} * plan.team_rows;
      break;
    case Path::kColumnSlices:  // a thread a vector column of the row
      break;
    case Path::kRowsAndColumns:  // a block a row's dx; then blocks of dw's columns
      d["row_blocks"] = rows;
      d["column_blocks"] = plan.groups - rows;
      d["vectors_per_thread"] = s.vectors;
      break;
    case Path::kWideRows:
      d["rows_per_block"] = 1;
      d["vectors_per_thread"] = s.vectors;
      break;
    case Path::kBlockRows:
      d["rows_per_block"] = plan.team_rows;  // a block is one team
      d["vectors_per_thread"] = s.vectors;
      break;
    case Path::kRowTeams:  // a team of threads a row, over a cluster's blocks
      d["threads_per_row"] = s.team * s.cluster;
      d["rows_at_once_per_block"] = s.teams;
      d["vectors_per_thread"] = s.vectors;
      if (!forward) d["rows_per_team"] = plan.rows_per_partial;
      break;
    case Path::kGeneral:
      break;
  }
  py::list passed_over;
  for (const gpu_ops::Refusal& refusal : refused) {
    passed_over.append(py::make_tuple(gpu_ops::PathName(refusal.path), refusal.why));
  }
  d["refused"] = passed_over;
  return d;
}

gpu_ops::PathSet Paths(const std::string& names, const char* what) {
  gpu_ops::PathSet paths = 0;
  if (!gpu_ops::ParsePaths(names, &paths)) {
    throw std::invalid_argument(
        std::string(what) + " '" + names +
        "' names something other than kernel paths that may be left out (" +
        gpu_ops::LeavablePathNames() + ")");
  }
  return paths;
}

py::dict Plan(const std::string& direction, int64_t rows, int64_t row_length,
              const std::string& dtype, py::object gpu, const std::string& without,
              bool residual) {
  if (direction != "forward" && direction != "backward") {
    throw std::invalid_argument("direction must be 'forward' or 'backward', got '" +
                                direction + "'");
  }
  if (rows < 1 || row_length < 1) {
    throw std::invalid_argument("rows and row_length must be positive");
  }
  const bool forward = direction == "forward";
  if (residual && !forward) {
    throw std::invalid_argument(
        "residual applies to the forward (the backward of the residual add is "
        "the plain backward)");
  }
  gpu_ops::Problem problem = CallProblem(rows, row_length, dtype);
  problem.residual = residual;
  if (gpu.is_none()) {
#ifdef GPU_OPS_WITH_CUDA
    // The handlers' plan: what LeaveOutOfPlans left out, and nothing else.
    if (!without.empty()) {
      throw std::invalid_argument(
          "without applies to a described GPU; the current GPU's plans leave out "
          "what kernel_plans.leave_out named");
    }
    const gpu_ops::PathSet left_out = gpu_ops::PathsLeftOutOfPlans();
    gpu_ops::Refusals refused;
    const gpu_ops::Plan plan =
        forward ? gpu_ops::PlanForwardOnCurrentGpu(problem, left_out, &refused)
                : gpu_ops::PlanBackwardOnCurrentGpu(problem, left_out, &refused);
    return PlanDict(plan, forward, rows, refused);
#else
    throw std::invalid_argument(
        "gpu=None asks the current GPU, and this build has no CUDA kernels");
#endif
  }
  const gpu_ops::GpuNumbers numbers{
      gpu.attr("sms").cast<int>(),
      gpu.attr("clusters").cast<bool>(),
      gpu.attr("threads_per_sm").cast<int>(),
      gpu.attr("blocks_per_sm").cast<int>(),
      gpu.attr("registers_per_sm").cast<int>(),
      gpu.attr("shared_bytes_per_sm").cast<int>(),
      gpu.attr("shared_bytes_per_block").cast<int>()};
  const gpu_ops::DescribedGpu described(numbers);
  const gpu_ops::PathSet left_out = Paths(without, "without");
  gpu_ops::Refusals refused;
  const gpu_ops::Plan plan =
      forward ? gpu_ops::PlanForward(problem, described, left_out, &refused)
              : gpu_ops::PlanBackward(problem, described, left_out, &refused);
  return PlanDict(plan, forward, rows, refused);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "XLA FFI handlers for RMS normalisation (CPU and CUDA).";
  m.def("targets", &Targets,
        "{XLA platform name: {target name: FFI handler capsule}} for every "
        "platform compiled in.");
  m.def("target_names", &TargetNames,
        "{handler name of ffi_targets.h (RmsNorm<name>Cpu, RmsNorm<name>Cuda): "
        "FFI target name}.");
#ifdef GPU_OPS_WITH_CUDA
  m.attr("cuda_compiled") = true;
#else
  m.attr("cuda_compiled") = false;
#endif
  // The FFI API of the headers the handlers were compiled with: XLA refuses
  // handlers newer than itself (gpu_ops/ffi_targets.py says how).
  m.attr("ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  // The scratch sizes' parts that do not depend on the number of rows, so
  // that the lowering can size the scratch for a symbolic number of rows.
  m.def("dweight_partial_rows_cap", &gpu_ops::DweightPartialRowsCap,
        py::arg("row_length"),
        "Most rows the CUDA backward's weight-gradient scratch matrix has.");
  py::list paths;
  for (int i = 0; i <= static_cast<int>(gpu_ops::Path::kGeneral); ++i) {
    paths.append(gpu_ops::PathName(static_cast<gpu_ops::Path>(i)));
  }
  m.attr("kernel_paths") = py::tuple(paths);
  m.def("plan", &Plan, py::arg("direction"), py::arg("rows"),
        py::arg("row_length"), py::arg("dtype"), py::arg("gpu"),
        py::arg("without"), py::arg("residual"),
        "The CUDA kernel plan of a call: on the current GPU (gpu=None), or on "
        "a GPU described by gpu's numbers (gpu_ops.kernel_plans.GpuModel), "
        "leaving out the comma-separated paths `without`; of the forward with "
        "a residual add if `residual`.");
  m.def("leave_out_of_plans",
        [](const std::string& without, bool clusters) {
          gpu_ops::LeaveOutOfPlans(Paths(without, "without"), clusters);
        },
        py::arg("without"), py::arg("clusters"),
        "Make every CUDA handler of this process plan without the comma-separated "
        "paths `without`, and as for a GPU without clusters if `clusters`.");
  m.def("left_out_of_plans",
        [] {
          std::string names;
          const gpu_ops::PathSet paths = gpu_ops::PathsLeftOutOfPlans();
          for (int i = 0; i < static_cast<int>(gpu_ops::Path::kGeneral); ++i) {
            const auto path = static_cast<gpu_ops::Path>(i);
            if (gpu_ops::Contains(paths, path)) {
              names += (names.empty() ? "" : ",") + std::string(gpu_ops::PathName(path));
            }
          }
          return py::make_tuple(names, gpu_ops::ClustersLeftOutOfPlans());
        },
        "(comma-separated paths, clusters): what leave_out_of_plans left out.");
  m.def("dweight_partial_rows", &gpu_ops::DweightPartialRows, py::arg("rows"),
        py::arg("row_length"),
        "Height of the CUDA backward's weight-gradient scratch matrix.");
}
