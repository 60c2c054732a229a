"""The JAX primitives for RMS norm and their abstract evaluation.

There are two pairs:

- ``rms_norm_fwd_p`` and ``rms_norm_bwd_p`` are what ``jit``, ``grad`` and
  ``vmap`` see. They are lowered through ``custom_partitioning``
  (``sharding.py``), which splits a sharded array into per-device shards.
- ``rms_norm_fwd_shard_p`` and ``rms_norm_bwd_shard_p`` compute on one shard;
  they are lowered straight to the FFI custom call (``lowering.py``).

Both pairs have the same shapes and dtypes:

- forward: ``(x, weight) -> (y, inv_rms)``; with a residual operand,
  ``(x, weight, residual) -> (y, inv_rms, x + residual)``, where ``y``
  normalises ``x + residual`` (the residual stream of a transformer, added
  and normalised in one pass)
- backward: ``(dy, inv_rms, x, weight) -> (dx, dweight)``

and the same parameters: ``eps``, and ``kernels``, which says what the
per-shard primitives lower to: ``"ffi"`` (the C++ and CUDA kernels behind
XLA's FFI) or ``"pallas"`` (the Pallas kernels of ``pallas_kernels.py``).
Every other rule (VJP, vmap, partitioning) is the same for both.

``DESCRIPTIONS`` says of every primitive what its operands and results are
(rows, normalised axes, a value per row or per group of a row, the weight
gradient), from which its partitioning and vmap rules follow.

where ``weight`` covers the trailing ``weight.ndim`` axes of ``x``, ``y`` and
``dy`` have weight's dtype, and ``inv_rms`` has x's leading shape and is
float32 unless x is float64.
"""

import dataclasses
from functools import partial

import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import xla

from gpu_ops.float8 import GROUP as FLOAT8_GROUP


def inv_rms_dtype(x_dtype):
    """float32 for 16-bit and 32-bit inputs, float64 for float64 inputs."""
    return jnp.float64 if x_dtype == jnp.float64 else jnp.float32


def leading_shape(x, weight):
    """The axes of x that are not normalised: the shape of inv_rms."""
    return x.shape[: x.ndim - weight.ndim]


def _like(aval, shape, dtype):
    """A result of `shape` and `dtype` typed like the operand `aval` otherwise.

    Beyond shape and dtype, JAX's types carry the mesh axes a value varies
    along inside ``shard_map``, and its sharding: a result built from scratch
    would claim to be the same on every device, so ``shard_map`` could not
    tell a sharded result from a replicated one, nor type its gradient. The
    result keeps the operand's varying axes, and its sharding cut to `shape`'s
    leading axes.
    """
    sharding = aval.sharding.update(spec=tuple(aval.sharding.spec)[: len(shape)])
    return aval.update(shape=shape, dtype=dtype, weak_type=False, sharding=sharding)


def _forward_abstract_eval(x, weight, *residual, **params):
    del params
    assert all(r.shape == x.shape and r.dtype == x.dtype for r in residual), (x, residual)
    return (
        _like(x, x.shape, weight.dtype),
        _like(x, leading_shape(x, weight), inv_rms_dtype(x.dtype)),
        *(_like(x, x.shape, x.dtype) for _ in residual),
    )


def _backward_abstract_eval(dy, inv_rms, x, weight, **params):
    del params
    assert dy.shape == x.shape and dy.dtype == weight.dtype, (dy, x, weight)
    assert inv_rms.shape == leading_shape(x, weight), (inv_rms, x, weight)
    return (
        _like(x, x.shape, x.dtype),
        _like(weight, weight.shape, weight.dtype),
    )


def _quantised_forward_abstract_eval(x, weight, *residual, **params):
    del params
    leading = leading_shape(x, weight)
    return (
        _like(x, x.shape, jnp.float8_e4m3fn),
        _like(x, leading, inv_rms_dtype(x.dtype)),
        _like(x, (*leading, weight.shape[-1] // FLOAT8_GROUP), jnp.float32),
        *(_like(x, x.shape, x.dtype) for _ in residual),
    )


def _scaled_quantised_forward_abstract_eval(x, weight, *residual_and_row_scales, **params):
    *residual, row_scales = residual_and_row_scales
    assert row_scales.shape == leading_shape(x, weight), (x, row_scales)
    assert row_scales.dtype == jnp.float32, row_scales
    return _quantised_forward_abstract_eval(x, weight, *residual, **params)


def _from_fp8_forward_abstract_eval(values, weight, scales, **params):
    del params
    assert values.dtype == jnp.float8_e4m3fn and scales.dtype == jnp.float32, (values, scales)
    assert scales.shape == (*values.shape[:-1], weight.shape[0] // FLOAT8_GROUP), scales
    return (_like(values, values.shape, weight.dtype),
            _like(values, values.shape[:-1], jnp.float32))


def _from_fp8_backward_abstract_eval(dy, inv_rms, values, weight, scales, **params):
    del params
    assert dy.shape == values.shape and dy.dtype == weight.dtype, (dy, values, weight)
    assert inv_rms.shape == values.shape[:-1], (inv_rms, values)
    return (_like(values, values.shape, weight.dtype),
            _like(weight, weight.shape, weight.dtype))


def _through_fp8_input_forward_abstract_eval(x, weight, **params):
    del params
    leading = x.shape[:-1]
    return (_like(x, x.shape, weight.dtype), _like(x, leading, jnp.float32),
            _like(x, x.shape, jnp.float8_e4m3fn),
            _like(x, (*leading, weight.shape[0] // FLOAT8_GROUP), jnp.float32))


def _tangent_abstract_eval(x, weight, inv_rms, dx, dweight, **params):
    del params
    assert dx.shape == x.shape and dweight.shape == weight.shape, (x, dx, weight, dweight)
    assert inv_rms.shape == x.shape[: x.ndim - weight.ndim], (inv_rms, x, weight)
    return (_like(x, x.shape, weight.dtype),)


def _from_fp8_tangent_abstract_eval(values, weight, scales, inv_rms, dx, dweight, **params):
    del scales
    return _tangent_abstract_eval(values, weight, inv_rms, dx, dweight, **params)


def _primitive(name, abstract_eval, impl=None):
    primitive = Primitive(name)
    primitive.multiple_results = True
    primitive.def_impl(impl or partial(xla.apply_primitive, primitive))
    primitive.def_abstract_eval(abstract_eval)
    return primitive


def _partitioned(name, abstract_eval):
    """(`name`, `name`_shard): the primitive custom partitioning splits and
    the one each device runs, with the same abstract evaluation. Outside jit
    there is nothing to partition: the first runs the second."""
    shard = _primitive(f"{name}_shard", abstract_eval)
    return _primitive(name, abstract_eval, shard.bind), shard


rms_norm_fwd_p, rms_norm_fwd_shard_p = _partitioned("rms_norm_fwd", _forward_abstract_eval)
rms_norm_bwd_p, rms_norm_bwd_shard_p = _partitioned("rms_norm_bwd", _backward_abstract_eval)

#: The forward quantised to float8: ``(x, weight) -> (values, inv_rms,
#: scales)``, y in float8_e4m3fn with a float32 scale per group of
#: FLOAT8_GROUP values of a row (weight of one dimension; float8.py); with a
#: residual operand, of x + residual, which comes last.
rms_norm_fp8_fwd_p, rms_norm_fp8_fwd_shard_p = _partitioned(
    "rms_norm_fp8_fwd", _quantised_forward_abstract_eval)

#: The same with a float32 scale per row given, the last operand (a tensor's
#: one scale, broadcast): ``(x, weight, row_scales) -> (values, inv_rms,
#: largest)``, the values y / the row's scale, and each group's largest |y|
#: in place of its scale.
rms_norm_fp8_scaled_fwd_p, rms_norm_fp8_scaled_fwd_shard_p = _partitioned(
    "rms_norm_fp8_scaled_fwd", _scaled_quantised_forward_abstract_eval)

#: The norm of a float8 input, x the float8_e4m3fn values times their
#: float32 scales, one per group of FLOAT8_GROUP values of a row (float8.py),
#: with a weight of one dimension: forward ``(values, weight, scales) -> (y,
#: inv_rms)``, backward ``(dy, inv_rms, values, weight, scales) -> (dx,
#: dweight)``, where y, dy and dx have the weight's dtype and inv_rms is
#: float32. The weight is second, as in the other forwards, so that they
#: share their vmap rule.
rms_norm_from_fp8_fwd_p, rms_norm_from_fp8_fwd_shard_p = _partitioned(
    "rms_norm_from_fp8_fwd", _from_fp8_forward_abstract_eval)
rms_norm_from_fp8_bwd_p, rms_norm_from_fp8_bwd_shard_p = _partitioned(
    "rms_norm_from_fp8_bwd", _from_fp8_backward_abstract_eval)
#: x quantised to float8 by jnp, then the forward of that float8 input:
#: ``(x, weight) -> (y, inv_rms, values, scales)``. One primitive, so that x
#: is partitioned before it is quantised: XLA could otherwise split a
#: normalised axis of x, and so its groups, across devices, and then the
#: scales' sharding would fit no mesh.
rms_norm_through_fp8_input_fwd_p, rms_norm_through_fp8_input_fwd_shard_p = _partitioned(
    "rms_norm_through_fp8_input_fwd", _through_fp8_input_forward_abstract_eval)

#: y's tangent, linear in the tangents of x and the weight (autodiff.py):
#: ``(x, weight, inv_rms, dx, dweight) -> (dy,)``, dy in the weight's dtype,
#: with the forward's parameters. Its transpose runs the backward.
rms_norm_tangent_p = _primitive("rms_norm_tangent", _tangent_abstract_eval)
#: The same for a float8 input, given as its values and scales:
#: ``(values, weight, scales, inv_rms, dx, dweight) -> (dy,)``, dx float32.
rms_norm_from_fp8_tangent_p = _primitive("rms_norm_from_fp8_tangent",
                                         _from_fp8_tangent_abstract_eval)


@dataclasses.dataclass(frozen=True)
class Layout:
    """What each operand and result of a primitive is, by kind, for the rules
    that follow from it alone (partitioning, sharding.py; batching,
    batching.py):

    - ``"x"``: rows, then the normalised axes (x, a residual, y, dy, dx,
      float8 values, x + residual);
    - ``"n"``: the normalised axes only (the weight, and its tangent);
    - ``"rows"``: one value per row (inv_rms, a scale per row);
    - ``"groups"``: one per group of FLOAT8_GROUP values of a row (float8
      scales and the groups' largest values);
    - ``"dn"``: the weight's gradient, a sum over every row.

    `x` is the operand of kind "x" whose sharding the rows keep; `residual`,
    whether a residual operand is added to x (the third), which the handlers
    take as variants of their own (lowering.py).
    """

    operands: tuple
    results: tuple
    x: int = 0
    residual: bool = False


@dataclasses.dataclass(frozen=True)
class Description:
    """A primitive: its layouts by number of operands (a residual operand is
    one more), the per-shard primitive that custom partitioning splits it
    into (None: not partitioned), and whether its lowering takes the
    ``kernels`` parameter (the FFI's kernels or the Pallas ones)."""

    layouts: dict
    shard: Primitive | None = None
    kernels: bool = False


_FORWARD = Layout(("x", "n"), ("x", "rows"))
_RESIDUAL_FORWARD = Layout(("x", "n", "x"), ("x", "rows", "x"), residual=True)
_BACKWARD = Layout(("x", "rows", "x", "n"), ("x", "dn"), x=2)

#: Every primitive's description.
DESCRIPTIONS = {
    rms_norm_fwd_p: Description({2: _FORWARD, 3: _RESIDUAL_FORWARD}, rms_norm_fwd_shard_p,
                                kernels=True),
    rms_norm_bwd_p: Description({4: _BACKWARD}, rms_norm_bwd_shard_p, kernels=True),
    rms_norm_fp8_fwd_p: Description(
        {2: Layout(("x", "n"), ("x", "rows", "groups")),
         3: Layout(("x", "n", "x"), ("x", "rows", "groups", "x"), residual=True)},
        rms_norm_fp8_fwd_shard_p),
    rms_norm_fp8_scaled_fwd_p: Description(
        {3: Layout(("x", "n", "rows"), ("x", "rows", "groups")),
         4: Layout(("x", "n", "x", "rows"), ("x", "rows", "groups", "x"), residual=True)},
        rms_norm_fp8_scaled_fwd_shard_p),
    rms_norm_from_fp8_fwd_p: Description({3: Layout(("x", "n", "groups"), ("x", "rows"))},
                                         rms_norm_from_fp8_fwd_shard_p),
    rms_norm_from_fp8_bwd_p: Description(
        {5: Layout(("x", "rows", "x", "n", "groups"), ("x", "dn"), x=2)},
        rms_norm_from_fp8_bwd_shard_p),
    rms_norm_through_fp8_input_fwd_p: Description(
        {2: Layout(("x", "n"), ("x", "rows", "x", "groups"))},
        rms_norm_through_fp8_input_fwd_shard_p),
    rms_norm_tangent_p: Description({5: Layout(("x", "n", "rows", "x", "n"), ("x",))}),
    rms_norm_from_fp8_tangent_p: Description(
        {6: Layout(("x", "n", "groups", "rows", "x", "n"), ("x",))}),
}
