"""RMS normalisation as a custom JAX operation, with CUDA and CPU kernels.

The entry point is :func:`rms_norm` (with ``residual=``, the residual add in
the same pass); :func:`rms_norm_fp8` and :func:`rms_norm_through_fp8` give
its output quantised to float8 for the next matmul, and
:func:`rms_norm_from_fp8` and :func:`rms_norm_through_fp8_input` take its
input in float8. The modules below hold
the pieces the book builds chapter by chapter:

- ``ffi_targets``: the native handlers registered with XLA, per platform;
- ``primitives``: the JAX primitives and their abstract evaluation;
- ``lowering``: lowering the primitives to XLA FFI custom calls;
- ``autodiff``: forward and reverse mode, from one JVP rule;
- ``hijax_route``: the same operation as one ``jax.experimental.hijax`` class;
- ``higher_order``: the primitives' JVP rules in jnp, for derivatives of the gradient;
- ``maths_in_jnp``: what each custom call computes, in jax.numpy;
- ``batching``: the vmap rules;
- ``sharding``: custom partitioning across devices;
- ``validation``: clear errors for bad input;
- ``kernel_plans``: which CUDA kernels a call runs, on this or a described GPU;
- ``quantised``: the entry points quantised to float8;
- ``from_fp8``: the entry points of a float8 input;
- ``float8``: the float8 layout (a scale per group of 128 values) in jnp.
"""

from gpu_ops.api import rms_norm
from gpu_ops.quantised import rms_norm_fp8, rms_norm_through_fp8
from gpu_ops.from_fp8 import rms_norm_from_fp8, rms_norm_through_fp8_input
from gpu_ops.ffi_targets import CUDA_COMPILED

__all__ = ["rms_norm", "rms_norm_fp8", "rms_norm_through_fp8", "rms_norm_from_fp8",
           "rms_norm_through_fp8_input", "CUDA_COMPILED"]
