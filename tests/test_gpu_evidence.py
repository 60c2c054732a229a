"""Kernel changes land with their GPU run: the CUDA kernels and the planner
as they are in this commit passed the GPU sweep, the property test and
compute-sanitizer (initcheck and memcheck) on a GPU, and the template's
handlers and the recipes' their own tests and compute-sanitizer, as
results/gpu/ records.

CI has no GPU, so this test reads the clone's git history: the last commit
that changed the code (gpu_ops/csrc/kernels/ or gpu_ops/csrc/plan/;
template/csrc/; the recipes' C++ and CUDA) must be the commit of its checks
or one before it.
tools/gpu_checks.sh runs them and tools/gpu_checks_summary.py records them
(shared/GPU.md says how).
"""

import json
import pathlib
import subprocess

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "results" / "gpu"
# The CUDA code CI cannot run, and the checks on a GPU that speak for it.
EVIDENCE = {
    "kernels": (("gpu_ops/csrc/kernels", "gpu_ops/csrc/plan"),
                ("sweep", "sweep (plans without clusters)", "property test", "compute-sanitizer")),
    # the FFI handlers: they decode every call and choose what the kernels get
    "handlers": (("gpu_ops/csrc/ffi",), ("sweep", "tests", "compute-sanitizer")),
    "template": (("template/csrc",), ("template", "template compute-sanitizer")),
    # the recipes' handlers (git reads the patterns at any depth under recipes/)
    "recipes": (("recipes/*.cu", "recipes/*.cc", "recipes/*.h"),
                ("recipes", "recipes compute-sanitizer")),
}
# What a compute-sanitizer check must have run, with no error.
SANITIZERS = ("initcheck", "memcheck")


def git(*args):
    return subprocess.run(["git", *args], cwd=REPOSITORY, capture_output=True, text=True)


def last_change(code):
    """The last commit that changed `code` (folders); fails with the reason
    where the clone has no history to read it from."""
    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.fail("this checkout is no git clone: the GPU evidence check reads the "
                    "history of gpu_ops/csrc/ (clone the repository to run it)")
    if git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.fail("this clone is shallow: the GPU evidence check reads the history of "
                    "gpu_ops/csrc/ (git fetch --unshallow)")
    found = git("log", "-1", "--format=%H", "--", *code)
    assert found.returncode == 0, found.stderr
    if not found.stdout.strip():
        pytest.fail(f"git log finds no commit that changed {' or '.join(code)}")
    return found.stdout.strip()


def passed(check):
    """Whether a recorded check ran to its end without a failure: of the
    sweep, of any of its cases on the GPU (its other tests check the
    generator, and run in CI)."""
    if "tools" in check:  # compute-sanitizer's
        tools = check.get("tools", {})
        return all(tools.get(tool, {}).get("errors") == 0
                   and tools.get(tool, {}).get("exit_status") == 0 for tool in SANITIZERS)
    counts = check.get("kernel_cases", check) if check["check"].startswith("sweep") else check
    return bool(check.get("completed")) and counts.get("passed", 0) > 0 and not (
        counts.get("failed") or counts.get("errors") or counts.get("failures"))


def covers(commit, kernel_change):
    """Whether `commit` is kernel_change or comes after it."""
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return False
    return git("merge-base", "--is-ancestor", kernel_change, commit).returncode == 0


def evidence(change, required):
    """{results file: {check: (commit, passed, covers)}} of the required checks."""
    found = {}
    for path in sorted(RESULTS.glob("*.json")):
        checks = json.loads(path.read_text())["checks"]
        found[path.name] = {c["check"]: (c["commit"], passed(c), covers(c["commit"], change))
                            for c in checks if c["check"] in required}
    return found


@pytest.mark.parametrize("code", EVIDENCE)
def test_the_cuda_code_of_this_commit_passed_its_gpu_checks(code):
    paths, required = EVIDENCE[code]
    change = last_change(paths)
    found = evidence(change, required)
    complete = [name for name, checks in found.items()
                if all(checks.get(check, ("", False, False))[1:] == (True, True)
                       for check in required)]
    assert complete, (
        f"{' or '.join(paths)} changed at {change[:10]}, and no file in "
        f"results/gpu/ has {', '.join(required)} passed at that commit or later (found: "
        + "; ".join(f"{name}: " + ", ".join(
            f"{check} at {commit[:10]} {'passed' if ok else 'FAILED'}"
            f"{'' if after else ' (before the change)'}"
            for check, (commit, ok, after) in checks.items()) for name, checks in found.items())
        + "): run tools/gpu_checks.sh on a GPU at this commit, or leave the code as it was")


def test_a_check_before_the_change_or_failed_does_not_count():
    kernel_change = last_change(EVIDENCE["kernels"][0])
    first = git("rev-list", "--max-parents=0", "HEAD").stdout.split()[0]
    assert covers(kernel_change, kernel_change)
    assert not covers(first, kernel_change) or first == kernel_change
    assert not covers("0" * 40, kernel_change)
    assert not passed({"check": "sweep", "completed": True, "passed": 10, "failed": 1,
                       "failures": ["x"]})
    assert not passed({"check": "sweep", "completed": False, "passed": 10, "failures": []})
    assert not passed({"check": "sweep", "completed": True, "passed": 10, "failures": [],
                       "kernel_cases": {"passed": 9, "failed": 1, "failures": ["y"]}})
    assert passed({"check": "sweep", "completed": True, "passed": 9, "failed": 1,
                   "failures": ["a generator test"],
                   "kernel_cases": {"passed": 9, "failures": []}})
    assert not passed({"check": "compute-sanitizer",
                       "tools": {"memcheck": {"errors": 0, "exit_status": 0}}})
    assert passed({"check": "compute-sanitizer",
                   "tools": {tool: {"errors": 0, "exit_status": 0} for tool in SANITIZERS}})
