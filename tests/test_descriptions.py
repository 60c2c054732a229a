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
    for count, layout in DESCRIPTIONS[primitive].layouts.items():
        assert len(layout.operands) == count
        assert set(layout.operands) | set(layout.results) <= KINDS
        assert len(layout.operand_dtypes) == count
        assert len(layout.result_dtypes) == len(layout.results)
        # an operand may have any of several roles' dtypes (dy: the weight's or x's)
        operand_roles = {role for dtype in layout.operand_dtypes
                         for role in (dtype if isinstance(dtype, tuple) else (dtype,))}
        assert operand_roles | set(layout.result_dtypes) <= DTYPE_ROLES
        assert None not in layout.result_dtypes  # every result has a dtype
        assert layout.operands[layout.x] == "x" and "n" in layout.operands


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
