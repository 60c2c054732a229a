"""benchmarks/gpu_state.py: the GPU's clock and power while a benchmark runs."""

import os
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "benchmarks"))
import gpu_state  # noqa: E402

# nvidia-smi's lines for its query, as a capped H100 and a cool one print them
CAPPED = "1605, 1980, 698.51, 700.00, Active, 61"
COOL = "1980, 1980, 402.10, 700.00, Not Active, 48"


def test_a_line_of_nvidia_smi_is_parsed():
    assert gpu_state.parse(CAPPED) == {
        "clocks.sm": 1605.0, "clocks.max.sm": 1980.0, "power.draw": 698.51,
        "enforced.power.limit": 700.0, "clocks_event_reasons.sw_power_cap": 1.0,
        "temperature.gpu": 61.0}
    assert gpu_state.parse(COOL)["clocks_event_reasons.sw_power_cap"] == 0.0


@pytest.mark.parametrize("line", ["clocks.sm [MHz], clocks.max.sm [MHz]",
                                  "1605, 1980, [N/A], 700.00, Active, 61",
                                  "No devices were found"])
def test_other_lines_are_no_sample(line):
    assert gpu_state.parse(line) is None


def test_the_summary_covers_the_samples_within_the_intervals():
    samples = [(1.0, gpu_state.parse(CAPPED)), (2.0, gpu_state.parse(CAPPED)),
               (3.0, gpu_state.parse(COOL)), (9.0, gpu_state.parse(COOL))]
    found = gpu_state.summary(samples, [(0.5, 2.5), (2.95, 3.0)])
    assert found == {"samples": 3, "sm_clock_mhz": 1605.0, "max_sm_clock_mhz": 1980.0,
                     "power_w": 698.51, "power_limit_w": 700.0,
                     "power_capped": pytest.approx(2 / 3), "temperature_c": 61.0}
    assert gpu_state.summary(samples, [(4.0, 8.0)]) is None
    # an interval shorter than the sampling period has its neighbours
    assert gpu_state.summary(samples, [(9.05, 9.06)])["samples"] == 1


def test_the_sampler_reads_nvidia_smi_while_open(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho '{CAPPED}'\necho '{COOL}'\nsleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with gpu_state.Sampler() as sampler:
        assert sampler.samples  # the first sample is in before it opens
        deadline = time.monotonic() + 10
        while len(sampler.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [s["clocks.sm"] for _, s in sampler.samples] == [1605.0, 1980.0]


def test_without_nvidia_smi_there_are_no_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with gpu_state.Sampler() as sampler:
        pass
    assert sampler.samples == []
