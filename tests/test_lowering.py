"""The custom calls in StableHLO, for CUDA (lowered on any machine) and CPU."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpu_ops


def _stablehlo(f, *args, platform):
    return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def _custom_calls(text):
    return [line for line in text.splitlines() if "stablehlo.custom_call" in line]


@pytest.mark.ffi_lowering
def test_forward_custom_call_has_typed_eps_and_no_scratch():
    x, w = jnp.ones((4, 8), jnp.bfloat16), jnp.ones(8, jnp.bfloat16)
    calls = {platform: _custom_calls(_stablehlo(lambda x, w: gpu_ops.rms_norm(x, w, 1e-6),
                                                x, w, platform=platform))
             for platform in ("cuda", "cpu")}
    for (call,) in calls.values():
        assert "@gpu_ops_rms_norm_fwd" in call
        assert re.search(r"eps = 9.9999999999999995E-7 : f64", call), call
    signature = "(tensor<4x8xbf16>, tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4xf32>)"
    assert signature in calls["cuda"][0] and signature in calls["cpu"][0]


@pytest.mark.ffi_lowering
def test_cuda_backward_has_scratch_results_and_cpu_does_not():
    x, w = jnp.ones((1000, 8), jnp.float32), jnp.ones(8, jnp.float32)
    grad = jax.grad(lambda x, w: gpu_ops.rms_norm(x, w).sum(), argnums=(0, 1))
    cuda_calls = [c for c in _custom_calls(_stablehlo(grad, x, w, platform="cuda"))
                  if "rms_norm_bwd" in c]
    cpu_calls = [c for c in _custom_calls(_stablehlo(grad, x, w, platform="cpu"))
                 if "rms_norm_bwd" in c]
    partials = gpu_ops._native.dweight_partial_rows(1000, 8)
    assert partials == 500  # one segment per two rows: 2**21 scratch elements allow it
    assert f"-> (tensor<1000x8xf32>, tensor<8xf32>, tensor<{partials}x8xf32>)" in cuda_calls[0]
    assert "-> (tensor<1000x8xf32>, tensor<8xf32>)" in cpu_calls[0]


@pytest.mark.ffi_lowering
def test_seed_shape_cuda_backward_carries_its_partial_sums():
    x, w = jnp.ones((32, 512, 512), jnp.bfloat16), jnp.ones((512, 512), jnp.bfloat16)
    grad = jax.grad(lambda x, w: gpu_ops.rms_norm(x, w).astype(jnp.float32).sum(),
                    argnums=(0, 1))
    forward, backward = _custom_calls(_stablehlo(grad, x, w, platform="cuda"))
    assert forward.endswith("-> (tensor<32x512x512xbf16>, tensor<32xf32>)")
    assert backward.endswith("-> (tensor<32x512x512xbf16>, tensor<512x512xbf16>, "
                             "tensor<8x262144xf32>)")


def test_handlers_match_the_installed_ffi_api():
    # Built by build.sh against the installed jaxlib's headers.
    assert tuple(gpu_ops._native.ffi_api_version) == (
        gpu_ops.ffi_targets.installed_ffi_api_version())


@pytest.mark.parametrize("stage,read", [("initialize", True), ("record", False),
                                        ("bogus", False)])
def test_registration_reads_four_ffi_stages_and_not_record(stage, read):
    # Chapter 8's claim: the FFI headers have a record stage (for handlers in
    # command buffers, which programmatic dependent launch would go through),
    # and jaxlib's registration passes XLA instantiate, prepare, initialize
    # and execute only. A stage it reads must be a capsule; one it ignores is
    # not looked at, "record" like a misspelt key.
    jax.devices()  # with the backend started, registration is not deferred
    execute = gpu_ops._native.targets()["cpu"]["gpu_ops_rms_norm_fwd"]
    stages = {"execute": execute, stage: "not a capsule"}
    if read:
        with pytest.raises(jax.errors.JaxRuntimeError, match="PyCapsule"):
            jax.ffi.register_ffi_target(f"gpu_ops_test_{stage}", stages, platform="cpu")
    else:
        jax.ffi.register_ffi_target(f"gpu_ops_test_{stage}", stages, platform="cpu")


@pytest.mark.parametrize("built,installed,refused", [
    ((0, 5), (0, 4), True),   # built against a newer jaxlib than the one installed
    ((0, 4), (0, 5), False),
    ((0, 5), (0, 5), False),
    ((0, 5), (1, 0), False),
    ((1, 0), (0, 9), True),
    ((0, 5), None, False),    # no header to read: XLA's own check stays
])
def test_handlers_xla_would_refuse_stop_the_import(built, installed, refused):
    check = gpu_ops.ffi_targets.check_ffi_api_version
    if refused:
        with pytest.raises(ImportError, match="Rebuild gpu_ops"):
            check(built, installed)
    else:
        check(built, installed)


@pytest.mark.parametrize("row_length", [1, 8, 1000, 2048, 4096, 2**21, 2**22])
def test_scratch_height_rule_in_python_is_the_kernels(row_length):
    # The lowering composes the kernels' rule itself, so that it can take a
    # symbolic number of rows; for concrete rows both must agree.
    for rows in (0, 1, 2, 3, 7, 100, 2047, 2048, 2049, 4096, 10**6):
        assert (gpu_ops.ffi_targets.dweight_partial_rows(rows, row_length)
                == gpu_ops._native.dweight_partial_rows(rows, row_length)), rows


@pytest.mark.parametrize("row_shape", [(4096,), (2, 8200)], ids=str)
def test_export_with_a_symbolic_batch_runs_at_any_batch_size(row_shape, implementation):
    # The CUDA calls' scratch results were sized in Python from concrete
    # shapes, so a symbolic batch could not be exported at all.
    from jax import export

    checks = [export.DisabledSafetyCheck.custom_call(name)
              for name in ("gpu_ops_rms_norm_fwd", "gpu_ops_rms_norm_bwd")]
    (batch,) = export.symbolic_shape("b")
    weight = 1 + jnp.arange(row_shape[-1], dtype=jnp.float32) / row_shape[-1]

    def value_and_grads(x, weight):
        return jax.value_and_grad(
            lambda x, w: jnp.sum(gpu_ops.rms_norm(x, w) ** 2 * w), argnums=(0, 1))(x, weight)

    export_it = export.export(jax.jit(value_and_grads), platforms=["cpu", "cuda"],
                              disabled_checks=checks)
    types = (jax.ShapeDtypeStruct((batch, *row_shape), jnp.float32),
             jax.ShapeDtypeStruct(weight.shape, jnp.float32))
    if implementation == "pallas":  # a Pallas kernel's grid is a number of rows
        with pytest.raises(NotImplementedError, match="implementation='pallas'.*symbolic"):
            export_it(*types)
        return
    exported = export_it(*types)
    restored = export.deserialize(exported.serialize())
    for size in (1, 5):
        x = jax.random.normal(jax.random.key(size), (size, *row_shape), jnp.float32)
        for got, want in zip(jax.tree.leaves(restored.call(x, weight)),
                             jax.tree.leaves(jax.jit(value_and_grads)(x, weight))):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
