"""my_rms_norm against a float64 reference: forward, gradients, forward mode
and second derivatives, vmap, rows split across two devices, grad inside
shard_map, export, and bad input."""

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


def inputs(shape, seed=0, dtype=jnp.float32):
    kx, kw, kd = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, shape, dtype)
    weight = (1 + 0.3 * jax.random.normal(kw, shape[-1:])).astype(dtype)
    return x, weight, jax.random.normal(kd, shape, dtype)


# How far from float64 maths on the same inputs each dtype's results may be:
# a few roundings of the result (sums are float32 in every dtype).
TOLERANCE = {jnp.float32: 1e-4, jnp.float16: 4e-3, jnp.bfloat16: 3e-2}


def loss(norm):
    return lambda x, weight, dy: jnp.vdot(norm(x, weight), dy)


# Rows of no values have no mean: NaN inv_rms, as in the reference, which warns.
EMPTY_ROWS = pytest.param((3, 0), marks=pytest.mark.filterwarnings(
    "ignore:Mean of empty slice", "ignore:invalid value encountered"))


@pytest.mark.parametrize("dtype", TOLERANCE, ids=lambda t: jnp.dtype(t).name)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 300), (0, 8), EMPTY_ROWS], ids=str)
def test_forward_and_gradients_are_the_references(shape, dtype):
    x, weight, dy = inputs(shape, dtype=dtype)
    y = jax.jit(my_rms_norm)(x, weight)
    assert y.dtype == dtype
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(np.asarray(y, np.float64), reference(x, weight),
                               rtol=tolerance, atol=tolerance)
    got = jax.jit(jax.grad(loss(my_rms_norm), argnums=(0, 1)))(x, weight, dy)
    for g, w in zip(got, float64_grads(x, weight, dy), strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=tolerance, atol=tolerance)


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


def in_jnp(x, weight, eps=1e-5):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * weight


def in_float64(fn, *args):
    """fn(*args) with every array argument in float64, in float64 jnp."""
    with jax.enable_x64(True):
        return jax.tree.map(np.asarray, fn(*(jnp.asarray(a, jnp.float64) for a in args)))


def float64_grads(x, weight, dy):
    """(dx, dweight) of loss(my_rms_norm) in float64 jnp."""
    return in_float64(jax.grad(loss(in_jnp), argnums=(0, 1)), x, weight, dy)


def assert_trees_close(got, want, tolerance):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance)


def test_forward_mode_and_second_derivatives_are_the_references():
    x, weight, tx = inputs((3, 16), seed=1)
    _, tw, _ = inputs((16,), seed=2)
    tangents = lambda norm: lambda x, w, tx, tw: jax.jvp(norm, (x, w), (tx, tw))
    assert_trees_close(jax.jit(tangents(my_rms_norm))(x, weight, tx, tw),
                       in_float64(tangents(in_jnp), x, weight, tx, tw), 1e-4)
    # a batch of tangents, and the same in reverse over forward and forward
    # over reverse (jax.hessian)
    many = jax.vmap(tangents(my_rms_norm), in_axes=(None, None, 0, None))
    assert_trees_close(jax.jit(many)(x, weight, jnp.stack([tx, 2 * tx]), tw),
                       in_float64(jax.vmap(tangents(in_jnp), in_axes=(None, None, 0, None)),
                                  x, weight, jnp.stack([tx, 2 * tx]), tw), 1e-4)
    scalar = lambda norm: lambda x, w: jnp.sum(norm(x, w) ** 2 * w)
    for second in (jax.hessian, lambda f, argnums: jax.jacrev(jax.jacfwd(f, argnums), argnums)):
        assert_trees_close(jax.jit(second(scalar(my_rms_norm), argnums=(0, 1)))(x, weight),
                           in_float64(second(scalar(in_jnp), argnums=(0, 1)), x, weight),
                           2e-3)


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
    with pytest.raises(TypeError, match="x must be float16, bfloat16 or float32"):
        my_rms_norm(x.astype(jnp.int32), weight)
    with pytest.raises(TypeError, match=r"weight must be float16 \(as x is float16\)"):
        my_rms_norm(x.astype(jnp.float16), weight)
    with pytest.raises(ValueError, match="weight must have shape"):
        my_rms_norm(x, weight[:3])
    with pytest.raises(ValueError, match="eps must be"):
        my_rms_norm(x, weight, eps=-1.0)


def test_a_misused_primitive_fails_where_it_is_traced():
    from my_ops import backward_p, forward_p

    x, weight, dy = inputs((2, 4))
    with pytest.raises(TypeError, match=r"weight must be float32 \(as x is float32\)"):
        jax.eval_shape(lambda x, w: forward_p.bind(x, w, eps=1e-5), x, weight.astype(jnp.int32))
    with pytest.raises(ValueError, match="inv_rms must have shape"):
        jax.eval_shape(lambda dy, x, w: backward_p.bind(dy, x, x, w), dy, x, weight)


def test_export_on_one_device_and_sharded_through_shard_map():
    from jax import export

    checks = [export.DisabledSafetyCheck.custom_call("my_rms_norm_fwd")]
    x, weight, _ = inputs((8, 64), seed=4)
    exported = export.export(jax.jit(my_rms_norm), platforms=["cpu", "cuda"],
                             disabled_checks=checks)(x, weight)
    restored = export.deserialize(exported.serialize())
    np.testing.assert_allclose(restored.call(x, weight), reference(x, weight),
                               rtol=1e-5, atol=1e-6)
    # With rows split over devices, jit partitions the op through a Python
    # callback (custom_partitioning), which an exported artifact cannot
    # carry. Inside shard_map the op is one device's call, and that exports.
    devices = jax.devices() if len(jax.devices()) >= 2 else jax.devices("cpu")
    mesh = jax.make_mesh((2,), ("rows",), axis_types=(AxisType.Explicit,), devices=devices[:2])
    split, whole = NamedSharding(mesh, P("rows")), NamedSharding(mesh, P())
    types = (jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=split),
             jax.ShapeDtypeStruct(weight.shape, weight.dtype, sharding=whole))
    with pytest.raises(NotImplementedError, match="serialization of host_callbacks"):
        export.export(jax.jit(my_rms_norm), disabled_checks=checks)(*types).serialize()
    per_device = jax.shard_map(my_rms_norm, mesh=mesh, in_specs=(P("rows"), P()),
                               out_specs=P("rows"))
    # for both platforms: with one GPU the mesh is of CPU devices, and an
    # export for the default platform alone (the GPU's) would not run there
    exported = export.export(jax.jit(per_device), platforms=["cpu", "cuda"],
                             disabled_checks=checks)(*types)
    restored = export.deserialize(exported.serialize())
    with jax.set_mesh(mesh):
        y = restored.call(jax.device_put(x, split), jax.device_put(weight, whole))
    np.testing.assert_allclose(y, reference(x, weight), rtol=1e-5, atol=1e-6)


def test_handlers_of_a_newer_ffi_api_than_jaxlibs_are_refused_at_import():
    import my_ops

    installed = my_ops._installed_ffi_api_version()
    assert installed is not None and tuple(my_ops._native.ffi_api_version) <= installed
    my_ops._check_ffi_api_version(installed, installed)
    with pytest.raises(ImportError, match="rebuild it against this jaxlib"):
        my_ops._check_ffi_api_version((installed[0], installed[1] + 1), installed)
