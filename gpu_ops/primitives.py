"""The JAX primitives for RMS norm and their abstract evaluation.

There are two pairs:

- ``rms_norm_fwd_p`` and ``rms_norm_bwd_p`` are what ``jit``, ``grad`` and
  ``vmap`` see. They are lowered through ``custom_partitioning``
  (``sharding.py``), which splits a sharded array into per-device shards.
- ``rms_norm_fwd_shard_p`` and ``rms_norm_bwd_shard_p`` compute on one shard;
  they are lowered straight to the FFI custom call (``lowering.py``).

Both pairs have the same shapes and dtypes:

- forward: ``(x, weight) -> (y, inv_rms)``; bound with ``residual=True``,
  ``(x, weight, residual) -> (y, inv_rms, x + residual)``, where ``y``
  normalises ``x + residual`` (the residual stream of a transformer, added
  and normalised in one pass)
- backward: ``(dy, inv_rms, x, weight) -> (dx, dweight)``

and the same parameters: ``eps``; ``kernels``, which says what the
per-shard primitives lower to: ``"ffi"`` (the C++ and CUDA kernels behind
XLA's FFI) or ``"pallas"`` (the Pallas kernels of ``pallas_kernels.py``);
and, of the forward, ``out_dtype``: y's dtype, None for the weight's or x's
(a float32 weight of bfloat16 x, y in bfloat16, as a model's next matmul
takes it), and ``residual``: whether a residual operand is added first (the
forwards quantised to float8 have it too; left out, False). Every other
rule (VJP, vmap, partitioning) is the same for all.

``DESCRIPTIONS`` says of every primitive what its operands and results are
(rows, normalised axes, a value per row or per group of a row, the weight
gradient; of x's dtype, the weight's, ...), from which its abstract
evaluation, its partitioning and its vmap rule follow.

where ``weight`` covers the trailing ``weight.ndim`` axes of ``x``, ``y`` and
``dy`` have the weight's dtype unless ``out_dtype`` gives x's, and
``inv_rms`` has x's leading shape and is float32 unless x is float64.
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


def _abstract_eval(primitive, *operands, **params):
    """The results' types, from the primitive's description (a per-shard
    primitive's is its partitioned one's)."""
    description = DESCRIPTIONS.get(primitive) or DESCRIPTIONS[_PARTITIONED[primitive]]
    return description.layout_of(params).abstract_eval(operands, params)


def _primitive(name, impl=None):
    primitive = Primitive(name)
    primitive.multiple_results = True
    primitive.def_impl(impl or partial(xla.apply_primitive, primitive))
    primitive.def_abstract_eval(partial(_abstract_eval, primitive))
    return primitive


def _partitioned(name):
    """(`name`, `name`_shard): the primitive custom partitioning splits and
    the one each device runs, with the same abstract evaluation. Outside jit
    there is nothing to partition: the first runs the second."""
    shard = _primitive(f"{name}_shard")
    return _primitive(name, shard.bind), shard


rms_norm_fwd_p, rms_norm_fwd_shard_p = _partitioned("rms_norm_fwd")
rms_norm_bwd_p, rms_norm_bwd_shard_p = _partitioned("rms_norm_bwd")

#: The forward quantised to float8: ``(x, weight) -> (values, inv_rms,
#: scales)``, y in float8_e4m3fn with a float32 scale per group of
#: FLOAT8_GROUP values of a row (weight of one dimension; float8.py); bound
#: with residual=True, of x + residual, which comes last.
rms_norm_fp8_fwd_p, rms_norm_fp8_fwd_shard_p = _partitioned("rms_norm_fp8_fwd")

#: The same with a float32 scale per row given, the last operand (a tensor's
#: one scale, broadcast): ``(x, weight, row_scales) -> (values, inv_rms,
#: largest)``, the values y / the row's scale, and each group's largest |y|
#: in place of its scale.
rms_norm_fp8_scaled_fwd_p, rms_norm_fp8_scaled_fwd_shard_p = _partitioned(
    "rms_norm_fp8_scaled_fwd")

#: The norm of a float8 input, x the float8_e4m3fn values times their
#: float32 scales, one per group of FLOAT8_GROUP values of a row (float8.py),
#: with a weight of one dimension: forward ``(values, weight, scales) -> (y,
#: inv_rms)``, backward ``(dy, inv_rms, values, weight, scales) -> (dx,
#: dweight)``, where y, dy and dx have the weight's dtype and inv_rms is
#: float32. The weight is second, as in the other forwards, so that they
#: share their vmap rule.
rms_norm_from_fp8_fwd_p, rms_norm_from_fp8_fwd_shard_p = _partitioned("rms_norm_from_fp8_fwd")
rms_norm_from_fp8_bwd_p, rms_norm_from_fp8_bwd_shard_p = _partitioned("rms_norm_from_fp8_bwd")
#: x quantised to float8 by jnp, then the forward of that float8 input:
#: ``(x, weight) -> (y, inv_rms, values, scales)``. One primitive, so that x
#: is partitioned before it is quantised: XLA could otherwise split a
#: normalised axis of x, and so its groups, across devices, and then the
#: scales' sharding would fit no mesh.
rms_norm_through_fp8_input_fwd_p, rms_norm_through_fp8_input_fwd_shard_p = _partitioned(
    "rms_norm_through_fp8_input_fwd")

#: y's tangent, linear in the tangents of x and the weight (autodiff.py):
#: ``(x, weight, inv_rms, dx, dweight) -> (dy,)``, dy in y's dtype, with the
#: forward's parameters. Its transpose runs the backward.
rms_norm_tangent_p = _primitive("rms_norm_tangent")
#: The same for a float8 input, given as its values and scales:
#: ``(values, weight, scales, inv_rms, dx, dweight) -> (dy,)``, dx float32.
rms_norm_from_fp8_tangent_p = _primitive("rms_norm_from_fp8_tangent")


#: The dtypes that layouts name by role (Layout.dtypes), beside x's, the
#: weight's and inv_rms's, which depend on the operands.
_FIXED_DTYPES = {"float8": jnp.float8_e4m3fn, "float32": jnp.float32}


@dataclasses.dataclass(frozen=True)
class Layout:
    """What each operand and result of a primitive is, by kind, from which its
    abstract evaluation (the results' shapes and dtypes; the operands'
    checked), its partitioning (sharding.py) and its batching (batching.py)
    follow:

    - ``"x"``: rows, then the normalised axes (x, a residual, y, dy, dx,
      float8 values, x + residual);
    - ``"n"``: the normalised axes only (the weight, and its tangent);
    - ``"rows"``: one value per row (inv_rms, a scale per row);
    - ``"groups"``: one per group of FLOAT8_GROUP values of a row (float8
      scales and the groups' largest values);
    - ``"dn"``: the weight's gradient, a sum over every row.

    and of what dtype (`operand_dtypes`, `result_dtypes`): ``"x"`` (the dtype
    of operand `x`), ``"weight"`` (of the first operand of kind "n"), ``"y"``
    (the parameter ``out_dtype``, else the weight's), ``"inv_rms"``
    (inv_rms_dtype of x's), ``"float8"``, ``"float32"``; for an operand, a
    tuple of those (any of them), or None (any dtype).

    `x` is the operand of kind "x" whose shape and sharding the rows keep.
    """

    operands: tuple
    results: tuple
    operand_dtypes: tuple
    result_dtypes: tuple
    x: int = 0

    def abstract_eval(self, operands, params):
        """The results' types, of shapes and dtypes that follow from the
        operands' and the parameters' (the operands asserted to fit the
        layout)."""
        x, weight = operands[self.x], operands[self.operands.index("n")]
        leading = leading_shape(x, weight)
        shapes = {"x": x.shape, "n": weight.shape, "dn": weight.shape, "rows": leading,
                  "groups": (*leading, weight.shape[-1] // FLOAT8_GROUP)}
        dtypes = {"x": x.dtype, "weight": weight.dtype, "inv_rms": inv_rms_dtype(x.dtype),
                  "y": params.get("out_dtype") or weight.dtype, **_FIXED_DTYPES}
        assert len(operands) == len(self.operands), (self.operands, operands)
        for operand, kind, dtype in zip(operands, self.operands, self.operand_dtypes):
            assert operand.shape == shapes[kind], (kind, operands)
            allowed = dtype if isinstance(dtype, tuple) else (dtype,)
            assert dtype is None or operand.dtype in [dtypes[d] for d in allowed], (
                dtype, operands)
        return tuple(_like(weight if kind == "dn" else x, shapes[kind], dtypes[dtype])
                     for kind, dtype in zip(self.results, self.result_dtypes, strict=True))


@dataclasses.dataclass(frozen=True)
class Description:
    """A primitive: its layout; the per-shard primitive that custom
    partitioning splits it into (None: not partitioned); and where it has a
    variant with a residual operand (the third, added to x first), that
    variant's layout, which a bind with the parameter ``residual=True`` takes."""

    layout: Layout
    shard: Primitive | None = None
    residual: Layout | None = None

    def layout_of(self, params):
        """The layout of a bind with `params`: abstract evaluation, vmap and
        partitioning ask here. (The lowering and higher_order.py read the
        same parameter for the variant's FFI target and its maths in jnp.)"""
        if not params.get("residual", False):
            return self.layout
        assert self.residual is not None, "this primitive has no residual variant"
        return self.residual

    def variants(self):
        """{residual: layout} of every variant."""
        return {False: self.layout, **({True: self.residual} if self.residual else {})}


# Layout(kinds of the operands, of the results, dtypes of the operands, of
# the results)
_FORWARD = Layout(("x", "n"), ("x", "rows"), ("x", "weight"), ("y", "inv_rms"))
_RESIDUAL_FORWARD = Layout(("x", "n", "x"), ("x", "rows", "x"), ("x", "weight", "x"),
                           ("y", "inv_rms", "x"))
_BACKWARD = Layout(("x", "rows", "x", "n"), ("x", "dn"),
                   (("weight", "x"), "inv_rms", "x", "weight"),  # dy: y's dtype, either
                   ("x", "weight"), x=2)
_FP8_RESULTS = ("float8", "inv_rms", "float32")

#: Every primitive's description.
DESCRIPTIONS = {
    rms_norm_fwd_p: Description(_FORWARD, rms_norm_fwd_shard_p, residual=_RESIDUAL_FORWARD),
    rms_norm_bwd_p: Description(_BACKWARD, rms_norm_bwd_shard_p),
    rms_norm_fp8_fwd_p: Description(
        Layout(("x", "n"), ("x", "rows", "groups"), ("x", "weight"), _FP8_RESULTS),
        rms_norm_fp8_fwd_shard_p,
        residual=Layout(("x", "n", "x"), ("x", "rows", "groups", "x"), ("x", "weight", "x"),
                        (*_FP8_RESULTS, "x"))),
    rms_norm_fp8_scaled_fwd_p: Description(
        Layout(("x", "n", "rows"), ("x", "rows", "groups"), ("x", "weight", "float32"),
               _FP8_RESULTS),
        rms_norm_fp8_scaled_fwd_shard_p,
        residual=Layout(("x", "n", "x", "rows"), ("x", "rows", "groups", "x"),
                        ("x", "weight", "x", "float32"), (*_FP8_RESULTS, "x"))),
    rms_norm_from_fp8_fwd_p: Description(
        Layout(("x", "n", "groups"), ("x", "rows"), ("float8", "weight", "float32"),
               ("weight", "float32")),
        rms_norm_from_fp8_fwd_shard_p),
    rms_norm_from_fp8_bwd_p: Description(
        Layout(("x", "rows", "x", "n", "groups"), ("x", "dn"),
               ("weight", "float32", "float8", "weight", "float32"), ("weight", "weight"), x=2),
        rms_norm_from_fp8_bwd_shard_p),
    rms_norm_through_fp8_input_fwd_p: Description(
        Layout(("x", "n"), ("x", "rows", "x", "groups"), ("x", "weight"),
               ("weight", "float32", "float8", "float32")),
        rms_norm_through_fp8_input_fwd_shard_p),
    # (the tangents of x and the weight: of any dtype their primal's
    # tangent has)
    rms_norm_tangent_p: Description(
        Layout(("x", "n", "rows", "x", "n"), ("x",), ("x", "weight", "inv_rms", None, None),
               ("y",))),
    rms_norm_from_fp8_tangent_p: Description(
        Layout(("x", "n", "groups", "rows", "x", "n"), ("x",),
               ("float8", "weight", "float32", "float32", None, None), ("weight",))),
}
#: The partitioned primitive of each per-shard one.
_PARTITIONED = {d.shard: p for p, d in DESCRIPTIONS.items() if d.shard is not None}
