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
#include "cuda_scratch.h"
#include "rms_norm_checks.h"
#include "rms_norm_cuda_kernels.h"
#include "rms_norm_handlers.h"

namespace gpu_ops {
namespace {

enum class Kernels { kFast, kApexSeed };

// chunk_sums must be the float32 vector of ChunkSumsLength floats.
ffi::Error CheckChunkSums(const ffi::AnyBuffer& chunk_sums, RowGeometry g) {
  const int64_t length = ChunkSumsLength(g.rows, g.row_length);
  auto dims = chunk_sums.dimensions();
  if (chunk_sums.element_type() != ffi::DataType::F32 || dims.size() != 1 ||
      dims[0] != length) {
    return Invalid("chunk_sums must be a float32 vector of " +
                   std::to_string(length) + " elements, got " +
                   std::string(DTypeName(chunk_sums.element_type())) +
                   " of shape " + DimsToString(dims));
  }
  return ffi::Error::Success();
}

// [forward-handler]
template <Kernels kKernels>
ffi::Error ForwardCuda(cudaStream_t stream, ffi::AnyBuffer x,
                       ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Result<ffi::AnyBuffer> inv_rms,
                       ffi::Result<ffi::AnyBuffer> chunk_sums, double eps) {
  RowGeometry g;
  if (auto err = CheckForwardBuffers(x, w, eps, *y, *inv_rms, &g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckChunkSums(*chunk_sums, g); err.failure()) return err;
  if (g.rows == 0) return ffi::Error::Success();
  const ForwardBuffers buffers{x, w, *y, *inv_rms, *chunk_sums};
  if constexpr (kKernels == Kernels::kFast) {
    if (auto launched = TryFastForward(stream, buffers, g, eps)) {
      return *launched;
    }
    if (auto launched = TryGridForward(stream, buffers, g, eps)) {
      return *launched;
    }
    if (auto launched = TrySharedRowForward(stream, buffers, g, eps)) {
      return *launched;
    }
    if (auto launched = TrySplitRowsForward(stream, buffers, g, eps)) {
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
ffi::Error BackwardCuda(cudaStream_t stream, ffi::AnyBuffer dy,
                        ffi::AnyBuffer inv_rms, ffi::AnyBuffer x,
                        ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dw,
                        ffi::Result<ffi::AnyBuffer> partials,
                        ffi::Result<ffi::AnyBuffer> chunk_sums, double eps) {
  RowGeometry g;
  if (auto err = CheckBackwardBuffers(dy, inv_rms, x, w, eps, *dx, *dw, &g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckPartials(*partials, x.element_type(), g);
      err.failure()) {
    return err;
  }
  if (auto err = CheckChunkSums(*chunk_sums, g); err.failure()) return err;
  if (g.rows == 0) {  // no rows: the weight gradient is zero
    return CudaStatus(
        cudaMemsetAsync(dw->untyped_data(), 0, dw->size_bytes(), stream),
        "clearing the weight gradient");
  }
  const BackwardBuffers buffers{dy,  inv_rms, x,        w,
                                *dx, *dw,     *partials, *chunk_sums};
  if constexpr (kKernels == Kernels::kFast) {
    if (auto launched = TryFastBackward(stream, buffers, g)) return *launched;
    if (auto launched = TryGridBackward(stream, buffers, g)) return *launched;
    if (auto launched = TrySplitRowsBackward(stream, buffers, g)) {
      return *launched;
    }
  }
  return ApexSeedBackward(stream, buffers, g);
}

// [forward-binding]
auto ForwardBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // weight
      .Ret<ffi::AnyBuffer>()  // y
      .Ret<ffi::AnyBuffer>()  // inv_rms
      .Ret<ffi::AnyBuffer>()  // chunk_sums (scratch)
      .Attr<double>("eps");
}
// [forward-binding-end]

auto BackwardBinding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::PlatformStream<cudaStream_t>>()
      .Arg<ffi::AnyBuffer>()  // dy
      .Arg<ffi::AnyBuffer>()  // inv_rms
      .Arg<ffi::AnyBuffer>()  // x
      .Arg<ffi::AnyBuffer>()  // weight
      .Ret<ffi::AnyBuffer>()  // dx
      .Ret<ffi::AnyBuffer>()  // dweight
      .Ret<ffi::AnyBuffer>()  // dweight_partials (scratch)
      .Ret<ffi::AnyBuffer>()  // chunk_sums (scratch)
      .Attr<double>("eps");
}

}  // namespace

// [handler-symbols]
// kCmdBufferCompatible: the handlers only launch kernels on the stream, into
// buffers XLA passes, so XLA may record them into its CUDA graphs.
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormForwardCuda, ForwardCuda<Kernels::kFast>,
                              ForwardBinding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormBackwardCuda,
                              BackwardCuda<Kernels::kFast>, BackwardBinding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormForwardCudaApexSeed,
                              ForwardCuda<Kernels::kApexSeed>,
                              ForwardBinding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNormBackwardCudaApexSeed,
                              BackwardCuda<Kernels::kApexSeed>,
                              BackwardBinding(),
                              {ffi::Traits::kCmdBufferCompatible});
// [handler-symbols-end]

}  // namespace gpu_ops
