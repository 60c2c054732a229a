// The Python extension module gpu_ops._native: hands the FFI handlers to
// Python as capsules, grouped by platform, for jax.ffi.register_ffi_target.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "cuda_scratch.h"
#include "rms_norm_handlers.h"
#include "xla/ffi/api/c_api.h"

namespace py = pybind11;

namespace {

template <typename Handler>
py::capsule Capsule(Handler* handler) {
  return py::capsule(reinterpret_cast<void*>(handler));
}

py::dict Targets() {
  py::dict cpu;
  cpu["gpu_ops_rms_norm_fwd"] = Capsule(gpu_ops::RmsNormForwardCpu);
  cpu["gpu_ops_rms_norm_bwd"] = Capsule(gpu_ops::RmsNormBackwardCpu);
  py::dict targets;
  targets["cpu"] = cpu;
#ifdef GPU_OPS_WITH_CUDA
  py::dict cuda;
  cuda["gpu_ops_rms_norm_fwd"] = Capsule(gpu_ops::RmsNormForwardCuda);
  cuda["gpu_ops_rms_norm_bwd"] = Capsule(gpu_ops::RmsNormBackwardCuda);
  cuda["gpu_ops_rms_norm_fwd_apex_seed"] =
      Capsule(gpu_ops::RmsNormForwardCudaApexSeed);
  cuda["gpu_ops_rms_norm_bwd_apex_seed"] =
      Capsule(gpu_ops::RmsNormBackwardCudaApexSeed);
  targets["CUDA"] = cuda;
#endif
  return targets;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "XLA FFI handlers for RMS normalisation (CPU and CUDA).";
  m.def("targets", &Targets,
        "{XLA platform name: {target name: FFI handler capsule}} for every "
        "platform compiled in.");
#ifdef GPU_OPS_WITH_CUDA
  m.attr("cuda_compiled") = true;
#else
  m.attr("cuda_compiled") = false;
#endif
  // The FFI API of the headers the handlers were compiled with: XLA refuses
  // handlers newer than itself, and then JAX cannot start its backends.
  m.attr("ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  // The scratch sizes' parts that do not depend on the number of rows, so
  // that the lowering can size the scratch for a symbolic number of rows.
  m.def("dweight_partial_rows_cap", &gpu_ops::DweightPartialRowsCap,
        py::arg("row_length"),
        "Most rows the CUDA backward's weight-gradient scratch matrix has.");
  m.def("chunk_sums_per_row", &gpu_ops::ChunkSumsPerRow, py::arg("row_length"),
        "Floats a row takes in the CUDA calls' chunk-sums scratch vector (0 "
        "for rows the split-row kernels do not take).");
  m.def("dweight_partial_rows", &gpu_ops::DweightPartialRows, py::arg("rows"),
        py::arg("row_length"),
        "Height of the CUDA backward's weight-gradient scratch matrix.");
}
