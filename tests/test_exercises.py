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
    5: ("softmax.py", "return y, y * (dx - jnp.sum(y * dx, axis=-1, keepdims=True))",
        "return y, y * dx"),
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


def _solution_with(tmp_path, right, wrong):
    """The solution's module with `right` written as `wrong` in softmax.py."""
    folder = tmp_path / "softmax"
    shutil.copytree(checks.SOLUTION.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    text = (folder / "softmax.py").read_text()
    assert text.count(right) == 1
    (folder / "softmax.py").write_text(text.replace(right, wrong))
    return checks.load(folder / "softmax.py")


PARTITION_RETURN = "return mesh, softmax_impl, sharding, (sharding,)"


def test_a_mistake_in_the_partition_function_is_reported_by_its_cause(tmp_path):
    # JAX wraps it in a JaxRuntimeError whose first line is a traceback's
    status, words = checks.verdict(7, _solution_with(
        tmp_path, PARTITION_RETURN, "return mesh, softmax_impl, (sharding,), (sharding,)"))
    assert status == "wrong" and "Traceback" not in words, words
    assert words.startswith("x sharded as P('d',): JaxRuntimeError, caused by "), words
    assert "Error" in words.split("caused by ")[1], words


def test_an_unwritten_partition_function_is_not_written_yet(tmp_path):
    status, words = checks.verdict(7, _solution_with(
        tmp_path, PARTITION_RETURN, 'raise NotImplementedError("step 7: softmax_partition")'))
    assert (status, words) == ("not written yet", "step 7: softmax_partition")


@pytest.fixture
def reader_with_the_solution(tmp_path, monkeypatch):
    """A reader's exercises/softmax/ with the solution's files written in."""
    folder = tmp_path / "softmax"
    shutil.copytree(checks.SOLUTION.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(checks, "YOURS", folder / "softmax.py")
    return folder


def test_a_reader_who_writes_every_step_ends_with_a_whole_op(reader_with_the_solution):
    # as the chapters' check cells run it, on the reader's files
    for step in STEPS:
        verdict = checks.check(step)
        assert verdict.correct, verdict
        assert repr(verdict).startswith(f"Step {step}, ") and "your softmax" in repr(verdict)


def test_without_nvcc_the_track_runs_on_the_cpu_handler(reader_with_the_solution, monkeypatch):
    from exercises import build

    monkeypatch.setattr(build, "nvcc", lambda: None)
    # a C++ change, so that this build is new and made without nvcc
    source = reader_with_the_solution / "softmax_cpu.cc"
    source.write_text(source.read_text() + "// built without nvcc\n")
    module = checks.load(checks.YOURS)
    assert module.library.cuda is None
    assert all(checks.verdict(step, module)[0] == "correct" for step in STEPS)
    assert checks.verdict(1, module)[1].endswith("(CUDA handler: not built: no nvcc)")


def test_the_handlers_check_says_whether_the_cuda_handler_ran(solution):
    import jax

    words = checks.verdict(1, solution)[1]
    if solution.library.cuda is None:
        assert words.endswith("(CUDA handler: not built: no nvcc)"), words
    elif jax.default_backend() == "gpu":
        assert words.endswith("(CUDA handler: ran on the GPU)"), words
    else:
        assert words.endswith("(CUDA handler: compiled, not run: no GPU here)"), words


def test_a_compile_error_is_reported_with_the_compiler_message(reader_with_the_solution):
    source = reader_with_the_solution / "softmax_cpu.cc"
    source.write_text(source.read_text().replace("double total = 0;", "double total = ;"))
    verdict = checks.check(1)
    assert verdict.status == "wrong" and "softmax_cpu.cc" in verdict.words
