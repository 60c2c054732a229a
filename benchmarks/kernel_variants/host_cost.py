"""Host time per jitted chain call (20 ops) and per-op time, gpu_ops vs xla, small batch.

Run from the repository root on a GPU; TAG labels the lines (h200_command_buffers.log).
"""
import os, sys, time, statistics
import jax, jax.numpy as jnp
sys.path.insert(0, "benchmarks")
import rms_norm_bench as rb
import gpu_ops
tag = os.environ.get("TAG", "")
for dtype in ("bfloat16",):
    x = jax.random.normal(jax.random.key(0), (512, 4096), jnp.float32).astype(dtype)
    w = jnp.ones(4096, dtype)
    for op in ("fwd", "fwd_bwd"):
        for name, impl in (("gpu_ops", gpu_ops.rms_norm), ("xla", rb.xla_rms_norm)):
            step = rb.op_functions(impl)[op][1]
            args = (x, w, x if op == "fwd_bwd" else jnp.zeros((), dtype))
            fn = rb.chained(step)
            jax.block_until_ready(fn(*args)); jax.block_until_ready(fn(*args))
            hosts = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(50):
                    out = fn(*args)
                hosts.append((time.perf_counter() - t0) / 50)
                jax.block_until_ready(out)
            per_op = [rb.per_op_seconds(step, args, 10, 21) for _ in range(2)]
            print(f"{tag:9} {name:8} {op:8} host/call {statistics.median(hosts)*1e6:7.1f} us  per op (calls=10) {min(per_op)*1e6:6.2f} us", flush=True)
