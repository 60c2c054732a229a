"""The benchmark harness runs (small, on CPU) and writes well-formed records."""

import importlib.util
import json
import pathlib

import jax
import pytest

HARNESS = pathlib.Path(__file__).parents[1] / "benchmarks" / "rms_norm_bench.py"
FIELDS = {"device", "jax_version", "commit", "date", "op", "impl", "dtype", "rows",
          "row_len", "median_us", "bytes", "gbps", "copy_gbps"}


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the GPU case list is long")
def test_harness_writes_records(tmp_path):
    spec = importlib.util.spec_from_file_location("rms_norm_bench", HARNESS)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "results.json"
    bench.main(["--out", str(out), "--repeats", "1", "--calls", "1"])
    records = json.loads(out.read_text())
    assert {r["impl"] for r in records} == {"gpu_ops", "xla"}
    assert {r["op"] for r in records} == {"fwd", "fwd_bwd"}
    for r in records:
        assert set(r) == FIELDS
        assert r["median_us"] > 0 and r["gbps"] == pytest.approx(r["bytes"] / r["median_us"] / 1e3, rel=0.01, abs=0.06)
