"""y in x's dtype with a weight of another: ``rms_norm(x, weight,
out_dtype=x.dtype)``, as a model keeping float32 weights for bfloat16
activations calls it. y is computed in float32 and rounded once to x's
dtype; its cotangent (and tangent) has y's dtype; the weight's gradient
stays in the weight's. Every transformation gives the float64 reference.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import gpu_ops
import reference

SHAPES = [(7, 24), (4, 3, 64), (1, 8)]


def inputs(shape, x_dtype=jnp.bfloat16, weight_dtype=jnp.float32, seed=0):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, shape, jnp.float32).astype(x_dtype)
    weight = (1 + 0.3 * jax.random.normal(kw, shape[-1:], jnp.float32)).astype(weight_dtype)
    dy = jax.random.normal(kd, shape, jnp.float32).astype(x_dtype)
    return x, weight, dy


def in_x_dtype(x, weight, **kwargs):
    return gpu_ops.rms_norm(x, weight, out_dtype=x.dtype, **kwargs)


def check(op, x, weight, dy):
    """op(x, weight) in x's dtype, and its VJP with a cotangent of x's dtype,
    against the float64 reference."""
    y, pullback = jax.vjp(op, x, weight)
    dx, dweight = pullback(dy)
    assert (y.dtype, dx.dtype, dweight.dtype) == (x.dtype, x.dtype, weight.dtype)
    reference.check_op(op, x, weight, dy)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("x_dtype", [jnp.bfloat16, jnp.float16])
def test_values_and_gradients_are_the_float64_references(shape, x_dtype, implementation):
    check(in_x_dtype, *inputs(shape, x_dtype))


def test_the_default_and_the_weights_dtype_give_y_in_the_weights(implementation):
    x, weight, _ = inputs((5, 32))
    default = gpu_ops.rms_norm(x, weight)
    assert default.dtype == jnp.float32
    np.testing.assert_array_equal(gpu_ops.rms_norm(x, weight, out_dtype=jnp.float32), default)
    # rounded once from the same float32 values, to within bfloat16's rounding
    reference.assert_close(in_x_dtype(x, weight), default, jnp.bfloat16, jnp.bfloat16)


def test_one_dtype_takes_it_as_its_own(implementation):
    x, weight, dy = inputs((6, 40), jnp.float32, jnp.float32)
    check(in_x_dtype, x, weight, dy)


def test_under_jit_vmap_and_forward_mode(implementation):
    x, weight, dy = inputs((4, 3, 64), seed=1)
    check(jax.jit(in_x_dtype), x, weight, dy)
    batched = jax.vmap(in_x_dtype, in_axes=(0, None))(x, weight)
    np.testing.assert_array_equal(batched, in_x_dtype(x, weight))
    each_weight = jax.vmap(in_x_dtype)(x, jnp.stack([weight] * 4))
    np.testing.assert_array_equal(each_weight, in_x_dtype(x, weight))
    y, tangent = jax.jvp(in_x_dtype, (x, weight), (dy, weight))
    assert y.dtype == tangent.dtype == x.dtype
    reference.assert_close(tangent, reference.jvp(x, weight, dy, weight), x.dtype, x.dtype)


def test_with_a_residual(implementation):
    x, weight, residual, _, dtotal = reference.residual_inputs(
        (7, 24), jnp.bfloat16, weight_dtype=jnp.float32, seed=2)
    dy = dtotal  # y's cotangent, in y's dtype (x's)
    (y, total), pullback = jax.vjp(
        lambda x, w, r: in_x_dtype(x, w, residual=r), x, weight, residual)
    assert y.dtype == total.dtype == x.dtype
    reference.assert_close(y, reference.forward(total, weight), x.dtype, x.dtype)
    dx, dweight, dresidual = pullback((dy, dtotal))
    dnorm, expected_dweight = reference.vjp(total, weight, dy)
    np.testing.assert_array_equal(dx, dresidual)
    reference.assert_close(dx, dnorm + np.asarray(dtotal, np.float64), x.dtype, x.dtype)
    reference.assert_close(dweight, expected_dweight, weight.dtype, x.dtype)


def test_sharded_rows_and_shard_map(implementation):
    devices = jax.devices("cpu")[:4]
    mesh = jax.sharding.Mesh(np.array(devices), ("rows",))
    x, weight, dy = inputs((8, 64), seed=3)
    rows = NamedSharding(mesh, P("rows"))
    sharded = jax.device_put(x, rows)
    check(jax.jit(in_x_dtype), sharded, weight, jax.device_put(dy, rows))
    per_device = jax.shard_map(in_x_dtype, mesh=mesh, in_specs=(P("rows"), P()),
                               out_specs=P("rows"))
    np.testing.assert_array_equal(jax.jit(per_device)(sharded, weight), in_x_dtype(x, weight))


def test_export(implementation):
    from jax import export

    x, weight, dy = inputs((5, 32), seed=4)

    def loss_and_grads(x, weight):
        return jax.value_and_grad(
            lambda x, w: jnp.sum(in_x_dtype(x, w).astype(jnp.float32) ** 2),
            argnums=(0, 1))(x, weight)

    checks = [export.DisabledSafetyCheck.custom_call(name) for name in (
        "gpu_ops_rms_norm_fwd", "gpu_ops_rms_norm_bwd")]
    exported = export.export(jax.jit(loss_and_grads), platforms=["cpu", "cuda"],
                             disabled_checks=checks)(x, weight)
    restored = export.deserialize(exported.serialize())
    for got, want in zip(jax.tree.leaves(restored.call(x, weight)),
                         jax.tree.leaves(loss_and_grads(x, weight))):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                                   rtol=1e-6)


def test_the_custom_call_writes_y_in_xs_dtype(implementation):
    if implementation == "pallas":
        pytest.skip("no custom call: XLA converts the Pallas kernel's y (lowering.py)")
    x, weight, _ = inputs((4, 8))
    text = jax.jit(in_x_dtype).lower(x, weight).as_text()
    (call,) = [line for line in text.splitlines() if "@gpu_ops_rms_norm_fwd" in line]
    assert "(tensor<4x8xbf16>, tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4xf32>)" in call
    assert "stablehlo.convert" not in text  # no second pass


@pytest.mark.parametrize("out_dtype,error,message", [
    (jnp.float16, ValueError, r"out_dtype must be x's dtype \(bfloat16\) or the weight's "
                              r"\(float32\), got float16"),
    (jnp.int32, TypeError, "out_dtype must be float16, bfloat16, float32 or float64"),
    ("no such dtype", TypeError, "out_dtype must be float16, bfloat16"),
])
def test_other_dtypes_are_refused(out_dtype, error, message, implementation):
    x, weight, _ = inputs((4, 8))
    with pytest.raises(error, match=f"rms_norm: {message}"):
        gpu_ops.rms_norm(x, weight, out_dtype=out_dtype)
