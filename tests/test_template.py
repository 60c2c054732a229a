"""The template for a reader's own operation (template/), as a reader uses it:
copied to a folder of its own, renamed by its README's steps, built there
(with the CUDA handlers where nvcc is found) and tested by its own test (on
the GPU where there is one), which takes grad inside shard_map against a
float64 reference among the rest."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).parents[1]
README = ROOT / "template" / "README.md"
OLD_NAMES = ("my_ops", "MY_OPS", "my_rms_norm", "MY_RMS_NORM", "MyRmsNorm")


def rename_steps():
    """The bash block of the README's rename step."""
    after = README.read_text().split("## Make it yours", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block, "the README's rename step has no bash block"
    return textwrap.dedent(block.group(1))


def test_a_renamed_copy_builds_and_passes_its_test(tmp_path):
    copy = tmp_path / "elsewhere" / "first_op"
    shutil.copytree(ROOT / "template", copy,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.so"))
    steps = rename_steps()
    assert "PACKAGE=my_first_ops OP=my_first_norm" in steps
    renamed = subprocess.run(["bash", "-euo", "pipefail", "-c", steps], cwd=copy,
                             capture_output=True, text=True)
    assert renamed.returncode == 0, renamed.stderr
    # no old name is left outside the README (whose own rename step names them)
    left = [str(p.relative_to(copy)) for p in copy.rglob("*")
            if p.is_file() and p.name != "README.md"
            and any(old in p.name or old in p.read_text() for old in OLD_NAMES)]
    assert not left, left
    assert (copy / "my_first_ops").is_dir() and (copy / "csrc" / "my_first_norm_cpu.cc").is_file()

    # The README's build, into a folder of its own here, not the book's .venv.
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
         "--target", str(site), "."],
        cwd=copy, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    # The README's test, in the copy (-P: not its sources), without the
    # suite's XLA_FLAGS, as a reader's run would be.
    env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "PYTHONPATH": str(site)}
    run = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "test_grad_inside_shard_map" in (copy / "tests" / "test_my_first_ops.py").read_text()
    assert " passed" in run.stdout and " failed" not in run.stdout
    targets = subprocess.run(
        [sys.executable, "-P", "-c", "import jax; from my_first_ops import _native; "
         "targets = _native.targets(); print(jax.default_backend()); "
         "print(sorted(targets)); print(sorted(targets['cpu']))"],
        cwd=copy, env=env, capture_output=True, text=True)
    backend, platforms, names = targets.stdout.split("\n")[:3]
    assert names == "['my_first_norm_bwd', 'my_first_norm_fwd']", targets
    # Where nvcc is found (as build.sh and CMake find it) the CUDA handlers
    # are built; on a GPU, then, the tests above ran them.
    if os.environ.get("CUDACXX") or shutil.which("nvcc"):
        assert platforms == "['CUDA', 'cpu']", targets
    assert backend != "gpu" or "CUDA" in platforms, targets


def test_its_ci_builds_and_tests_as_its_readme_says():
    """The template's own workflow (at the root of a copy) runs the README's
    two commands, with the JAX its pyproject.toml declares."""
    readme = README.read_text()
    commands = re.search(r"## Build and test.*?```bash\n(.*?)```", readme, re.S).group(1)
    workflow = (ROOT / "template" / ".github" / "workflows" / "test.yml").read_text()
    runs = re.findall(r"^\s+run: (.*)$", workflow, re.M)
    for command in commands.strip().splitlines():
        assert command.strip() in runs, command
    declared = re.search(r'^dependencies = \[(.*)\]$',
                         (ROOT / "template" / "pyproject.toml").read_text(), re.M).group(1)
    jax_range = re.search(r'"(jax[^"]*)"', declared).group(1)
    assert f'"{jax_range}"' in runs[0]
