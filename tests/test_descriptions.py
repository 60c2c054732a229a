"""Each primitive's description (primitives.DESCRIPTIONS) gives its abstract
evaluation: the results' shapes and dtypes, and the operands' checked."""

from functools import partial

import jax
import jax.numpy as jnp
import pytest

from gpu_ops import primitives
from gpu_ops.primitives import DESCRIPTIONS

KINDS = {"x", "n", "rows", "groups", "dn"}
DTYPE_ROLES = {"x", "weight", "y", "inv_rms", "float8", "float32", None}


@pytest.mark.parametrize("primitive", list(DESCRIPTIONS), ids=lambda p: p.name)
def test_every_layout_names_a_kind_and_a_dtype_for_each_operand_and_result(primitive):
    for layout in DESCRIPTIONS[primitive].variants().values():
        assert set(layout.operands) | set(layout.results) <= KINDS
        assert len(layout.operand_dtypes) == len(layout.operands)
        assert len(layout.result_dtypes) == len(layout.results)
        # an operand may have any of several roles' dtypes (dy: the weight's or x's)
        operand_roles = {role for dtype in layout.operand_dtypes
                         for role in (dtype if isinstance(dtype, tuple) else (dtype,))}
        assert operand_roles | set(layout.result_dtypes) <= DTYPE_ROLES
        assert None not in layout.result_dtypes  # every result has a dtype
        assert layout.operands[layout.x] == "x" and "n" in layout.operands


@pytest.mark.parametrize("primitive", [p for p, d in DESCRIPTIONS.items() if d.residual],
                         ids=lambda p: p.name)
def test_a_residual_variant_adds_an_operand_like_x_third_and_returns_the_sum_last(primitive):
    plain, residual = DESCRIPTIONS[primitive].variants().values()
    operands = list(plain.operands)
    operands.insert(2, "x")
    assert residual.operands == tuple(operands)
    assert residual.results == (*plain.results, "x")
    assert DESCRIPTIONS[primitive].layout_of({"residual": True}) is residual
    assert DESCRIPTIONS[primitive].layout_of({}) is plain


def test_the_residual_variant_is_chosen_by_the_parameter_not_the_operand_count():
    x = jax.ShapeDtypeStruct((4, 256), jnp.bfloat16)
    weight = jax.ShapeDtypeStruct((256,), jnp.bfloat16)
    y, inv_rms, total = jax.eval_shape(partial(primitives.rms_norm_fwd_p.bind, eps=1e-5,
                                               residual=True), x, weight, x)
    assert total.shape == x.shape and inv_rms.shape == (4,)
    with pytest.raises(AssertionError):  # three operands, bound as the plain forward
        jax.eval_shape(partial(primitives.rms_norm_fwd_p.bind, eps=1e-5), x, weight, x)
    with pytest.raises(AssertionError):  # no residual variant
        jax.eval_shape(partial(primitives.rms_norm_bwd_p.bind, eps=1e-5, residual=True),
                       x, inv_rms, x, weight)


def test_the_types_follow_from_the_layout():
    x = jax.ShapeDtypeStruct((3, 5, 256), jnp.bfloat16)
    weight = jax.ShapeDtypeStruct((256,), jnp.float32)
    y, inv_rms = jax.eval_shape(partial(primitives.rms_norm_fwd_p.bind, eps=1e-5,
                                        kernels="ffi"), x, weight)
    assert (y.shape, y.dtype, inv_rms.shape, inv_rms.dtype) == (
        (3, 5, 256), jnp.float32, (3, 5), jnp.float32)
    y_in_x_dtype, _ = jax.eval_shape(partial(primitives.rms_norm_fwd_p.bind, eps=1e-5,
                                             kernels="ffi", out_dtype=jnp.bfloat16), x, weight)
    assert y_in_x_dtype.dtype == jnp.bfloat16
    values, inv_rms, scales = jax.eval_shape(
        partial(primitives.rms_norm_fp8_fwd_shard_p.bind, eps=1e-5), x, weight)
    assert (values.dtype, scales.shape, scales.dtype) == (
        jnp.float8_e4m3fn, (3, 5, 2), jnp.float32)
    dy = jax.ShapeDtypeStruct(x.shape, jnp.float32)
    dx, dweight = jax.eval_shape(partial(primitives.rms_norm_bwd_p.bind, eps=1e-5,
                                         kernels="ffi"), dy, inv_rms, x, weight)
    assert (dx.dtype, dweight.shape, dweight.dtype) == (jnp.bfloat16, (256,), jnp.float32)


def test_operands_that_do_not_fit_the_layout_are_refused():
    # the primitives are internal: an operand of the wrong dtype or shape is
    # a bug in gpu_ops, caught where the primitive is bound
    x = jax.ShapeDtypeStruct((4, 256), jnp.bfloat16)
    weight = jax.ShapeDtypeStruct((256,), jnp.bfloat16)
    inv_rms = jax.ShapeDtypeStruct((4,), jnp.float32)
    for dy, inv in [(jax.ShapeDtypeStruct((4, 256), jnp.float32), inv_rms),  # dy's dtype
                    (x, jax.ShapeDtypeStruct((5,), jnp.float32))]:  # inv_rms's shape
        with pytest.raises(AssertionError):
            jax.eval_shape(partial(primitives.rms_norm_bwd_p.bind, eps=1e-5, kernels="ffi"),
                           dy, inv, x, weight)
