"""Test configuration: 8 virtual CPU devices, float64 enabled, GPU marker."""

import os

# Before JAX is imported: 8 CPU devices for the sharding tests. This only
# affects the CPU platform, so a real GPU set-up is left as it is.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


def has_gpu():
    return jax.default_backend() == "gpu"


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
