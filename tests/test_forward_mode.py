"""Forward-mode differentiation: jax.jvp, jax.jacfwd and jax.linearize of
every function with a derivative, in every implementation (conftest.py runs
each test once per implementation), against the float64 reference; and
derivatives of derivatives in both orders."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from jax.test_util import check_grads

import gpu_ops
import reference
from gpu_ops import float8
from reference import DTYPES, assert_close


def _inputs(x_shape, weight_shape, x_dtype, weight_dtype=None, seed=0):
    """x, weight and tangents for each."""
    kx, kw, ktx, ktw = jax.random.split(jax.random.key(seed), 4)
    weight_dtype = weight_dtype or x_dtype
    x = jax.random.normal(kx, x_shape, jnp.float32).astype(x_dtype)
    weight = (1 + 0.3 * jax.random.normal(kw, weight_shape, jnp.float32)).astype(weight_dtype)
    dx = jax.random.normal(ktx, x_shape, jnp.float32).astype(x_dtype)
    dweight = jax.random.normal(ktw, weight_shape, jnp.float32).astype(weight_dtype)
    return x, weight, dx, dweight


@pytest.mark.parametrize("x_dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("x_shape,weight_shape", [((6, 40), (40,)), ((2, 3, 5, 8), (5, 8))],
                         ids=str)
def test_jvp_is_the_reference_tangent(x_shape, weight_shape, x_dtype):
    x, weight, dx, dweight = _inputs(x_shape, weight_shape, x_dtype, jnp.float32)
    y, dy = jax.jit(lambda *a: jax.jvp(gpu_ops.rms_norm, a[:2], a[2:]))(x, weight, dx, dweight)
    assert_close(y, reference.forward(x, weight), weight.dtype, x.dtype)
    assert_close(dy, reference.jvp(x, weight, dx, dweight), weight.dtype, x.dtype)


def test_jacfwd_equals_jacrev_and_linearize_equals_jvp():
    x, weight, dx, dweight = _inputs((3, 16), (16,), jnp.float32)
    forward = jax.jacfwd(gpu_ops.rms_norm, argnums=(0, 1))(x, weight)
    reverse = jax.jacrev(gpu_ops.rms_norm, argnums=(0, 1))(x, weight)
    for got, want in zip(forward, reverse):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _, tangent = jax.jvp(gpu_ops.rms_norm, (x, weight), (dx, dweight))
    _, linear = jax.linearize(gpu_ops.rms_norm, x, weight)
    np.testing.assert_allclose(linear(dx, dweight), tangent, rtol=1e-6, atol=1e-6)


def test_reverse_mode_still_runs_the_backward_kernel():
    # Reverse mode transposes the tangent: its jaxpr has the backward
    # primitive, and no forward-mode tangent is left to run.
    x, weight, _, _ = _inputs((4, 8), (8,), jnp.float32)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda x, w: gpu_ops.rms_norm(x, w).sum(),
                                        argnums=(0, 1)))(x, weight))
    assert "rms_norm_bwd" in jaxpr and "rms_norm_tangent" not in jaxpr


def test_derivatives_of_derivatives_in_both_modes():
    with jax.enable_x64(True):
        x, weight, _, _ = _inputs((3, 6), (6,), jnp.float64)
        check_grads(gpu_ops.rms_norm, (x, weight), order=2, modes=("fwd", "rev"))

        def cubed(w):
            return jnp.sum(gpu_ops.rms_norm(x, w) ** 3)

        hessian = jax.hessian(cubed)(weight)  # jacfwd of jacrev
        np.testing.assert_allclose(jax.jacrev(jax.jacfwd(cubed))(weight), hessian, rtol=1e-10)
        np.testing.assert_allclose(jax.jacfwd(jax.jacfwd(cubed))(weight), hessian, rtol=1e-10)


def test_vmap_of_jvp_with_a_weight_per_example():
    x, weight, dx, dweight = _inputs((3, 4, 32), (3, 32), jnp.float32)
    _, dy = jax.vmap(lambda *a: jax.jvp(gpu_ops.rms_norm, a[:2], a[2:]))(x, weight, dx, dweight)
    for b in range(3):
        assert_close(dy[b], reference.jvp(x[b], weight[b], dx[b], dweight[b]), jnp.float32)


@pytest.mark.skipif(len(jax.devices()) < 2, reason="one device: nothing to shard")
@pytest.mark.parametrize("x_spec,weight_spec", [(P("a"), P()), (P(None, "a"), P("a"))], ids=str)
def test_jvp_of_sharded_inputs_gives_the_one_device_answer(x_spec, weight_spec):
    mesh = jax.make_mesh((2,), ("a",), axis_types=(AxisType.Auto,))
    x, weight, dx, dweight = _inputs((8, 64), (64,), jnp.float32)

    def sharded(x, weight, dx, dweight):
        x, dx = (jax.lax.with_sharding_constraint(a, NamedSharding(mesh, x_spec)) for a in (x, dx))
        weight, dweight = (jax.lax.with_sharding_constraint(a, NamedSharding(mesh, weight_spec))
                           for a in (weight, dweight))
        return jax.jvp(gpu_ops.rms_norm, (x, weight), (dx, dweight))

    _, dy = jax.jit(sharded)(x, weight, dx, dweight)
    assert_close(dy, reference.jvp(x, weight, dx, dweight), jnp.float32)


@pytest.mark.skipif(len(jax.devices()) < 2, reason="one device: nothing to shard")
def test_jvp_over_explicit_axes_keeps_the_rows_sharded():
    mesh = jax.make_mesh((2,), ("a",), axis_types=(AxisType.Explicit,))
    x, weight, dx, dweight = _inputs((8, 64), (64,), jnp.float32)
    with jax.set_mesh(mesh):
        rows = [jax.device_put(a, NamedSharding(mesh, P("a"))) for a in (x, dx)]
        whole = [jax.device_put(a, NamedSharding(mesh, P())) for a in (weight, dweight)]
        _, dy = jax.jit(lambda x, w, tx, tw: jax.jvp(gpu_ops.rms_norm, (x, w), (tx, tw)))(
            rows[0], whole[0], rows[1], whole[1])
    assert dy.sharding.spec[0] == "a"
    assert_close(dy, reference.jvp(x, weight, dx, dweight), jnp.float32)


def test_jvp_with_a_residual():
    x, weight, dx, dweight = _inputs((5, 24), (24,), jnp.float32)
    residual, dresidual = 2 * x[::-1], dx[::-1]

    def with_residual(x, weight, residual):
        return gpu_ops.rms_norm(x, weight, residual=residual)

    (y, total), (dy, dtotal) = jax.jvp(with_residual, (x, weight, residual),
                                       (dx, dweight, dresidual))
    np.testing.assert_array_equal(dtotal, dx + dresidual)
    assert_close(dy, reference.jvp(total, weight, dtotal, dweight), jnp.float32)


@pytest.mark.parametrize("scale", [None, 0.02], ids=["group_scales", "given_scale"])
@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
def test_jvp_through_fp8_output_is_ys(scale, with_residual):
    # The tangent passes straight through the quantisation: y's own, in
    # y's read-back dtype; the amax of a given scale has none.
    x, weight, dx, dweight = _inputs((4, 256), (256,), jnp.float32)
    residual = (0.5 * x[::-1],) if with_residual else ()
    tangents = (dx, dweight, *(dx[::-1],) * with_residual)

    def through(x, weight, *residual):
        return gpu_ops.rms_norm_through_fp8(x, weight, scale=scale,
                                           residual=residual[0] if residual else None)

    outputs, output_tangents = jax.jvp(through, (x, weight, *residual), tangents)
    outputs, output_tangents = jax.tree.leaves(outputs), jax.tree.leaves(output_tangents)
    normalised = x + residual[0] if residual else x
    dnormalised = dx + tangents[2] if residual else dx
    assert_close(output_tangents[0], reference.jvp(normalised, weight, dnormalised, dweight),
                 jnp.float32)
    if scale is not None:
        assert float(output_tangents[1]) == 0.0  # amax
    if residual:
        np.testing.assert_array_equal(output_tangents[-1], dnormalised)


def test_jvp_through_fp8_input_is_the_dequantised_xs():
    x, weight, dx, dweight = _inputs((4, 128), (128,), jnp.float32)
    _, dy = jax.jvp(gpu_ops.rms_norm_through_fp8_input, (x, weight), (dx, dweight))
    read_back = float8.dequantize(*float8.quantize(x))
    assert_close(dy, reference.jvp(read_back, weight, dx, dweight), jnp.float32)
