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

from gpu_ops.primitives import DESCRIPTIONS


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


def _batching_rule(primitive):
    """The vmap rule of `primitive`, from its layouts (primitives.DESCRIPTIONS):
    once per example where it has a weight gradient or a batched weight (or
    weight tangent); else with every operand but those over the normalised
    axes alone (the weight, its tangent) moved to have the batch axis first."""
    description = DESCRIPTIONS[primitive]

    def rule(args, dims, **params):
        layout = description.layout_of(params)
        if "dn" in layout.results or any(
                d is not None for d, kind in zip(dims, layout.operands) if kind == "n"):
            return _once_per_example(primitive, args, dims, **params)
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        moved = [a if kind == "n" else _at_front(a, d, size)
                 for a, d, kind in zip(args, dims, layout.operands)]
        outputs = primitive.bind(*moved, **params)
        return outputs, [0] * len(outputs)
    return rule


for _primitive in DESCRIPTIONS:
    batching.primitive_batchers[_primitive] = _batching_rule(_primitive)
