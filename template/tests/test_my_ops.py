"""my_rms_norm against a float64 reference: forward, gradients, vmap, rows
split across two devices, grad inside shard_map, and bad input."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from my_ops import my_rms_norm  # noqa: E402


def reference(x, weight, eps=1e-5):
    x, weight = np.asarray(x, np.float64), np.asarray(weight, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def inputs(shape, seed=0):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, shape, jnp.float32)
    weight = 1 + 0.3 * jax.random.normal(kw, shape[-1:], jnp.float32)
    return x, weight, jax.random.normal(kd, shape, jnp.float32)


def loss(norm):
    return lambda x, weight, dy: jnp.vdot(norm(x, weight), dy)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 300), (0, 8)], ids=str)
def test_forward_and_gradients_are_the_references(shape):
    x, weight, dy = inputs(shape)
    np.testing.assert_allclose(jax.jit(my_rms_norm)(x, weight), reference(x, weight),
                               rtol=1e-5, atol=1e-6)
    got = jax.jit(jax.grad(loss(my_rms_norm), argnums=(0, 1)))(x, weight, dy)
    for g, w in zip(got, float64_grads(x, weight, dy)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("weight_axis", [None, 0])
def test_vmap_of_the_gradient(weight_axis):
    x, weight, dy = inputs((3, 4, 16))
    weights = weight if weight_axis is None else jnp.stack([weight, 2 * weight, 3 * weight])
    grads = jax.vmap(jax.grad(loss(my_rms_norm), argnums=(0, 1)),
                     in_axes=(0, weight_axis, 0))(x, weights, dy)
    for b in range(3):
        one = jax.grad(loss(my_rms_norm), argnums=(0, 1))(
            x[b], weights if weight_axis is None else weights[b], dy[b])
        for g, w in zip(grads, one):
            np.testing.assert_allclose(g[b], w, rtol=1e-5, atol=1e-6)


def test_rows_split_across_devices_stay_split():
    # two GPUs where there are, else two CPU devices
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.make_mesh((2,), ("rows",), axis_types=(AxisType.Auto,), devices=devices[:2])
    x, weight, dy = inputs((8, 64))
    split = NamedSharding(mesh, P("rows"))
    xs, dys = jax.device_put(x, split), jax.device_put(dy, split)
    weight = jax.device_put(weight, NamedSharding(mesh, P()))
    grad = jax.jit(jax.grad(loss(my_rms_norm), argnums=(0, 1)))
    hlo = grad.lower(xs, weight, dys).compile().as_text()
    assert "all-gather" not in hlo and hlo.count("all-reduce(") == 1  # the weight gradient's
    dx, dweight = grad(xs, weight, dys)
    assert dx.sharding.spec[0] == "rows"
    want = jax.grad(loss(my_rms_norm), argnums=(0, 1))(x, weight, dy)
    np.testing.assert_allclose(dx, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dweight, want[1], rtol=1e-5, atol=1e-5)


def float64_grads(x, weight, dy, eps=1e-5):
    """(dx, dweight) of loss(my_rms_norm) in float64 jnp."""
    with jax.enable_x64(True):
        x64, w64, dy64 = (jnp.asarray(a, jnp.float64) for a in (x, weight, dy))
        in_jnp = lambda x, w: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w
        return tuple(np.asarray(g) for g in
                     jax.grad(loss(in_jnp), argnums=(0, 1))(x64, w64, dy64))


def test_grad_inside_shard_map_sums_the_replicated_weights_gradient():
    # The weight is replicated (in_specs P()), the rows split: each device's
    # weight gradient is of its rows, and grad must sum them over devices.
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.make_mesh((2,), ("rows",), axis_types=(AxisType.Auto,), devices=devices[:2])
    x, weight, dy = inputs((8, 64), seed=3)
    norm = jax.shard_map(my_rms_norm, mesh=mesh, in_specs=(P("rows"), P()),
                         out_specs=P("rows"))
    dx, dweight = jax.jit(jax.grad(loss(norm), argnums=(0, 1)))(x, weight, dy)
    want_dx, want_dweight = float64_grads(x, weight, dy)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dweight, want_dweight, rtol=1e-4, atol=1e-4)


def test_bad_input_is_a_clear_error():
    x, weight, _ = inputs((2, 4))
    with pytest.raises(TypeError, match="x must be float32"):
        my_rms_norm(x.astype(jnp.float16), weight)
    with pytest.raises(ValueError, match="weight must have shape"):
        my_rms_norm(x, weight[:3])
    with pytest.raises(ValueError, match="eps must be"):
        my_rms_norm(x, weight, eps=-1.0)


def test_a_misused_primitive_fails_where_it_is_traced():
    from my_ops import backward_p, forward_p

    x, weight, dy = inputs((2, 4))
    with pytest.raises(TypeError, match="weight must be float32"):
        jax.eval_shape(lambda x, w: forward_p.bind(x, w, eps=1e-5), x, weight.astype(jnp.int32))
    with pytest.raises(ValueError, match="inv_rms must have shape"):
        jax.eval_shape(lambda dy, x, w: backward_p.bind(dy, x, x, w, eps=1e-5), dy, x, weight)
