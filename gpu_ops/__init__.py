"""RMS normalisation as a custom JAX operation, with CUDA and CPU kernels.

The one public entry point is :func:`rms_norm`. The modules below it hold the
pieces the book builds chapter by chapter:

- ``ffi_targets``: the native handlers registered with XLA, per platform;
- ``primitives``: the JAX primitives and their abstract evaluation;
- ``lowering``: lowering the primitives to XLA FFI custom calls;
- ``autodiff``: the custom VJP;
- ``hijax_route``: the same operation as one ``jax.experimental.hijax`` class;
- ``higher_order``: derivatives of the gradient (JVP rules in jnp);
- ``batching``: the vmap rules;
- ``sharding``: custom partitioning across devices;
- ``validation``: clear errors for bad input;
- ``kernel_plans``: which CUDA kernels a call runs, on this or a described GPU.
"""

from gpu_ops.api import rms_norm
from gpu_ops.ffi_targets import CUDA_COMPILED

__all__ = ["rms_norm", "CUDA_COMPILED"]
