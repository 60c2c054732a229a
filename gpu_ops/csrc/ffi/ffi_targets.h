// The FFI targets gpu_ops exports, in one list: their names, and the
// bindings of their handlers, one per platform (rms_norm_handlers.h says what
// each target computes).
//
// Every operand and result of every target is a buffer of any dtype
// (ffi::AnyBuffer: the handlers check dtypes and shapes themselves,
// rms_norm_checks.h), and every handler takes the attribute eps. A target
// with variants (a residual add, a given scale per row) is one target: a
// bool attribute per variant says which the call is, and the variants'
// buffers come after the target's own operands and results
// (variant_buffers.h). So a binding is its counts and its variants:
// operands, results, the scratch results the CUDA handler has after them
// (cuda_scratch.h), which the Python lowering adds, and the variant
// attributes. The declarations (rms_norm_handlers.h), the bindings of the
// definitions and the module's table of targets (module.cc) come from this
// list.
#ifndef GPU_OPS_FFI_TARGETS_H_
#define GPU_OPS_FFI_TARGETS_H_

#include <utility>

#include "xla/ffi/api/ffi.h"

namespace gpu_ops {

// The variants a target can have, each a bool attribute of its name.
enum Variants : int {
  kNoVariants = 0,
  kResidual = 1,  // "residual": adds a residual operand and an x + residual result
  kScaled = 2,    // "scaled": adds an operand, a given scale per row
};

}  // namespace gpu_ops

// X(Name, "target", operands, results, CUDA scratch results, variants): the
// handlers RmsNorm<Name>Cpu and RmsNorm<Name>Cuda, of the FFI target
// "target".
#define GPU_OPS_FFI_TARGETS(X)                                                    \
  X(Forward, "gpu_ops_rms_norm_fwd", 2, 2, 0, kResidual)                          \
  X(QuantisedForward, "gpu_ops_rms_norm_fp8_fwd", 2, 3, 0, kResidual | kScaled)   \
  X(Backward, "gpu_ops_rms_norm_bwd", 4, 2, 1, kNoVariants)                       \
  X(FromFloat8Forward, "gpu_ops_rms_norm_from_fp8_fwd", 3, 2, 0, kNoVariants)     \
  X(FromFloat8Backward, "gpu_ops_rms_norm_from_fp8_bwd", 5, 2, 1, kNoVariants)

namespace gpu_ops {

// Each target's counts and variants, as <Name>Signature.
#define GPU_OPS_SIGNATURE(name, target, operands, results, cuda_scratch, variants) \
  struct name##Signature {                                                          \
    static constexpr int kOperands = operands;                                      \
    static constexpr int kResults = results;                                        \
    static constexpr int kCudaScratch = cuda_scratch;                               \
    static constexpr int kVariants = variants;                                      \
  };
GPU_OPS_FFI_TARGETS(GPU_OPS_SIGNATURE)
#undef GPU_OPS_SIGNATURE

// A target's binding is built in the order of its handlers' parameters:
// its buffer operands, the variants' operands (ffi::RemainingArgs) where it
// has variants, its buffer results, the variants' results
// (ffi::RemainingRets), then the attribute eps and a bool per variant. A
// binding can only be extended, not copied or moved, so each step passes
// the extended binding on by reference, and the last returns it.

// `binding` with eps and the variants' attributes.
template <int kVariants, typename Binding>
auto WithAttributes(Binding&& binding) {
  static_assert(kVariants == kNoVariants || kVariants == kResidual ||
                    kVariants == (kResidual | kScaled),
                "a target with variants has a residual variant");
  if constexpr (kVariants == kNoVariants) {
    return std::move(binding).template Attr<double>("eps");
  } else if constexpr (kVariants == kResidual) {
    return std::move(binding).template Attr<double>("eps").template Attr<bool>("residual");
  } else {
    return std::move(binding)
        .template Attr<double>("eps")
        .template Attr<bool>("residual")
        .template Attr<bool>("scaled");
  }
}

// `binding` with kResults buffer results, then the rest.
template <int kResults, int kVariants, typename Binding>
auto WithResults(Binding&& binding) {
  if constexpr (kResults > 0) {
    return WithResults<kResults - 1, kVariants>(
        std::move(binding).template Ret<xla::ffi::AnyBuffer>());
  } else if constexpr (kVariants != kNoVariants) {
    return WithAttributes<kVariants>(std::move(binding).RemainingRets());
  } else {
    return WithAttributes<kVariants>(std::move(binding));
  }
}

// `binding` with kOperands buffer operands, then the rest.
template <int kOperands, int kResults, int kVariants, typename Binding>
auto WithSignature(Binding&& binding) {
  if constexpr (kOperands > 0) {
    return WithSignature<kOperands - 1, kResults, kVariants>(
        std::move(binding).template Arg<xla::ffi::AnyBuffer>());
  } else if constexpr (kVariants != kNoVariants) {
    return WithResults<kResults, kVariants>(std::move(binding).RemainingArgs());
  } else {
    return WithResults<kResults, kVariants>(std::move(binding));
  }
}

// The binding of the CPU handler of the target of `Signature`.
template <typename Signature>
auto CpuBinding() {
  return WithSignature<Signature::kOperands, Signature::kResults, Signature::kVariants>(
      xla::ffi::Ffi::Bind());
}

// The binding of its CUDA handler: the stream first, the scratch results
// after the target's own results (Stream: ffi::PlatformStream<cudaStream_t>,
// which only CUDA code names).
template <typename Signature, typename Stream>
auto CudaBinding() {
  static_assert(Signature::kCudaScratch == 0 || Signature::kVariants == kNoVariants,
                "the Python lowering adds the scratch results last, after a "
                "variant's; a target with both would need them swapped");
  return WithSignature<Signature::kOperands, Signature::kResults + Signature::kCudaScratch,
                       Signature::kVariants>(xla::ffi::Ffi::Bind().Ctx<Stream>());
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
