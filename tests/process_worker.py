"""One process of tests/test_processes.py: joins the others through
jax.distributed, builds a mesh over every process's devices and checks
gpu_ops on it against the float64 reference of the whole array.

Usage: process_worker.py COORDINATOR PROCESSES PROCESS_ID PLATFORM
(PLATFORM "cpu": 2 CPU devices a process; "gpu": the process's own GPU).
"""

import sys

import jax

coordinator, processes, process_id, platform = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    sys.argv[4]
if platform == "cpu":
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 2)
jax.distributed.initialize(coordinator, num_processes=processes, process_id=process_id)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

import gpu_ops  # noqa: E402
import reference  # noqa: E402

mesh = jax.make_mesh((jax.device_count(),), ("rows",), axis_types=(AxisType.Auto,))
replicated = NamedSharding(mesh, P())


def global_array(values):
    """`values` on every device of every process (each process has them all)."""
    return jax.make_array_from_callback(values.shape, replicated, lambda index: values[index])


def local(array):
    """The whole of a replicated result, from this process's first device."""
    return np.asarray(array.addressable_shards[0].data)


def split_rows(*arrays):
    return [jax.lax.with_sharding_constraint(a, NamedSharding(mesh, P("rows"))) for a in arrays]


def check(implementation, rows):
    rng = np.random.default_rng(rows)
    x, dy, residual = (rng.standard_normal((rows, 256)).astype(np.float32) for _ in range(3))
    weight = (1 + 0.3 * rng.standard_normal(256)).astype(np.float32)
    gx, gw, gdy, gres = map(global_array, (x, weight, dy, residual))

    def value_and_grads(x, weight, dy):
        x, dy = split_rows(x, dy)
        y, pullback = jax.vjp(lambda x, w: gpu_ops.rms_norm(x, w, implementation=implementation),
                              x, weight)
        return (y, *pullback(dy))

    y, dx, dweight = jax.jit(value_and_grads, out_shardings=replicated)(gx, gw, gdy)
    reference.assert_close(local(y), reference.forward(x, weight), jnp.float32)
    expected_dx, expected_dweight = reference.vjp(x, weight, dy)
    reference.assert_close(local(dx), expected_dx, jnp.float32)
    reference.assert_close(local(dweight), expected_dweight, jnp.float32)

    def with_residual(x, weight, residual):
        x, residual = split_rows(x, residual)
        return gpu_ops.rms_norm(x, weight, residual=residual, implementation=implementation)

    y, total = jax.jit(with_residual, out_shardings=replicated)(gx, gw, gres)
    np.testing.assert_array_equal(local(total), x + residual)
    reference.assert_close(local(y), reference.forward(x + residual, weight), jnp.float32)

    def quantised_amax(x, weight):
        (x,) = split_rows(x)
        return gpu_ops.rms_norm_fp8(x, weight, scale=0.01, implementation=implementation)[1]

    amax = jax.jit(quantised_amax, out_shardings=replicated)(gx, gw)
    # The largest |y| over every process's rows, not this process's alone.
    np.testing.assert_allclose(local(amax), np.abs(reference.forward(x, weight)).max(), rtol=1e-5)


for implementation in sorted(gpu_ops.implementations.IMPLEMENTATIONS):
    for rows in (4 * jax.device_count(), 4 * jax.device_count() + 2):  # divisible, and not
        check(implementation, rows)
        print(f"process {process_id}: {implementation} rows={rows} ok", flush=True)
jax.distributed.shutdown()
