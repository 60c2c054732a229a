"""vmap rules for the RMS norm primitives.

A batch axis of x is just one more leading (row) axis, so the forward moves it
to the front and runs once (with a residual operand, or a scale per row,
moved alike; whichever of them has no batch axis is broadcast along it). Two
cases cannot be folded into rows:

- a batched weight: each example has its own weight, so the op runs once per
  example (``lax.map``);
- the backward: the weight gradient must stay per example, while folding the
  batch into rows would sum it over the batch. It also runs once per example.

The tangent primitives of forward mode fold a batch into rows as the forward
does, unless the weight or its tangent is batched.
"""

import functools

import jax
import jax.numpy as jnp
from jax.interpreters import batching

from gpu_ops.primitives import (rms_norm_bwd_p, rms_norm_fp8_fwd_p, rms_norm_fp8_scaled_fwd_p,
                                rms_norm_from_fp8_bwd_p, rms_norm_from_fp8_fwd_p,
                                rms_norm_from_fp8_tangent_p, rms_norm_fwd_p, rms_norm_tangent_p,
                                rms_norm_through_fp8_input_fwd_p)


@functools.lru_cache(maxsize=None)
def _per_example(primitive, dims, params):
    """A jitted function binding `primitive` once per example (``lax.map``).

    `dims` gives each argument's batch axis (None: shared by all examples).
    The function is built once per (primitive, dims, params), so a repeated
    eager ``vmap`` finds it in jit's cache instead of tracing and compiling a
    new ``lax.map`` at every call.
    """
    params = dict(params)

    def per_example(*args):
        batched = [jnp.moveaxis(a, d, 0) for a, d in zip(args, dims) if d is not None]

        def one_example(example_args):
            parts = iter(example_args)
            full = [next(parts) if d is not None else a for a, d in zip(args, dims)]
            return primitive.bind(*full, **params)

        return jax.lax.map(one_example, batched)

    return jax.jit(per_example)


def _once_per_example(primitive, args, dims, **params):
    """Bind `primitive` once per example; every result is batched along axis 0."""
    outputs = _per_example(primitive, tuple(dims), tuple(sorted(params.items())))(*args)
    return outputs, [0] * len(outputs)


def _at_front(array, dim, size):
    """array with its batch axis `dim` first, or broadcast along a new first one."""
    if dim is None:
        return jnp.broadcast_to(array, (size, *array.shape))
    return jnp.moveaxis(array, dim, 0)


def _forward_batching(primitive, weight_like=(1,)):
    """The vmap rule of a forward primitive of (x, weight, *rest): every operand
    but those in `weight_like` (the weight; for a tangent primitive its tangent
    too) has x's leading axes (a residual, a scale per row or per group,
    inv_rms, x's tangent)."""
    def rule(args, dims, **params):
        if any(dims[i] is not None for i in weight_like):
            return _once_per_example(primitive, args, dims, **params)
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [a if i in weight_like else _at_front(a, d, size)
                 for i, (a, d) in enumerate(zip(args, dims))]
        outputs = primitive.bind(*moved, **params)
        return outputs, [0] * len(outputs)
    return rule


batching.primitive_batchers[rms_norm_fwd_p] = _forward_batching(rms_norm_fwd_p)
batching.primitive_batchers[rms_norm_fp8_fwd_p] = _forward_batching(rms_norm_fp8_fwd_p)
batching.primitive_batchers[rms_norm_fp8_scaled_fwd_p] = _forward_batching(
    rms_norm_fp8_scaled_fwd_p)
for _forward in (rms_norm_from_fp8_fwd_p, rms_norm_through_fp8_input_fwd_p):
    batching.primitive_batchers[_forward] = _forward_batching(_forward)
for _backward in (rms_norm_bwd_p, rms_norm_from_fp8_bwd_p):
    batching.primitive_batchers[_backward] = functools.partial(_once_per_example, _backward)
batching.primitive_batchers[rms_norm_tangent_p] = _forward_batching(
    rms_norm_tangent_p, weight_like=(1, 4))
batching.primitive_batchers[rms_norm_from_fp8_tangent_p] = _forward_batching(
    rms_norm_from_fp8_tangent_p, weight_like=(1, 5))
