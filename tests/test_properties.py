"""Property-based: any shape, dtypes, eps, mesh and sharding give the reference answer.

Hypothesis draws the inputs and how they are split over devices (1, 2, 4 or
8; 1-D and 2-D meshes; row axes split evenly or not, normalised axes and the
weight split too), and a transformation (jit, grad, vmap). Forward and both
gradients are compared with the float64 reference. CI runs a fixed set of
examples (the "ci" profile); GPU_OPS_HYPOTHESIS_PROFILE=long draws many more,
and "gpus" fewer of them, for a machine of several GPUs, where each case
compiles for every device (on two GPUs it found the Pallas kernels reading
the device's index as their block's, which CPU interpret mode cannot show).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import gpu_ops
import reference
from reference import DTYPES, assert_close

settings.register_profile("ci", max_examples=40, derandomize=True, deadline=None)
settings.register_profile("long", max_examples=400, deadline=None)
# A several-GPU machine's share of a call: each case compiles for every device.
settings.register_profile("gpus", max_examples=120, deadline=None)
settings.load_profile(os.environ.get("GPU_OPS_HYPOTHESIS_PROFILE", "ci"))

# Meshes of the default backend's devices: 8 virtual CPU devices in CI
# (conftest.py), the GPUs of a GPU machine.
MESH_SHAPES = [shape for shape in [(1,), (2,), (4,), (8,), (2, 2), (2, 4), (4, 2)]
               if int(np.prod(shape)) <= len(jax.devices())]
AXIS_NAMES = ("a", "b")


@st.composite
def specs(draw, ndim, mesh_names):
    """A PartitionSpec of `ndim` entries using each mesh axis at most once."""
    unused = list(mesh_names)
    entries = []
    for _ in range(ndim):
        choice = draw(st.sampled_from(["none", "one", "both"] if len(unused) >= 2
                                      else ["none", "one"] if unused else ["none"]))
        if choice == "none":
            entries.append(None)
        elif choice == "one":
            axis = draw(st.sampled_from(unused))
            unused.remove(axis)
            entries.append(axis)
        else:
            axes = tuple(draw(st.permutations(unused)))
            unused.clear()
            entries.append(axes)
    return P(*entries)


@st.composite
def cases(draw):
    weight_shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=2)))
    rows_shape = tuple(draw(st.lists(st.integers(0, 13), min_size=0, max_size=2)))
    x_dtype, weight_dtype = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    eps = draw(st.sampled_from([0.0, 1e-6, 1e-5, 0.1]))
    transformation = draw(st.sampled_from(["jit", "grad", "vmap", "vmap_weight"]))
    batch = (draw(st.integers(1, 3)),) if transformation.startswith("vmap") else ()
    mesh_shape = draw(st.sampled_from(MESH_SHAPES))
    names = AXIS_NAMES[: len(mesh_shape)]
    x_ndim = len(batch) + len(rows_shape) + len(weight_shape)
    x_spec = draw(specs(x_ndim, names))
    weight_spec = draw(specs(len(weight_shape), names))
    return dict(x_shape=batch + rows_shape + weight_shape, weight_shape=weight_shape,
                x_dtype=x_dtype, weight_dtype=weight_dtype, eps=eps,
                transformation=transformation, mesh_shape=mesh_shape, names=names,
                x_spec=x_spec, weight_spec=weight_spec, seed=draw(st.integers(0, 2**16)))


def _inputs(case):
    kx, kw, kd = jax.random.split(jax.random.key(case["seed"]), 3)
    weight_shape = case["weight_shape"]
    if case["transformation"] == "vmap_weight":
        weight_shape = case["x_shape"][:1] + weight_shape
    x = jax.random.normal(kx, case["x_shape"], jnp.float32).astype(case["x_dtype"])
    weight = (1 + 0.5 * jax.random.normal(kw, weight_shape, jnp.float32)).astype(
        case["weight_dtype"])
    dy = jax.random.normal(kd, case["x_shape"], jnp.float32).astype(case["weight_dtype"])
    return x, weight, dy


def _function(case, mesh):
    """(x, weight, dy) -> (y, dx, dweight), jitted, with x and weight split as drawn."""
    eps = case["eps"]

    def op(x, weight):
        return gpu_ops.rms_norm(x, weight, eps)

    def forward_and_vjp(x, weight, dy):
        y, pullback = jax.vjp(op, x, weight)
        return (y, *pullback(dy))

    def forward_and_grad(x, weight, dy):
        grads = jax.grad(lambda x, w: jnp.sum((op(x, w) * dy).astype(jnp.float32)),
                         argnums=(0, 1))(x, weight)
        return (op(x, weight), *grads)

    inner = {
        "jit": forward_and_vjp,
        "grad": forward_and_grad,
        "vmap": jax.vmap(forward_and_vjp, in_axes=(0, None, 0)),
        "vmap_weight": jax.vmap(forward_and_vjp),
    }[case["transformation"]]

    weight_spec = case["weight_spec"]
    if case["transformation"] == "vmap_weight":
        weight_spec = P(None, *weight_spec)

    def split(x, weight, dy):
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, case["x_spec"]))
        weight = jax.lax.with_sharding_constraint(weight, NamedSharding(mesh, weight_spec))
        return inner(x, weight, dy)

    return jax.jit(split)


def _expected(case, x, weight, dy):
    eps = case["eps"]
    if case["transformation"] == "jit" or case["transformation"] == "grad":
        return (reference.forward(x, weight, eps), *reference.vjp(x, weight, dy, eps))
    weights = weight if case["transformation"] == "vmap_weight" else [weight] * x.shape[0]
    per_example = [(reference.forward(x[b], weights[b], eps),
                    *reference.vjp(x[b], weights[b], dy[b], eps)) for b in range(x.shape[0])]
    # Each example's pullback gives its own weight gradient, also where the
    # examples share one weight.
    return tuple(np.stack(parts) for parts in zip(*per_example))


@given(cases())
def test_any_case_gives_the_reference_answer(case):
    devices = np.array(jax.devices()[: int(np.prod(case["mesh_shape"]))])
    mesh = jax.sharding.Mesh(devices.reshape(case["mesh_shape"]), case["names"],
                             axis_types=(AxisType.Auto,) * len(case["names"]))
    x, weight, dy = _inputs(case)
    y, dx, dweight = _function(case, mesh)(x, weight, dy)
    expected_y, expected_dx, expected_dweight = _expected(case, x, weight, dy)
    assert (y.shape, dx.shape, dweight.shape) == (
        expected_y.shape, expected_dx.shape, expected_dweight.shape)
    assert_close(y, expected_y, weight.dtype, x.dtype)
    assert_close(dx, expected_dx, x.dtype, x.dtype)
    assert_close(dweight, expected_dweight, weight.dtype, x.dtype)
