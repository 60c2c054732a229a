"""jit, vmap and vmap of grad."""

import jax
import jax.numpy as jnp
import numpy as np

import gpu_ops
import reference
from reference import assert_close


def _data(batch=3, rows=4, width=8, seed=0):
    kx, kw = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (batch, rows, width), jnp.float32)
    weights = 1 + 0.3 * jax.random.normal(kw, (batch, width), jnp.float32)
    return x, weights


def _loss(x, weight):
    return jnp.sum(gpu_ops.rms_norm(x, weight) ** 2 * jnp.arange(x.shape[-1]))


def test_jit_matches_eager():
    x, weights = _data()
    eager = gpu_ops.rms_norm(x, weights[0])
    np.testing.assert_array_equal(jax.jit(gpu_ops.rms_norm)(x, weights[0]), eager)
    assert_close(eager, reference.forward(x, weights[0]))


def test_jit_with_static_eps():
    x, weights = _data()
    f = jax.jit(gpu_ops.rms_norm, static_argnums=2)
    assert_close(f(x, weights[0], 0.5), reference.forward(x, weights[0], 0.5))


def test_vmap_over_x_on_any_axis():
    x, weights = _data()
    for axis in range(3):
        moved = jnp.moveaxis(x, 0, axis)
        y = jax.vmap(gpu_ops.rms_norm, in_axes=(axis, None))(moved, weights[0])
        assert_close(y, reference.forward(x, weights[0]))


def test_vmap_over_x_and_weight():
    x, weights = _data()
    y = jax.vmap(gpu_ops.rms_norm)(x, weights)
    for b in range(x.shape[0]):
        assert_close(y[b], reference.forward(x[b], weights[b]))


def test_vmap_over_weight_only():
    x, weights = _data()
    y = jax.vmap(gpu_ops.rms_norm, in_axes=(None, 0))(x[0], weights)
    for b in range(x.shape[0]):
        assert_close(y[b], reference.forward(x[0], weights[b]))


def _per_example_reference(x, weight):
    dy = 2 * np.asarray(reference.forward(x, weight)) * np.arange(x.shape[-1])
    return reference.vjp(x, weight, dy)


def test_vmap_of_grad_keeps_weight_gradients_per_example():
    x, weights = _data()
    dx, dweight = jax.vmap(jax.grad(_loss, argnums=(0, 1)), in_axes=(0, None))(x, weights[0])
    assert dweight.shape == (x.shape[0], x.shape[-1])
    for b in range(x.shape[0]):
        expected_dx, expected_dweight = _per_example_reference(x[b], weights[0])
        assert_close(dx[b], expected_dx)
        assert_close(dweight[b], expected_dweight)


def test_jit_of_vmap_of_grad_with_batched_weights():
    x, weights = _data()
    grads = jax.jit(jax.vmap(jax.grad(_loss, argnums=(0, 1))))(x, weights)
    for b in range(x.shape[0]):
        expected_dx, expected_dweight = _per_example_reference(x[b], weights[b])
        assert_close(grads[0][b], expected_dx)
        assert_close(grads[1][b], expected_dweight)


def test_jacrev_matches_reference():
    x, weights = _data(batch=1, rows=2, width=5)
    jac = jax.jacrev(gpu_ops.rms_norm)(x[0], weights[0])
    for i in range(2):
        for j in range(5):
            dy = np.zeros((2, 5))
            dy[i, j] = 1.0
            assert_close(jac[i, j], reference.vjp(x[0], weights[0], dy)[0])


def _compilations_of_repeated_calls(f):
    """How many times XLA compiles while f() runs a second and third time."""
    compilations = []

    def count(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compilations.append(event)

    jax.block_until_ready(f())
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        jax.block_until_ready(f())
        jax.block_until_ready(f())
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    return len(compilations)


def test_repeated_eager_calls_compile_nothing():
    # The per-example rules built a new lax.map body at every call, so eager
    # vmap over the weight, vmap of grad and jacrev compiled it every time.
    x, weights = _data()
    calls = {
        "op": lambda: gpu_ops.rms_norm(x, weights[0]),
        "vmap over the weight": lambda: jax.vmap(gpu_ops.rms_norm)(x, weights),
        "vmap of grad": lambda: jax.vmap(jax.grad(_loss, argnums=(0, 1)), in_axes=(0, None))(
            x, weights[0]),
        "jacrev": lambda: jax.jacrev(gpu_ops.rms_norm)(x[0], weights[0]),
    }
    compiled = {name: _compilations_of_repeated_calls(f) for name, f in calls.items()}
    assert compiled == dict.fromkeys(calls, 0)
