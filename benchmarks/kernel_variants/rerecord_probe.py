"""Does XLA re-record a jitted chain's command buffer on every call, and what does that cost?

Run from the repository root on a GPU (h100_rerecord.log holds its output).
For the small batch's forward chain of rms_norm_bench.py (200 steps per
jitted call) and for a tiny input (8 x 128) whose kernels take almost no GPU
time, gpu_ops' custom call against XLA's fusion, each called in two ways:
- "fresh": as the benchmark calls it, fn(x, w, dy) again and again, so each
  call's outputs are new buffers;
- "donated": the arguments donated and each call's outputs passed to the
  next, so the parameter and output buffers can stay where they are.
Printed per case: host time to enqueue one call while the GPU is kept busy
(median over 5 loops of 20 calls, each behind three long matrix products,
so the host never waits for the GPU), divided by the chain's 200 steps; and
the time per step on the GPU (median of 21 runs of 50 calls, one wait each).
"""
import statistics
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, "benchmarks")
import rms_norm_bench as rb  # noqa: E402
import gpu_ops  # noqa: E402

CHAIN = 200
BUSY_N = 16384  # the matrix products that keep the GPU busy


def jitted(step, donate):
    def run(*args):
        for _ in range(CHAIN):
            args = jax.lax.optimization_barrier(step(*args))
        return args
    return jax.jit(run, donate_argnums=(0, 1, 2) if donate else ())


def call_loop(fn, args, donate, calls):
    """Enqueues `calls` calls; returns the last one's outputs."""
    out = args
    for _ in range(calls):
        out = fn(*(out if donate else args))
    return out


def fresh_args(shape, dtype):
    x = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(dtype)
    return x, jnp.ones(shape[-1], dtype), jnp.zeros((), dtype)


def vlog_run():
    """A few calls of each way, for XLA's command-buffer log lines (TF_CPP_VMODULE)."""
    step = rb.op_functions(gpu_ops.rms_norm)["fwd"][1]
    for donate in (False, True):
        fn = jitted(step, donate)
        print(f"== {'donated' if donate else 'fresh'}", file=sys.stderr, flush=True)
        jax.block_until_ready(call_loop(fn, fresh_args((512, 4096), "bfloat16"), donate, 4))


def main():
    busy_a = jnp.ones((BUSY_N, BUSY_N), jnp.bfloat16)
    busy = jax.jit(lambda a: (a @ a) @ a @ a)
    jax.block_until_ready(busy(busy_a))
    print(jax.devices()[0].device_kind, "jax", jax.__version__, flush=True)
    for shape in ((512, 4096), (8, 128)):
        for name, impl in (("gpu_ops", gpu_ops.rms_norm), ("xla", rb.xla_rms_norm)):
            step = rb.op_functions(impl)["fwd"][1]
            for donate in (False, True):
                fn = jitted(step, donate)
                args = fresh_args(shape, "bfloat16")
                args = jax.block_until_ready(call_loop(fn, args, donate, 3))
                hosts = []
                for _ in range(5):
                    big = busy(busy_a)
                    t0 = time.perf_counter()
                    args = call_loop(fn, args, donate, 20)
                    hosts.append((time.perf_counter() - t0) / 20)
                    jax.block_until_ready((args, big))
                steps = []
                for _ in range(21):
                    t0 = time.perf_counter()
                    args = jax.block_until_ready(call_loop(fn, args, donate, 50))
                    steps.append((time.perf_counter() - t0) / (50 * CHAIN))
                print(f"{shape[0]:4} x {shape[1]:5}  {name:8} {'donated' if donate else 'fresh':8}"
                      f" host/step {statistics.median(hosts) / CHAIN * 1e6:5.2f} us"
                      f" ({min(hosts) / CHAIN * 1e6:.2f}-{max(hosts) / CHAIN * 1e6:.2f})"
                      f"  GPU/step {statistics.median(steps) * 1e6:5.2f} us", flush=True)


if __name__ == "__main__":
    vlog_run() if sys.argv[1:] == ["--vlog"] else main()
