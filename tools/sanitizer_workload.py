"""Forward and backward over a few shapes and dtypes, for compute-sanitizer.

Run as: compute-sanitizer --tool memcheck python tools/sanitizer_workload.py
"""

import jax
import jax.numpy as jnp

import gpu_ops

CASES = [
    ((3, 1), jnp.float32, jnp.float32),
    ((5, 7, 33), jnp.bfloat16, jnp.float32),
    ((300, 1000), jnp.float16, jnp.bfloat16),
    ((2, 4, 512, 4), jnp.bfloat16, jnp.bfloat16),
    ((0, 16), jnp.float32, jnp.float32),
    # the fast kernels: few rows (a block per row, a thread per vector:
    # 67 x 1024 and 9 x 2048; more rows than the GPU holds such blocks for,
    # 40,009 x 1024 and 3001 x 4096 below, take blocks of one or two rows
    # and more vectors a thread), a 1024-thread block per row, the grid
    # kernels, a cluster per row (the shared-row forward: on 132 SMs the
    # grid forward's sums of these rows do not fit its scratch), a row split
    # over many blocks (the last chunk cut short); the backwards of the rows
    # of 262,144 and 131,080 take the grid backward
    ((67, 1024), jnp.bfloat16, jnp.bfloat16),
    ((67, 16384), jnp.bfloat16, jnp.bfloat16),
    ((5, 262144), jnp.bfloat16, jnp.bfloat16),
    ((3, 131080), jnp.bfloat16, jnp.bfloat16),
    ((3, 131080), jnp.float32, jnp.float32),
    ((9, 2048), jnp.float32, jnp.float32),
    # more rows than the GPU holds backward teams for: each loops through its ring
    ((40_009, 1024), jnp.bfloat16, jnp.bfloat16),
    ((3001, 4096), jnp.float32, jnp.float32),
    # more rows than the GPU holds forward blocks of 1024 threads for: each
    # works through several rows, loading the next before it writes one
    ((301, 16384), jnp.bfloat16, jnp.bfloat16),
    # the grid kernels: a last group of rows and a last block of columns
    # left part empty, and one group of 1024-thread columns (both forward
    # and backward); and rows one thread group too many for the backward
    # (the split-row backward; the grid forward, 10 rows a thread)
    ((17, 131080), jnp.float32, jnp.float32),
    ((7, 1_000_000), jnp.float16, jnp.float16),
    ((40, 262144), jnp.bfloat16, jnp.bfloat16),
]

for shape, x_dtype, w_dtype in CASES:
    x = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(x_dtype)
    weight = jnp.ones(shape[-1:], w_dtype)
    y, pullback = jax.vjp(gpu_ops.rms_norm, x, weight)
    dx, dweight = pullback(jnp.ones_like(y))
    jax.block_until_ready((y, dx, dweight))
    print("ok", shape, jnp.dtype(x_dtype).name, jnp.dtype(w_dtype).name, flush=True)
