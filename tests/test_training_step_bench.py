"""The training-step benchmark trains the same model with each norm (small sizes)."""

import importlib.util
import json
import pathlib

import pytest

BENCH = pathlib.Path(__file__).parents[1] / "benchmarks" / "training_step_bench.py"
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "128", "--vocab", "256",
        "--batch", "2", "--seq", "32"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("training_step_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path_factory.mktemp("training") / "step.json"
    bench.main(["--out", str(out), "--steps", "3", "--repeats", "2", *TINY])
    return {r["norm"]: r for r in json.loads(out.read_text())}


def test_every_norm_is_timed(records):
    assert set(records) == {"jnp", "gpu_ops", "gpu_ops_residual", "identity"}
    for r in records.values():
        assert r["median_ms"] > 0 and r["tokens_per_s"] > 0
        assert r["config"]["batch"] * r["config"]["seq"] == 64


def test_gpu_ops_norms_train_the_same_model_as_jnp(records):
    # same parameters and tokens: the same first loss, and all learn
    for norm in ("gpu_ops", "gpu_ops_residual"):
        assert records[norm]["first_loss"] == pytest.approx(records["jnp"]["first_loss"],
                                                            rel=1e-2)
    for norm in ("jnp", "gpu_ops", "gpu_ops_residual"):
        assert records[norm]["last_loss"] < records[norm]["first_loss"]
    # without norms it is another model
    assert records["identity"]["first_loss"] != pytest.approx(records["jnp"]["first_loss"],
                                                              rel=1e-2)


def test_sizes_that_make_no_model_are_refused(capsys):
    spec = importlib.util.spec_from_file_location("training_step_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit):
        bench.main(["--out", "/dev/null", *TINY, "--heads", "5"])
    assert "multiple of --heads" in capsys.readouterr().err
