"""Test configuration: 8 virtual CPU devices (GPU_OPS_CPU_DEVICES=N for N),
float64 enabled, GPU marker, kernel paths left out of the CUDA plans on
request, and the contract tests run once per implementation of the
operation."""

import os

# Before JAX is imported: 8 CPU devices for the sharding tests, or as many as
# GPU_OPS_CPU_DEVICES says, to run them on the meshes a machine of 2 or 4 GPUs
# makes. This only affects the CPU platform, so a real GPU set-up is left as it is.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + f" --xla_force_host_platform_device_count={os.environ.get('GPU_OPS_CPU_DEVICES', '8')}"
).strip()

import functools  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

import gpu_ops  # noqa: E402
from gpu_ops import kernel_plans  # noqa: E402

jax.config.update("jax_enable_x64", True)

# A GPU test run of some kernel paths only (tests/test_gpu.py starts such
# runs): GPU_OPS_PLAN_WITHOUT lists paths for the CUDA handlers to leave out,
# comma-separated, and GPU_OPS_PLAN_WITHOUT_CLUSTERS=1 plans as for a GPU
# without clusters. Read here, by the test run; the handlers read only the
# setting this makes.
kernel_plans.leave_out(
    tuple(filter(None, os.environ.get("GPU_OPS_PLAN_WITHOUT", "").split(","))),
    clusters=os.environ.get("GPU_OPS_PLAN_WITHOUT_CLUSTERS") == "1")


def has_gpu():
    return jax.default_backend() == "gpu"


def _implementation_of(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("implementation", "") if callspec else ""


# The marker of tests that do not apply to the Pallas kernels, and why.
_NOT_FOR_PALLAS = {
    "ffi_lowering": "the Pallas kernels lower to Mosaic GPU, not to the FFI targets",
}


def pytest_collection_modifyitems(config, items):
    items.sort(key=_implementation_of)  # stable: one switch of implementation
    for item in items:
        implementation = _implementation_of(item)
        if "runs_every_implementation" in item.keywords and implementation not in (
                "", "ffi"):
            item.add_marker(pytest.mark.skip(
                reason="its test process runs every implementation: once is enough"))
        if implementation != "pallas":
            continue
        for marker, reason in _NOT_FOR_PALLAS.items():
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The test modules of the operation's contract. Each of their tests runs once
# per implementation: gpu_ops' entry points are the chosen one's while it runs.
CONTRACT_MODULES = {"test_bad_input", "test_float8", "test_forward_mode", "test_from_fp8",
                    "test_gpu", "test_lowering", "test_out_dtype",
                    "test_numerics", "test_properties", "test_residual", "test_sharding",
                    "test_threads", "test_transformations"}
_ENTRY_POINTS = {name: getattr(gpu_ops, name)
                 for name in ("rms_norm", "rms_norm_fp8", "rms_norm_through_fp8",
                              "rms_norm_from_fp8", "rms_norm_through_fp8_input")}


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__ in CONTRACT_MODULES:
        metafunc.fixturenames.append("implementation")
        metafunc.parametrize("implementation", sorted(gpu_ops.implementations.IMPLEMENTATIONS))


_last_implementation = [None]


@pytest.fixture(autouse=True)
def _with_implementation(request, monkeypatch):
    implementation = _implementation_of(request.node)
    if not implementation:
        yield
        return
    if implementation != _last_implementation[0]:
        # A function jitted for one implementation must not be found in
        # jit's cache while the other runs (the tests are sorted by
        # implementation, so this happens rarely).
        jax.clear_caches()
        _last_implementation[0] = implementation
    for name, function in _ENTRY_POINTS.items():
        monkeypatch.setattr(gpu_ops, name, functools.partial(
            function, implementation=implementation))
    yield
