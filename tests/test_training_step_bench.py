"""The training-step benchmark trains the same model with each norm (small sizes)."""

import importlib.util
import json
import pathlib

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

BENCH = pathlib.Path(__file__).parents[1] / "benchmarks" / "training_step_bench.py"
TINY = ["--layers", "2", "--d-model", "128", "--heads", "4", "--ffn", "256", "--vocab", "256",
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
    assert set(records) == {"jnp", "gpu_ops", "gpu_ops_residual", "gpu_ops_fp8", "identity"}
    for r in records.values():
        assert r["median_ms"] > 0 and r["tokens_per_s"] > 0
        assert r["config"]["batch"] * r["config"]["seq"] == 64


def test_gpu_ops_norms_train_the_same_model_as_jnp(records):
    # same parameters and tokens: the same first loss, and all learn
    # (quantised to float8, the norms' outputs move the loss a little)
    for norm in ("gpu_ops", "gpu_ops_residual", "gpu_ops_fp8"):
        assert records[norm]["first_loss"] == pytest.approx(records["jnp"]["first_loss"],
                                                            rel=1e-2)
    for norm in ("jnp", "gpu_ops", "gpu_ops_residual", "gpu_ops_fp8"):
        assert records[norm]["last_loss"] < records[norm]["first_loss"]
    # without norms it is another model, but one of the same scale, which learns
    identity, jnp_first = records["identity"], records["jnp"]["first_loss"]
    assert identity["first_loss"] != pytest.approx(jnp_first, rel=1e-3)
    assert identity["first_loss"] == pytest.approx(jnp_first, rel=0.25)
    assert math.isfinite(identity["last_loss"]) and identity["last_loss"] < identity["first_loss"]


def test_the_identity_starts_at_the_scale_the_norms_give():
    # its norm weights are one over the RMS of each norm's input at the start
    bench = _bench()
    config = bench.CPU_CONFIG
    tokens = jax.random.randint(jax.random.key(1), (config.batch, config.seq), 0, config.vocab)
    plain = bench.initial_params("jnp", config, tokens)
    scaled = bench.initial_params("identity", config, tokens)
    rms = bench.norm_input_rms(plain, tokens, config)
    weights = [w for layer in scaled["layers"] for w in (layer["attn_norm"], layer["mlp_norm"])]
    assert len(rms) == len(weights) + 1 == 2 * config.layers + 1
    for weight, r in zip([*weights, scaled["final_norm"]], rms):
        np.testing.assert_allclose(weight, np.full(weight.shape, 1 / float(r)), rtol=1e-6)
    assert float(rms[-1]) > 1.5 * float(rms[0])  # the stream grows: why the norms are there


def test_kernel_times_are_recorded_on_a_gpu_only(records):
    on_gpu = jax.default_backend() == "gpu"
    assert all(("kernel_ms" in r) == ("top_kernels" in r) == on_gpu for r in records.values())
    # and, from nvidia-smi, the GPU's clock and power while it ran
    assert all(("gpu_state" in r) == on_gpu for r in records.values())


def test_the_float8_variant_rescales_its_weights_after_every_step():
    bench = _bench()
    config = bench.CPU_CONFIG
    tokens = jax.random.randint(jax.random.key(1), (config.batch, config.seq), 0, config.vocab)
    params = bench.initial_params("gpu_ops_fp8", config, tokens)
    params, _ = bench.step_function("gpu_ops_fp8", config)(params, tokens)
    for layer in params["layers"]:
        for name in bench.llama_decoder.PROJECTED:
            w, scale = layer[name]["w"], layer[name]["scale"]
            largest = float(jnp.max(jnp.abs(w.astype(jnp.float32))))
            assert float(scale) == pytest.approx(largest / 448, rel=1e-6)
        assert isinstance(layer["wo"], jax.Array)  # not a projection of a norm's output


def test_float8_matmuls_are_counted_where_xla_makes_them(records):
    # On a CPU none: the float8 variant's matmuls stay dots of float32
    # read-backs. On a GPU the count is XLA's choice, which for matrices as
    # small as these may leave them to its own GEMM kernels; the results
    # files' test checks the count of a full-size step.
    assert records["gpu_ops_residual"]["float8_matmuls"] == 0
    if jax.default_backend() == "cpu":
        assert records["gpu_ops_fp8"]["float8_matmuls"] == 0


def test_the_float8_variant_reads_back_in_float32_and_its_head_stays_bfloat16():
    bench = _bench()
    x = jnp.ones((4, 128), jnp.bfloat16)
    y, total = bench.fp8_norm(x, jnp.ones((128,), jnp.bfloat16), residual=x)
    assert y.dtype == jnp.float32 and total.dtype == jnp.bfloat16
    assert bench.HEAD_NORMS["gpu_ops_fp8"] is bench.gpu_ops.rms_norm


# A profile of two steps as JAX's profiler records it on a GPU (an XSpace):
# kernels on two stream lines, a copy on another line, the host's plane.
PROFILE = """
planes { id: 1 name: "/device:GPU:0"
  lines { id: 1 name: "Stream #14(Compute,Memset)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 3000000000 }
    events { metadata_id: 2 offset_ps: 4000000000 duration_ps: 500000000 }
    events { metadata_id: 1 offset_ps: 5000000000 duration_ps: 3000000000 }
    events { metadata_id: 2 offset_ps: 9000000000 duration_ps: 700000000 } }
  lines { id: 3 name: "Stream #15(Compute)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 2500000000 duration_ps: 1000000000 } }
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
    times = _bench().gpu_milliseconds(profile, steps=2)
    assert times["kernel_ms"] == pytest.approx((3 + 0.5 + 3 + 0.7 + 1) / 2)
    assert times["gpu_ops_kernel_ms"] == pytest.approx((0.5 + 0.7) / 2)
    # the second stream's kernel runs beside the first one's for 0.5 ms
    assert times["busy_ms"] == pytest.approx((3 + 0.5 + 0.5 + 3 + 0.7) / 2)
    assert times["span_ms"] == pytest.approx(9.7 / 2)
    # fusion_12: 3 + 3 + 1 ms in two steps; gpu_ops' kernel: 0.5 + 0.7
    assert times["top_kernels"] == [["fusion_12", pytest.approx(3.5)],
                                    ["void gpu_ops::FastForwardKernel<float, 1>()",
                                     pytest.approx(0.6)]]


def test_a_profiled_run_reads_its_own_trace():
    bench = _bench()
    results = bench.run(bench.CPU_CONFIG, steps=1, repeats=1, norms=("gpu_ops",), profile=True)
    result = results["gpu_ops"]
    assert result["last_loss"] < result["first_loss"]
    gpu = result["gpu"]
    if jax.default_backend() == "gpu":
        assert 0 < gpu["gpu_ops_kernel_ms"] < gpu["kernel_ms"]
        assert 0 < gpu["busy_ms"] <= gpu["span_ms"]
        assert 0 < gpu["top_kernels"][0][1] <= gpu["kernel_ms"]
    else:  # the trace has no GPU plane
        assert gpu.pop("profiled_ms") > 0
        assert gpu == {"kernel_ms": 0.0, "gpu_ops_kernel_ms": 0.0, "busy_ms": 0.0,
                       "span_ms": 0.0, "top_kernels": []}


def test_sizes_that_make_no_model_are_refused(capsys):
    bench = _bench()
    with pytest.raises(SystemExit):
        bench.main(["--out", "/dev/null", *TINY, "--heads", "5"])
    assert "multiple of --heads" in capsys.readouterr().err


def _fp8_projection():
    sys.path.insert(0, str(BENCH.parent))
    import fp8_projection
    return fp8_projection


def test_a_float8_projection_is_the_matmul_rounded_with_its_gradient():
    fp8_projection = _fp8_projection()
    kh, kw, kd = jax.random.split(jax.random.key(4), 3)
    h = jax.random.normal(kh, (2, 8, 128), jnp.float32)
    w = (jax.random.normal(kw, (128, 32), jnp.float32) / 11).astype(jnp.bfloat16)
    dy = jax.random.normal(kd, (2, 8, 32), jnp.bfloat16)
    weight = fp8_projection.with_scale(w)
    assert float(weight["scale"]) == pytest.approx(float(jnp.max(jnp.abs(w))) / 448)
    y, pullback = jax.vjp(fp8_projection.project, h, weight)
    h64, w64, dy64 = (np.float64(a) for a in (h, w, dy))
    exact = h64 @ w64
    assert y.dtype == jnp.bfloat16 and y.shape == exact.shape
    error = np.abs(np.float64(y) - exact).max()
    assert 0 < error < 0.1 * np.abs(exact).max()  # w rounded to float8 (3 bits)
    dh, dweight = pullback(dy)  # straight through both roundings: those of h @ w
    dw = dweight["w"]
    assert dh.dtype == jnp.float32 and dw.dtype == jnp.bfloat16
    assert float(dweight["scale"]) == 0.0
    np.testing.assert_allclose(np.float64(dh), dy64 @ w64.T, rtol=1e-5, atol=1e-5)
    # h is kept in w's dtype for the weight's gradient
    h_kept = np.float64(h.astype(jnp.bfloat16))
    np.testing.assert_allclose(np.float64(dw), np.einsum("bsi,bso->io", h_kept, dy64),
                               rtol=2**-7, atol=1e-3)


def test_a_float8_projection_takes_only_a_float32_read_back():
    with pytest.raises(TypeError, match="h must be the norm's float32 read-back"):
        fp8_projection = _fp8_projection()
        fp8_projection.project(jnp.ones((4, 128), jnp.bfloat16),
                               fp8_projection.with_scale(jnp.ones((128, 16), jnp.bfloat16)))
