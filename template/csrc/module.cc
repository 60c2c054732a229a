// The Python module my_ops._native: the handlers as capsules, by XLA platform.
#include <pybind11/pybind11.h>

#include "my_rms_norm.h"

namespace py = pybind11;

namespace {

template <typename Handler>
py::capsule Capsule(Handler* handler) {
  return py::capsule(reinterpret_cast<void*>(handler));
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  // The FFI API of the headers the handlers were compiled with, which the
  // package compares with the installed jaxlib's when it is imported.
  m.attr("ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
  m.def("targets", [] {
    py::dict cpu, targets;
    cpu["my_rms_norm_fwd"] = Capsule(my_ops::MyRmsNormForwardCpu);
    cpu["my_rms_norm_bwd"] = Capsule(my_ops::MyRmsNormBackwardCpu);
    targets["cpu"] = cpu;
#ifdef MY_OPS_WITH_CUDA
    py::dict cuda;
    cuda["my_rms_norm_fwd"] = Capsule(my_ops::MyRmsNormForwardCuda);
    cuda["my_rms_norm_bwd"] = Capsule(my_ops::MyRmsNormBackwardCuda);
    targets["CUDA"] = cuda;
#endif
    return targets;
  });
}
