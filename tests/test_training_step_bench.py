"""The training-step benchmark trains the same model with each norm (small sizes)."""

import importlib.util
import json
import pathlib

import jax
import pytest

BENCH = pathlib.Path(__file__).parents[1] / "benchmarks" / "training_step_bench.py"
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "128", "--vocab", "256",
        "--batch", "2", "--seq", "32"]


def _bench():
    spec = importlib.util.spec_from_file_location("training_step_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    bench = _bench()
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


def test_kernel_times_are_recorded_on_a_gpu_only(records):
    on_gpu = jax.default_backend() == "gpu"
    assert all(("kernel_ms" in r) == on_gpu for r in records.values())


# A profile of two steps as JAX's profiler records it on a GPU (an XSpace):
# kernels on a stream line, a copy on another line, the host's plane.
PROFILE = """
planes { id: 1 name: "/device:GPU:0"
  lines { id: 1 name: "Stream #14(Compute,Memset)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 3000000000 }
    events { metadata_id: 2 offset_ps: 4000000000 duration_ps: 500000000 }
    events { metadata_id: 1 offset_ps: 5000000000 duration_ps: 3000000000 }
    events { metadata_id: 2 offset_ps: 9000000000 duration_ps: 700000000 } }
  lines { id: 2 name: "Memcpy" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 9000000000 } }
  event_metadata { key: 1 value { id: 1 name: "fusion_12" } }
  event_metadata { key: 2 value { id: 2 name: "void gpu_ops::FastForwardKernel<float, 1>()" } } }
planes { id: 2 name: "/host:CPU"
  lines { id: 1 name: "python" events { metadata_id: 1 duration_ps: 50000000000 } }
  event_metadata { key: 1 value { id: 1 name: "fusion_12" } } }
"""


def test_kernel_times_come_from_the_gpu_streams():
    import jax.profiler
    profile = jax.profiler.ProfileData.from_text_proto(PROFILE)
    every, ours = _bench().kernel_milliseconds(profile, steps=2)
    assert every == pytest.approx((3 + 0.5 + 3 + 0.7) / 2)
    assert ours == pytest.approx((0.5 + 0.7) / 2)


def test_a_profiled_run_reads_its_own_trace():
    bench = _bench()
    results = bench.run(bench.CPU_CONFIG, steps=1, repeats=1, norms=("gpu_ops",), profile=True)
    times, first_loss, last_loss, (every, ours) = results["gpu_ops"]
    assert last_loss < first_loss
    if jax.default_backend() == "gpu":
        assert 0 < ours < every
    else:  # the trace has no GPU plane
        assert every == ours == 0.0


def test_sizes_that_make_no_model_are_refused(capsys):
    bench = _bench()
    with pytest.raises(SystemExit):
        bench.main(["--out", "/dev/null", *TINY, "--heads", "5"])
    assert "multiple of --heads" in capsys.readouterr().err
