"""The exercise track (exercises/): the solution passes every step's check,
the reader's starting files pass none and say so, and each check catches a
typical mistake in its step."""

import shutil

import pytest

from exercises import checks

STEPS = sorted(checks.STEPS)


@pytest.fixture(scope="module")
def solution():
    return checks.load(checks.SOLUTION)


@pytest.fixture(scope="module")
def starting_files():
    return checks.load(checks.YOURS)


@pytest.mark.parametrize("step", STEPS)
def test_the_solution_passes(solution, step):
    assert checks.verdict(step, solution)[0] == "correct"


@pytest.mark.parametrize("step", STEPS)
def test_the_starting_files_are_not_written_yet(starting_files, step):
    assert checks.verdict(step, starting_files)[0] == "not written yet"


# A mistake in each step: (file, what the solution has, what the mistake writes)
MISTAKES = {
    1: ("softmax_cpu.cc", "largest = *std::max_element(row, row + n);", "largest = 0;"),
    2: ("softmax.py", "jax.ShapeDtypeStruct(x.shape, x.dtype))(x)",
        "jax.ShapeDtypeStruct(x.shape, x.dtype))(x) * 2"),
    3: ("softmax.py", "return jax.ffi.ffi_lowering(library.name)(ctx, x)",
        "return mlir.lower_fun(jax.nn.softmax, multiple_results=False)(ctx, x)"),
    4: ("softmax.py", "if x.dtype != jnp.float32:", "if x.dtype == jnp.float64:"),
    5: ("softmax.py", "return (y * (dy - jnp.sum(dy * y, axis=-1, keepdims=True)),)",
        "return (y * dy,)"),
    6: ("softmax.py", "if axis == x.ndim - 1:", "if False:"),
    7: ("softmax.py", "sharding = NamedSharding(mesh, P(*rows, None))",
        "sharding = NamedSharding(mesh, P())"),
}


@pytest.mark.parametrize("step", STEPS)
def test_the_check_finds_a_mistake(tmp_path, step):
    folder = tmp_path / "softmax"
    shutil.copytree(checks.SOLUTION.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    name, right, wrong = MISTAKES[step]
    text = (folder / name).read_text()
    assert text.count(right) == 1
    (folder / name).write_text(text.replace(right, wrong))
    status, words = checks.verdict(step, checks.load(folder / "softmax.py"))
    assert status == "wrong", words
