"""Eight Python threads calling the op at once, with different shapes and dtypes."""

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp

import gpu_ops
import reference
from reference import DTYPES

THREADS = 8
CALLS_PER_THREAD = 5


def _case(index):
    """A shape and dtype pair of its own for each thread."""
    x_dtype, weight_dtype = list(itertools.product(DTYPES, DTYPES))[index * 2]
    rows, width = 3 + index, (7, 64, 1000, 4096)[index % 4]
    keys = jax.random.split(jax.random.key(index), 3)
    x = jax.random.normal(keys[0], (rows, width), jnp.float32).astype(x_dtype)
    weight = (1 + 0.5 * jax.random.normal(keys[1], (width,), jnp.float32)).astype(weight_dtype)
    dy = jax.random.normal(keys[2], (rows, width), jnp.float32).astype(weight_dtype)
    return x, weight, dy


def test_threads_calling_at_once_get_their_own_answers():
    cases = [_case(i) for i in range(THREADS)]
    start = threading.Barrier(THREADS)
    jitted = jax.jit(lambda x, w, dy: jax.vjp(gpu_ops.rms_norm, x, w)[1](dy))

    def run(case):
        x, weight, dy = case
        start.wait()
        results = []
        for _ in range(CALLS_PER_THREAD):
            # eager and jitted, forward and backward, interleaved across threads
            results.append((gpu_ops.rms_norm(x, weight), *jitted(x, weight, dy)))
        return jax.block_until_ready(results)

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(run, cases))

    for (x, weight, dy), results in zip(cases, outcomes):
        expected_dx, expected_dweight = reference.vjp(x, weight, dy)
        for y, dx, dweight in results:
            reference.assert_close(y, reference.forward(x, weight), weight.dtype, x.dtype)
            reference.assert_close(dx, expected_dx, x.dtype, x.dtype)
            reference.assert_close(dweight, expected_dweight, weight.dtype, x.dtype)
