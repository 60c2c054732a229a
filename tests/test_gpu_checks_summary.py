"""tools/gpu_checks_summary.py turns gpu_checks.sh's logs into one short summary."""

import importlib.util
import json
import pathlib

import pytest

TOOL = pathlib.Path(__file__).parents[1] / "tools" / "gpu_checks_summary.py"

ENVIRONMENT = """date: 2026-11-25T17:58:31Z
commit: {commit}
pytest selection: -k "not hijax"
test processes: 8
hypothesis profile: long
NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB
Cuda compilation tools, release 13.0, V13.0.88
python 3.12.3
jax 0.11.2 jaxlib 0.11.2
[CudaDevice(id=0)]
device 0: compute capability major 9, compute capability minor 0, multiprocessors 132
"""
TESTS = """==> Running the test suite
....F...x [100%]
FAILED tests/test_gpu.py::test_a[primitives] - AssertionError
FAILED tests/test_gpu.py::test_b[primitives] - AssertionError
FAILED tests/test_gpu.py::test_c[hijax-(67, 128)-<class 'jax.numpy.bfloat16'>]
3 failed, 312 passed, 3 skipped, 608 deselected, 1 xfailed in 437.76s (0:07:17)
"""
SANITIZER = """== compute-sanitizer --tool memcheck --kernel-name kns=gpu_ops
========= ERROR SUMMARY: 2 errors
== memcheck exit status: 99
== compute-sanitizer --tool racecheck --kernel-name kns=gpu_ops
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
== racecheck exit status: 0
"""


def _tool():
    spec = importlib.util.spec_from_file_location("gpu_checks_summary", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(folder, commit, **logs):
    folder.mkdir()
    (folder / "environment.txt").write_text(ENVIRONMENT.format(commit=commit))
    for name, text in logs.items():
        (folder / f"{name}.log").write_text(text)
    return folder


def test_runs_merge_into_one_summary_without_logs(tmp_path):
    tests = _run(tmp_path / "tests", "c36ca84", build_and_tests=TESTS)
    rest = _run(tmp_path / "rest", "1262d16", nbval="84 passed in 86.09s (0:01:26)\n",
                compute_sanitizer=SANITIZER)
    out = tmp_path / "h100.json"
    _tool().main(["--out", str(out), str(tests), str(rest)])
    summary = json.loads(out.read_text())
    assert summary["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert summary["machine"]["jax"] == "0.11.2" and summary["machine"]["nvcc"] == "13.0"
    tests_check, nbval, sanitizer = summary["checks"]
    assert tests_check["commit"] == "c36ca84" and tests_check["selection"] == '-k "not hijax"'
    assert tests_check["processes"] == 8
    assert (tests_check["passed"], tests_check["failed"], tests_check["skipped"]) == (312, 3, 3)
    assert tests_check["failures"] == [
        "tests/test_gpu.py::test_a[primitives]", "tests/test_gpu.py::test_b[primitives]",
        "tests/test_gpu.py::test_c[hijax-(67, 128)-<class 'jax.numpy.bfloat16'>]"]
    assert nbval["commit"] == "1262d16" and nbval["passed"] == 84
    assert sanitizer["tools"] == {"memcheck": {"errors": 2, "exit_status": 99},
                                  "racecheck": {"errors": 0, "exit_status": 0}}


def test_an_update_replaces_the_checks_it_reruns_and_keeps_the_others(tmp_path):
    out = tmp_path / "h100.json"
    first = _run(tmp_path / "first", "c36ca84", build_and_tests=TESTS,
                 nbval="84 passed in 86.09s (0:01:26)\n")
    _tool().main(["--out", str(out), str(first)])
    again = _run(tmp_path / "again", "1262d16", nbval="85 passed in 86.09s (0:01:26)\n")
    _tool().main(["--out", str(out), "--update", str(again)])
    tests_check, nbval = json.loads(out.read_text())["checks"]
    assert tests_check["commit"] == "c36ca84"  # not rerun: kept
    assert (nbval["commit"], nbval["passed"]) == ("1262d16", 85)  # rerun: replaced in place


@pytest.mark.parametrize("options", ["-n 8 --dist load -p no:cacheprovider", "-p no:cacheprovider"])
def test_options_that_do_not_select_tests_do_not_make_another_check(tmp_path, options):
    out = tmp_path / "h100.json"
    older = {"check": "tests", "commit": "c36ca84", "selection": f'{options} -k "not hijax"'}
    other = {"check": "tests", "commit": "c36ca84", "selection": "-k slow"}
    out.write_text(json.dumps({"machine": {}, "checks": [older, other]}))
    again = _run(tmp_path / "again", "1262d16", build_and_tests=TESTS)
    _tool().main(["--out", str(out), "--update", str(again)])
    first, second = json.loads(out.read_text())["checks"]
    assert (first["commit"], first["selection"]) == ("1262d16", '-k "not hijax"')
    assert second == other  # another selection of tests: kept


def test_a_run_cut_off_says_so(tmp_path):
    cut = _run(tmp_path / "cut", "c36ca84", build_and_tests="==> Running\n.....")
    _, checks = _tool().run_summary(cut)
    assert checks == [{"check": "tests", "commit": "c36ca84", "date": "2026-11-25T17:58:31Z",
                       "jax": "0.11.2", "selection": '-k "not hijax"', "hypothesis_profile": "long",
                       "processes": 8, "completed": False, "failures": []}]


def test_a_run_cut_off_counts_and_names_what_it_reported_until_then(tmp_path):
    one_process = ("tests/test_gpu.py::test_a[primitives] PASSED      [  1%]\n"
                   "tests/test_gpu.py::test_b[hijax-(67, 128)] FAILED [  2%]\n")
    several = ("[gw0] [  3%] PASSED tests/test_gpu.py::test_c \n"
               "[gw5] [  4%] FAILED tests/test_gpu.py::test_d[(8, 128)] \n"
               "[gw2] [  5%] ERROR tests/test_gpu.py::test_e \n")
    for log, failures, counts in [
            (one_process, ["tests/test_gpu.py::test_b[hijax-(67, 128)]"],
             {"passed": 1, "failed": 1}),
            (several, ["tests/test_gpu.py::test_d[(8, 128)]", "tests/test_gpu.py::test_e"],
             {"passed": 1, "failed": 1, "errors": 1})]:
        folder = tmp_path / str(len(failures))
        _, (check,) = _tool().run_summary(_run(folder, "c36ca84", build_and_tests=log))
        assert not check["completed"] and check["failures"] == failures
        assert {k: check[k] for k in ("passed", "failed", "errors") if k in check} == counts


def test_a_folder_that_is_no_run_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _tool().main(["--out", str(tmp_path / "x.json"), str(tmp_path)])
    assert "not a gpu_checks.sh output folder" in capsys.readouterr().err


def test_the_float8_matmul_check_is_summarised(tmp_path):
    run = _run(tmp_path / "fp8", "e52ac34")
    record = {"device": "NVIDIA H100 80GB HBM3", "shape": {"rows": 4096},
              "fp8_matmul": True, "custom_call_targets": ["__cublas$lt$matmul$f8"],
              "matmul_lines": ["%cublas-gemm.1 = custom-call(...)"]}
    (run / "fp8_matmul.json").write_text(json.dumps(record))
    _, (check,) = _tool().run_summary(run)
    assert check["check"] == "fp8 matmul" and check["commit"] == "e52ac34"
    assert check["fp8_matmul"] is True and check["shape"] == {"rows": 4096}
    assert check["custom_call_targets"] == ["__cublas$lt$matmul$f8"]


def test_the_collectives_of_a_mesh_of_gpus_are_kept(tmp_path):
    run = _run(tmp_path / "sharding", "1262d16")
    programs = {"shard_map, forward": [],
                "custom_partitioning, gradient": ["%psum.5 = f32[512,512]{1,0} all-reduce(%x)"]}
    (run / "sharding_hlo.json").write_text(json.dumps(
        {"devices": 4, "device_kind": "NVIDIA H200", "jax": "0.11.2",
         "x": "f32[16,512,512] sharded by rows", "programs": programs}))
    env, (check,) = _tool().run_summary(run)
    assert env["gpus"] == 1  # the one nvidia-smi line of ENVIRONMENT
    assert check == {"check": "sharding collectives", "commit": "1262d16",
                     "date": "2026-11-25T17:58:31Z", "jax": "0.11.2", "devices": 4,
                     "x": "f32[16,512,512] sharded by rows", "programs": programs}


def test_the_sweeps_and_the_property_test_are_checks_of_their_own(tmp_path):
    case = "[gw1] [ 50%] {} tests/test_gpu_sweep.py::test_the_kernels_give_the_reference_answer[{}]"
    run = _run(tmp_path / "run", "5d1e2f3",
               sweep="==> Running the test suite\n" + case.format("PASSED", "norm-1x36") + "\n"
                     + case.format("PASSED", "norm-2x36") + "\n2 passed in 181.2s (0:03:01)\n",
               sweep_without_clusters=case.format("FAILED", "norm-1x36") + "\n"
                                      "1 failed in 170.0s (0:02:50)\n"
                                      "FAILED tests/test_gpu_sweep.py::test_x[norm-1x36]\n",
               properties="hypothesis profile: gpus\n3 passed in 200.1s (0:03:20)\n")
    out = tmp_path / "h200.json"
    _tool().main(["--out", str(out), str(run)])
    sweep, without_clusters, properties = json.loads(out.read_text())["checks"]
    assert (sweep["check"], sweep["commit"], sweep["passed"]) == ("sweep", "5d1e2f3", 2)
    assert sweep["kernel_cases"] == {"passed": 2, "failures": []}
    assert without_clusters["check"] == "sweep (plans without clusters)"
    assert without_clusters["kernel_cases"]["failed"] == 1
    assert without_clusters["failures"] == ["tests/test_gpu_sweep.py::test_x[norm-1x36]"]
    assert (properties["check"], properties["hypothesis_profile"]) == ("property test", "gpus")
    assert properties["passed"] == 3


@pytest.mark.parametrize("code", ["template", "recipes"])
def test_the_templates_and_the_recipes_tests_and_sanitizers_are_checks_of_their_own(
        tmp_path, code):
    run = _run(tmp_path / "run", "7a8b9c0",
               **{code: f"tests/test_{code}.py::test_a PASSED [ 50%]\n"
                        "2 passed in 150.3s (0:02:30)\n",
                  f"{code}_sanitizer": SANITIZER.replace("gpu_ops", "my_ops")})
    _, (tests, sanitizer) = _tool().run_summary(run)
    assert (tests["check"], tests["commit"], tests["passed"]) == (code, "7a8b9c0", 2)
    assert sanitizer["check"] == f"{code} compute-sanitizer"
    assert sanitizer["tools"]["memcheck"] == {"errors": 2, "exit_status": 99}


def test_the_templates_own_tests_are_a_check_beside_the_books_tests_of_it(tmp_path):
    run = _run(tmp_path / "run", "7a8b9c0",
               template="tests/test_template.py::test_a PASSED [ 50%]\n"
                        "2 passed in 150.3s (0:02:30)\n",
               template_own_tests="tests/test_my_ops.py::test_b FAILED [ 4%]\n"
                                  "FAILED tests/test_my_ops.py::test_b - AssertionError\n"
                                  "1 failed, 23 passed in 40.1s\n")
    _, (books, own) = _tool().run_summary(run)
    assert (books["check"], books["passed"]) == ("template", 2)
    assert (own["check"], own["passed"], own["failed"]) == ("template's own tests", 23, 1)
    assert own["failures"] == ["tests/test_my_ops.py::test_b"]


def test_a_run_of_some_chapters_is_a_check_of_its_own(tmp_path):
    some = _run(tmp_path / "some", "7a8b9c0", nbval="30 passed in 60.0s\n")
    env = (some / "environment.txt").read_text()
    (some / "environment.txt").write_text(env + "chapters: chapters/14_*.ipynb\n")
    every = _run(tmp_path / "every", "7a8b9c0", nbval="190 passed in 600.0s\n")
    (_, (of_some,)), (_, (of_every,)) = map(_tool().run_summary, (some, every))
    assert of_some["selection"] == "chapters/14_*.ipynb" and "selection" not in of_every
    assert _tool()._key(of_some) != _tool()._key(of_every)
