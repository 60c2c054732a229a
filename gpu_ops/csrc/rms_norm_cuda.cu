// The CUDA FFI handlers: validate the buffers, then launch the kernels.
//
// Two pairs of handlers share this code:
// - RmsNormForwardCuda / RmsNormBackwardCuda (the default): the fast kernels
//   where they apply, the seed's kernels for every other dtype pair and row
//   length;
// - RmsNormForwardCudaApexSeed / RmsNormBackwardCudaApexSeed: the seed's
//   kernels only, kept selectable as the baseline the benchmarks compare with.
#include <cuda_runtime.h>

#include "cuda_common.cuh"
#include "rms_norm_checks.h"
#include "rms_norm_cuda_kernels.h"
#include "rms_norm_handlers.h"

namespace gpu_ops {
namespace {

enum class Kernels { kFast, kApexSeed };

// XLA's scratch allocator as the kernels' DeviceScratch (16-byte aligned).
DeviceScratch FromXla(ffi::ScratchAllocator& scratch) {
  return [&scratch](size_t bytes) -> void* {
    return scratch.Allocate(bytes, 16).value_or(nullptr);
  };
}

// [forward-handler]
template <Kernels kKernels>
ffi::Error ForwardCuda(cudaStream_t stream, ffi::ScratchAllocator scratch,
                       ffi::AnyBuffer x, ffi::AnyBuffer w,
                       ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> inv_rms, double eps) {
  RowGeometry g;
  if (auto err = CheckForwardBuffers(x, w, eps, *y, *inv_rms, &g);
      err.failure()) {
    return err;
  }
  if (g.rows == 0) return ffi::Error::Success();
  const ForwardBuffers buffers{x, w, *y, *inv_rms};
  if constexpr (kKernels == Kernels::kFast) {
    if (auto launched = TryFastForward(stream, buffers, g, eps)) {
      return *launched;
    }
    if (auto launched =
            TrySplitRowsForward(stream, FromXla(scratch), buffers, g, eps)) {
      return *launched;
    }
  }
  return ApexSeedForward(stream, buffers, g, eps);
}
// [forward-handler-end]

ffi::Error CheckPartials(const ffi::AnyBuffer& partials, ffi::DataType x_type,
                         RowGeometry g) {
  auto dims = partials.dimensions();
  if (partials.element_type() != InvRmsType(x_type) || dims.size() != 2 ||
      dims[0] < 1 || dims[1] != g.row_length) {
    return Invalid("dweight_partials must be a " +
                   std::string(DTypeName(InvRmsType(x_type))) +
                   " matrix (num_partials >= 1, " +
                   std::to_string(g.row_length) + "), got shape " +
                   DimsToString(dims));
  }
  return ffi::Error::Success();
}

template <Kernels kKernels>
ffi::Error BackwardCuda(cudaStream_t stream, ffi::ScratchAllocator scratch,
                        ffi::AnyBuffer dy,
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
  if (g.rows == 0) {  // no rows: the weight gradient is zero
    return CudaStatus(
        cudaMemsetAsync(dw->untyped_data(), 0, dw->size_bytes(), stream),
        "clearing the weight gradient");
  }
  const BackwardBuffers buffers{dy, inv_rms, x, w, *dx, *dw, *partials};
  if constexpr (kKernels == Kernels::kFast) {
    if (auto launched = TryFastBackward(stream, buffers, g)) return *launched;
    if (auto launched =
            TrySplitRowsBackward(stream, FromXla(scratch), buffers, g)) {
      return *launched;
    }
  }
  return ApexSeedBackward(stream, buffers, g);
}

// [forward-binding]
auto ForwardBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Ctx<ffi::ScratchAllocator>()  // device memory for the call
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // weight
      .Ret<ffi::AnyBuffer>()  // y
      .Ret<ffi::AnyBuffer>()  // inv_rms
      .Attr<double>("eps");
}
// [forward-binding-end]

auto BackwardBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Ctx<ffi::ScratchAllocator>()
      .Arg<ffi::AnyBuffer>()  // dy
      .Arg<ffi::AnyBuffer>()  // inv_rms
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // weight
      .Ret<ffi::AnyBuffer>()  // dx
      .Ret<ffi::AnyBuffer>()  // dweight
      .Ret<ffi::AnyBuffer>()  // dweight_partials (scratch)
      .Attr<double>("eps");
}

}  // namespace

// [handler-symbols]
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormForwardCuda, ForwardCuda<Kernels::kFast>,
                              ForwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormBackwardCuda,
                              BackwardCuda<Kernels::kFast>, BackwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormForwardCudaApexSeed,
                              ForwardCuda<Kernels::kApexSeed>,
                              ForwardBinding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormBackwardCudaApexSeed,
                              BackwardCuda<Kernels::kApexSeed>,
                              BackwardBinding());
// [handler-symbols-end]

}  // namespace gpu_ops
