"""tools/fp8_matmul_hlo.py says whether XLA runs the quantised norm's matmul in float8."""

import importlib.util
import json
import pathlib

import jax
import pytest

TOOL = pathlib.Path(__file__).parents[1] / "tools" / "fp8_matmul_hlo.py"


def _tool():
    spec = importlib.util.spec_from_file_location("fp8_matmul_hlo", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="what a CPU compiles")
def test_on_a_cpu_the_matmul_is_a_plain_dot(tmp_path):
    out = tmp_path / "fp8.json"
    _tool().main(["--out", str(out), "--rows", "64", "--d-model", "256", "--d-out", "32"])
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["shape"]["d_model"] == 256
    assert "gpu_ops_rms_norm_fp8_fwd" in record["custom_call_targets"]
    assert record["fp8_matmul"] is False
    assert any("dot(" in line for line in record["matmul_lines"])
    through = record["through_fp8"]  # the training step's route
    assert "gpu_ops_rms_norm_fp8_fwd" in through["custom_call_targets"]
    assert through["fp8_matmul"] is False
    assert any("dot(" in line for line in through["matmul_lines"])


def test_a_float8_matmul_call_is_recognised():
    hlo = ('%cublas-gemm.1 = (bf16[4096,2048]{1,0}, s8[33554432]{0}) custom-call('
           'f8e4m3fn[4096,2048]{1,0} %p0, f8e4m3fn[2048,2048]{1,0} %p1, f32[] %s0, f32[] %s1), '
           'custom_call_target="__cublas$lt$matmul$f8"\n'
           '%custom-call.2 = f8e4m3fn[4096,2048]{1,0} custom-call(bf16[4096,2048]{1,0} %x), '
           'custom_call_target="gpu_ops_rms_norm_fp8_fwd"\n')
    summary = _tool().summary(hlo)
    assert summary["fp8_matmul"] is True
    assert summary["custom_call_targets"] == ["__cublas$lt$matmul$f8",
                                              "gpu_ops_rms_norm_fp8_fwd"]
    assert len(summary["matmul_lines"]) == 1


def test_a_bfloat16_matmul_call_is_listed_but_not_float8():
    hlo = ('%cublas-gemm.3 = (bf16[4096,2048]{1,0}, s8[4194304]{0}) custom-call('
           'bf16[4096,2048]{1,0} %p0, bf16[2048,2048]{1,0} %p1), '
           'custom_call_target="__cublas$lt$matmul"\n')
    summary = _tool().summary(hlo)
    assert summary["fp8_matmul"] is False
    assert summary["matmul_lines"] == [hlo.strip()]


def test_sizes_a_float8_matmul_cannot_take_are_refused(capsys):
    with pytest.raises(SystemExit):
        _tool().main(["--out", "/dev/null", "--rows", "100"])
    assert "multiple of 16" in capsys.readouterr().err
