"""The residual add fused into the norm: ``rms_norm(x, weight, residual=r)``
returns ``(rms_norm(x + r, weight), x + r)``, under every transformation.

The gradient reaching ``x + r`` is the norm's plus the cotangent of the sum
itself (the residual stream's), and x and r both receive it.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import gpu_ops
from reference import DTYPES, check_residual_op, residual_inputs


def fused(x, weight, residual, eps=1e-5):
    return gpu_ops.rms_norm(x, weight, eps, residual=residual)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,weight_ndim", [((5, 3, 40), 1), ((6, 4, 16), 2), ((1, 8), 1)],
                         ids=str)
def test_values_and_gradients_are_the_float64_references(dtype, shape, weight_ndim,
                                                         implementation):
    check_residual_op(fused, *residual_inputs(shape, dtype, weight_ndim))


def test_a_weight_of_another_dtype(implementation):
    check_residual_op(fused, *residual_inputs((7, 24), jnp.bfloat16, weight_dtype=jnp.float32))


def test_under_jit_as_without(implementation):
    x, weight, residual, dy, dtotal = residual_inputs((9, 64), jnp.float32, seed=1)
    check_residual_op(jax.jit(fused), x, weight, residual, dy, dtotal)
    y, total = jax.jit(fused)(x, weight, residual)
    np.testing.assert_array_equal(y, fused(x, weight, residual)[0])
    # The plain op of the sum may take another kernel (on a GPU, rows of 64
    # values take the short-rows kernel, which has no residual add), which
    # adds up a row's squares in another order: equal to float32's rounding.
    np.testing.assert_allclose(y, gpu_ops.rms_norm(x + residual, weight), rtol=1e-6, atol=1e-6)


def test_second_derivatives_are_the_unfused_ones(implementation):
    x, weight, residual, _, _ = residual_inputs((3, 8), jnp.float64, seed=2)

    def loss(fused):
        def value(x, weight, residual):
            y, total = fused(x, weight, residual)
            return jnp.sum(y ** 3) + jnp.sum(total ** 2 * y)
        return value

    def unfused(x, weight, residual):
        total = x + residual
        return gpu_ops.rms_norm(total, weight), total

    for argnum in range(3):
        got = jax.hessian(loss(fused), argnums=argnum)(x, weight, residual)
        want = jax.hessian(loss(unfused), argnums=argnum)(x, weight, residual)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# in_axes of (x, weight, residual): x's batch as more rows, along another
# axis, a residual shared by every example, an x shared by every example,
# and each example with its own weight.
VMAP_CASES = [(0, None, 0), (1, None, 1), (0, None, None), (None, None, 0), (0, 0, 0)]


@pytest.mark.parametrize("in_axes", VMAP_CASES, ids=str)
def test_vmap_is_a_loop_over_examples(in_axes, implementation):
    batch = 3
    x, weight, residual, dy, dtotal = residual_inputs((4, 16), jnp.float32, seed=3)
    arrays = [x, weight, residual]
    batched = [a if axis is None else jnp.stack([a * (1 + k) for k in range(batch)], axis)
               for a, axis in zip(arrays, in_axes)]

    def example(k):
        return [a if axis is None else jnp.take(b, k, axis)
                for a, b, axis in zip(arrays, batched, in_axes)]

    def grads(x, weight, residual):
        return jax.vjp(fused, x, weight, residual)[1]((dy, dtotal))

    for fn in (fused, grads):
        got = jax.jit(jax.vmap(fn, in_axes=in_axes))(*batched)
        want = [fn(*example(k)) for k in range(batch)]
        for k in range(batch):
            for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want[k])):
                np.testing.assert_allclose(g[k], w, rtol=1e-6, atol=1e-6)


@pytest.mark.ffi_lowering
@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_one_custom_call_adds_and_normalises(platform, implementation):
    x, weight, residual, _, _ = residual_inputs((4, 8), jnp.bfloat16)
    text = jax.jit(fused).trace(x, weight, residual).lower(
        lowering_platforms=(platform,)).as_text()
    (call,) = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    if implementation == "hijax":  # XLA adds, the HiJAX primitive normalises the sum
        assert "@gpu_ops_rms_norm_fwd(" in call and re.search(r"stablehlo\.add", text)
        return
    assert "@gpu_ops_rms_norm_fwd(" in call and "residual = true" in call
    assert ("(tensor<4x8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, "
            "tensor<4xf32>, tensor<4x8xbf16>)") in call
    assert not re.search(r"stablehlo\.add", text)  # the sum is the kernel's


def test_export_with_a_symbolic_batch(implementation):
    from jax import export

    (batch,) = export.symbolic_shape("b")
    x, weight, residual, _, _ = residual_inputs((5, 32), jnp.float32, seed=4)

    def loss_and_grads(x, weight, residual):
        def loss(x, weight, residual):
            y, total = fused(x, weight, residual)
            return jnp.sum(y ** 2) + jnp.sum(total * weight)
        return jax.value_and_grad(loss, argnums=(0, 1, 2))(x, weight, residual)

    checks = [export.DisabledSafetyCheck.custom_call(name) for name in (
        "gpu_ops_rms_norm_fwd", "gpu_ops_rms_norm_bwd")]
    export_it = export.export(jax.jit(loss_and_grads), platforms=["cpu", "cuda"],
                              disabled_checks=checks)
    row = jax.ShapeDtypeStruct((batch, 32), jnp.float32)
    types = (row, jax.ShapeDtypeStruct((32,), jnp.float32), row)
    if implementation == "pallas":
        with pytest.raises(NotImplementedError, match="implementation='pallas'.*symbolic"):
            export_it(*types)
        return
    restored = export.deserialize(export_it(*types).serialize())
    for got, want in zip(jax.tree.leaves(restored.call(x, weight, residual)),
                         jax.tree.leaves(jax.jit(loss_and_grads)(x, weight, residual))):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _devices():
    devices = jax.devices()
    return devices if len(devices) >= 2 else jax.devices("cpu")


def _mesh(shape, names, axis_type=AxisType.Auto):
    devices = np.array(_devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names, axis_types=(axis_type,) * len(shape))


N = len(_devices())


def _sharded_loss(x, weight, residual):
    y, total = fused(x, weight, residual)
    return jnp.sum(y ** 2 * jnp.arange(x.shape[-1])) + jnp.sum(total * total)


_sharded_grads = jax.value_and_grad(_sharded_loss, argnums=(0, 1, 2))

# (mesh shape, axis names, spec of x, spec of the residual): the rows of both
# split alike, over one mesh axis or two; the residual split another way or
# not at all (it follows x); x's normalised axis split (gathered first).
SHARDED_CASES = [
    ((N,), ("data",), P("data"), P("data")),
    ((N // 2, 2), ("data", "model"), P(("data", "model")), P(("data", "model"))),
    ((N // 2, 2), ("data", "model"), P("data"), P("model")),
    ((N,), ("data",), P("data"), P()),
    ((N,), ("data",), P(None, None, "data"), P("data")),
]


def _single_device(*arrays):
    return [jax.device_put(a, _devices()[0]) for a in arrays]


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit])
@pytest.mark.parametrize("mesh_shape,names,x_spec,residual_spec", SHARDED_CASES, ids=str)
def test_sharded_operands_give_the_one_device_answer(mesh_shape, names, x_spec, residual_spec,
                                                     axis_type, implementation):
    mesh = _mesh(mesh_shape, names, axis_type)
    x, weight, residual, _, _ = residual_inputs((16, 4, 32), jnp.float32, seed=5)
    args = (jax.device_put(x, NamedSharding(mesh, x_spec)),
            jax.device_put(weight, NamedSharding(mesh, P())),
            jax.device_put(residual, NamedSharding(mesh, residual_spec)))
    with jax.set_mesh(mesh):
        value, grads = jax.jit(_sharded_grads)(*args)
        y, total = jax.jit(fused)(*args)
        hlo = jax.jit(_sharded_grads).lower(*args).compile().as_text()
    if x_spec == residual_spec and x_spec[0] is not None:  # rows stay where they are
        assert "all-gather" not in hlo and "all-to-all" not in hlo
        assert y.sharding.is_equivalent_to(args[0].sharding, y.ndim)
    want_value, want_grads = jax.jit(_sharded_grads)(*_single_device(x, weight, residual))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    want_y, want_total = jax.jit(fused)(*_single_device(x, weight, residual))
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_array_equal(total, want_total)


def test_inside_shard_map_as_on_one_device(implementation):
    mesh = _mesh((N,), ("data",))
    x, weight, residual, _, _ = residual_inputs((16, 32), jnp.float32, seed=6)
    spec = P("data")
    per_device = jax.shard_map(fused, mesh=mesh, in_specs=(spec, P(), spec),
                               out_specs=(spec, spec))

    def loss(x, weight, residual):
        y, total = per_device(x, weight, residual)
        return jnp.sum(y ** 2 * jnp.arange(x.shape[-1])) + jnp.sum(total * total)

    got = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(x, weight, residual)
    want = jax.jit(_sharded_grads)(*_single_device(x, weight, residual))
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_residual_unlike_x_is_a_clear_error(implementation):
    x, weight, residual, _, _ = residual_inputs((4, 8), jnp.float32)
    with pytest.raises(TypeError, match="residual must have x's dtype float32, got bfloat16"):
        fused(x, weight, residual.astype(jnp.bfloat16))
    with pytest.raises(ValueError, match=r"residual must have x's shape \(4, 8\), got \(8,\)"):
        fused(x, weight, residual[0])
    with pytest.raises(TypeError, match="residual must have x's dtype"):
        fused(x, weight, residual.astype(jnp.int32))
