// The FFI targets gpu_ops exports, in one list: their names, and the
// bindings of their handlers, one per platform (rms_norm_handlers.h says what
// each target computes).
//
// Every operand and result of every target is a buffer of any dtype
// (ffi::AnyBuffer: the handlers check dtypes and shapes themselves,
// rms_norm_checks.h), and every handler takes one attribute, eps. So a
// binding is its counts: operands, results, and the scratch results the
// CUDA handler has after them (cuda_scratch.h), which the Python lowering
// adds. The declarations (rms_norm_handlers.h), the bindings of the
// definitions and the module's table of targets (module.cc) come from this
// list.
#ifndef GPU_OPS_FFI_TARGETS_H_
#define GPU_OPS_FFI_TARGETS_H_

#include <utility>

#include "xla/ffi/api/ffi.h"

// X(Name, "target", operands, results, CUDA scratch results): the handlers
// RmsNorm<Name>Cpu and RmsNorm<Name>Cuda, of the FFI target "target".
#define GPU_OPS_FFI_TARGETS(X)                                                   \
  X(Forward, "gpu_ops_rms_norm_fwd", 2, 2, 0)                                    \
  X(ResidualForward, "gpu_ops_rms_norm_residual_fwd", 3, 3, 0)                   \
  X(QuantisedForward, "gpu_ops_rms_norm_fp8_fwd", 2, 3, 0)                       \
  X(ResidualQuantisedForward, "gpu_ops_rms_norm_residual_fp8_fwd", 3, 4, 0)      \
  X(ScaledQuantisedForward, "gpu_ops_rms_norm_fp8_scaled_fwd", 3, 3, 0)          \
  X(ResidualScaledQuantisedForward, "gpu_ops_rms_norm_residual_fp8_scaled_fwd",  \
    4, 4, 0)                                                                     \
  X(Backward, "gpu_ops_rms_norm_bwd", 4, 2, 1)                                   \
  X(FromFloat8Forward, "gpu_ops_rms_norm_from_fp8_fwd", 3, 2, 0)                 \
  X(FromFloat8Backward, "gpu_ops_rms_norm_from_fp8_bwd", 5, 2, 1)

namespace gpu_ops {

// Each target's counts, as <Name>Signature.
#define GPU_OPS_SIGNATURE(name, target, operands, results, cuda_scratch) \
  struct name##Signature {                                               \
    static constexpr int kOperands = operands;                           \
    static constexpr int kResults = results;                             \
    static constexpr int kCudaScratch = cuda_scratch;                    \
  };
GPU_OPS_FFI_TARGETS(GPU_OPS_SIGNATURE)
#undef GPU_OPS_SIGNATURE

// `binding` with kOperands buffer operands, kResults buffer results and eps.
template <int kOperands, int kResults, typename Binding>
auto WithBuffers(Binding&& binding) {
  if constexpr (kOperands > 0) {
    return WithBuffers<kOperands - 1, kResults>(
        std::move(binding).template Arg<xla::ffi::AnyBuffer>());
  } else if constexpr (kResults > 0) {
    return WithBuffers<0, kResults - 1>(
        std::move(binding).template Ret<xla::ffi::AnyBuffer>());
  } else {
    return std::move(binding).template Attr<double>("eps");
  }
}

// The binding of the CPU handler of the target of `Signature`.
template <typename Signature>
auto CpuBinding() {
  return WithBuffers<Signature::kOperands, Signature::kResults>(xla::ffi::Ffi::Bind());
}

// The binding of its CUDA handler: the stream first, the scratch results
// last (Stream: ffi::PlatformStream<cudaStream_t>, which only CUDA code
// names).
template <typename Signature, typename Stream>
auto CudaBinding() {
  return WithBuffers<Signature::kOperands, Signature::kResults + Signature::kCudaScratch>(
      xla::ffi::Ffi::Bind().Ctx<Stream>());
}

}  // namespace gpu_ops

// Defines RmsNorm<Name>Cpu, the handler of the function <Name>Cpu (in
// namespace gpu_ops, where its file defines it).
#define GPU_OPS_DEFINE_CPU_HANDLER(name) \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(RmsNorm##name##Cpu, name##Cpu, CpuBinding<name##Signature>())

// Defines RmsNorm<Name>Cuda, the handler of <Name>Cuda. The handlers only
// launch kernels on XLA's stream, into buffers XLA passes: XLA may record
// them into its CUDA graphs (kCmdBufferCompatible).
#define GPU_OPS_DEFINE_CUDA_HANDLER(name)                                            \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                     \
      RmsNorm##name##Cuda, name##Cuda,                                               \
      (CudaBinding<name##Signature, xla::ffi::PlatformStream<cudaStream_t>>()),      \
      {xla::ffi::Traits::kCmdBufferCompatible})

#endif  // GPU_OPS_FFI_TARGETS_H_
