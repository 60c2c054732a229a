"""The custom calls in StableHLO, for CUDA (lowered on any machine) and CPU."""

import re

import jax
import jax.numpy as jnp
import pytest

import gpu_ops


def _stablehlo(f, *args, platform):
    return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def _custom_calls(text):
    return [line for line in text.splitlines() if "stablehlo.custom_call" in line]


@pytest.mark.parametrize("platform", ["cuda", "cpu"])
def test_forward_custom_call_has_typed_eps(platform):
    x = jnp.ones((4, 8), jnp.bfloat16)
    text = _stablehlo(lambda x, w: gpu_ops.rms_norm(x, w, 1e-6), x, jnp.ones(8, jnp.bfloat16),
                      platform=platform)
    (call,) = _custom_calls(text)
    assert "@gpu_ops_rms_norm_fwd" in call
    assert re.search(r"eps = 9.9999999999999995E-7 : f64", call), call
    assert "(tensor<4x8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4xf32>)" in call


def test_cuda_backward_has_a_scratch_result_and_cpu_does_not():
    x, w = jnp.ones((1000, 8), jnp.float32), jnp.ones(8, jnp.float32)
    grad = jax.grad(lambda x, w: gpu_ops.rms_norm(x, w).sum(), argnums=(0, 1))
    cuda_calls = [c for c in _custom_calls(_stablehlo(grad, x, w, platform="cuda"))
                  if "rms_norm_bwd" in c]
    cpu_calls = [c for c in _custom_calls(_stablehlo(grad, x, w, platform="cpu"))
                 if "rms_norm_bwd" in c]
    partials = gpu_ops.ffi_targets.dweight_partial_rows(1000, 8)
    assert partials == 1000  # one segment per row: 2**21 scratch elements allow it
    assert f"-> (tensor<1000x8xf32>, tensor<8xf32>, tensor<{partials}x8xf32>)" in cuda_calls[0]
    assert "-> (tensor<1000x8xf32>, tensor<8xf32>)" in cpu_calls[0]
