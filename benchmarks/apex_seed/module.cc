// The Python extension module gpu_ops_apex_seed: the seed's kernels' FFI
// handlers as capsules, for benchmarks/apex_seed (built only with
// GPU_OPS_APEX_SEED=ON and CUDA).
#include <pybind11/pybind11.h>

#include "apex_seed_handlers.h"

namespace py = pybind11;

PYBIND11_MODULE(gpu_ops_apex_seed, m) {
  m.doc() = "The seed tutorial's RMS norm kernels, the benchmarks' baseline.";
  m.def("targets", [] {
    py::dict cuda;
    cuda["gpu_ops_rms_norm_fwd_apex_seed"] =
        py::capsule(reinterpret_cast<void*>(gpu_ops::ApexSeedForwardCuda));
    cuda["gpu_ops_rms_norm_bwd_apex_seed"] =
        py::capsule(reinterpret_cast<void*>(gpu_ops::ApexSeedBackwardCuda));
    return cuda;
  }, "{target name: FFI handler capsule} of the CUDA platform.");
}
