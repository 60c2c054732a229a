"""The Pallas kernels: what they lower to on CUDA, a row read twice, and GPUs
too old for them.

Their results are checked by every contract test (conftest.py runs those
once per implementation); here, what is particular to them.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax.sharding import PartitionSpec as P

import gpu_ops


def _pallas(x, weight):
    return gpu_ops.rms_norm(x, weight, implementation="pallas")


def _loss_and_grads(x, weight):
    return jax.value_and_grad(lambda x, w: jnp.sum(_pallas(x, w) ** 2), argnums=(0, 1))(x, weight)


@pytest.mark.parametrize("x_shape,w_shape,dtype", [
    ((4, 1024), (1024,), jnp.bfloat16),  # held in registers
    ((3, 7), (7,), jnp.float32),  # padded to 128
    ((2, 3, 20000), (20000,), jnp.float16),  # padded, and read twice
    ((5, 16, 64), (16, 64), jnp.float32),  # several normalised axes
], ids=str)
def test_on_cuda_the_kernels_are_mosaic_gpu_calls(x_shape, w_shape, dtype):
    # Lowering for CUDA runs Mosaic GPU's own lowering of the kernels in
    # Python, so a kernel it cannot compile fails here on a CPU-only machine.
    types = (jax.ShapeDtypeStruct(x_shape, dtype), jax.ShapeDtypeStruct(w_shape, dtype))
    exported = jax.export.export(jax.jit(_loss_and_grads), platforms=["cuda"])(*types)
    calls = [line for line in exported.mlir_module().splitlines() if "custom_call @" in line]
    assert len(calls) == 3, calls  # forward, backward's dx, backward's dweight
    assert all("@mosaic_gpu" in call for call in calls), calls


def _mosaic_gpu_modules(function, *args):
    """The Mosaic GPU kernels of `function`'s CUDA lowering, as the custom
    calls' lines (each holds its kernel's serialised MLIR, whose op names
    read as text)."""
    text = jax.jit(function).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    return [line for line in text.splitlines() if "custom_call @mosaic_gpu" in line]


@pytest.mark.skipif(len(jax.devices("cpu")) < 2, reason="a mesh of two devices")
@pytest.mark.parametrize("axis_names", [("a",), ("b", "a"), ("batch", "model"), ("x", "y")],
                         ids=str)
@pytest.mark.parametrize("axis_type", ["Explicit", "Manual"])
def test_the_kernels_index_their_blocks_not_the_devices(axis_names, axis_type):
    # A Mosaic GPU kernel reads its block index as an axis index by name; a
    # mesh axis of the same name would give the device's index instead, and
    # on two GPUs every block wrote the same row (found by the property
    # test, for a mesh axis named 'a'). Lowered for CUDA, each kernel must
    # read its block id and no device id, whatever the mesh's names. (Under
    # custom_partitioning the kernels are lowered only when XLA compiles for
    # the GPU; the same per-shard function runs there.)
    # CPU devices stand for GPUs (lowered for CUDA, nothing runs), also on a
    # machine of one GPU
    mesh = jax.make_mesh((2,) + (1,) * (len(axis_names) - 1), axis_names,
                         axis_types=(jax.sharding.AxisType.Explicit,) * len(axis_names),
                         devices=jax.devices("cpu")[:2])
    rows = P(axis_names[0])
    x = jax.device_put(jnp.ones((4, 256), jnp.float32), jax.sharding.NamedSharding(mesh, rows))
    weight = jax.device_put(jnp.ones((256,), jnp.float32), jax.sharding.NamedSharding(mesh, P()))

    def sharded(x, weight):
        if axis_type == "Explicit":  # the op runs itself inside shard_map
            return _loss_and_grads(x, weight)
        return jax.shard_map(_loss_and_grads, mesh=mesh, in_specs=(rows, P()),
                             out_specs=(P(), (rows, P())), check_vma=False)(x, weight)

    with jax.set_mesh(mesh):
        kernels = _mosaic_gpu_modules(sharded, x, weight)
    assert len(kernels) == 3, kernels
    for kernel in kernels:
        assert "block_id" in kernel and "device_id" not in kernel


def test_interpreted_and_primitives_agree_on_a_row_read_twice():
    x = jax.random.normal(jax.random.key(0), (3, 9000), jnp.float32)
    weight = jnp.linspace(0.5, 1.5, 9000, dtype=jnp.float32)
    for got, want in zip(jax.tree.leaves(jax.jit(_loss_and_grads)(x, weight)),
                         jax.tree.leaves(jax.jit(jax.value_and_grad(
                             lambda x, w: jnp.sum(gpu_ops.rms_norm(x, w) ** 2),
                             argnums=(0, 1)))(x, weight))):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


class _Ampere:
    device_kind = "NVIDIA A100-SXM4-80GB"
    compute_capability = "8.0"


def test_a_gpu_older_than_sm_90_gets_a_clear_error(monkeypatch):
    # Mosaic GPU would fail to compile the kernels, with an error about its
    # own instructions rather than the GPU.
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "local_devices", lambda: [_Ampere()])
    with pytest.raises(NotImplementedError, match="sm_90 or newer; .*A100.* is sm_80"):
        _pallas(jnp.ones((2, 128)), jnp.ones(128))
