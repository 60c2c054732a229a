"""The numbers chapter 8's prose quotes from the committed results files (the
plotted runs, the runs before them and the rounds, benchmarks/results/) are
those files' numbers (and the README's one such sentence).

The chapter's tables are computed from benchmarks/results/ each time it runs
(and nbval checks them), but its prose quotes some of the same numbers: the
targets it misses, the cases near their line, the small batch. When a new run
replaces a file, these tests fail until the prose says what the new file says.
Each test builds the sentence's numbers from the files, formatted as the
prose writes them, and looks for them in the chapter.
"""

import collections
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
from rounds_table import case_key, join, spread  # noqa: E402

H100, H200 = "nvidia-h100-80gb-hbm3", "nvidia-h200"
SEED, SMALL, ROWS_1024 = (32, 262144), (512, 4096), (16384, 1024)
COUNTS = {4: "four", 6: "six", 7: "seven", 8: "eight"}


def text_of(path):
    """A file's text with every run of white space made one space."""
    return re.sub(r"\s+", " ", (ROOT / path).read_text())


@pytest.fixture(scope="module")
def prose():
    return text_of("chapters/08_performance.md")


def records(name):
    return json.loads((RESULTS / f"{name}.json").read_text())


def pick(run, op, impl, case, dtype="bfloat16"):
    """The one record of a run for op, impl and case (rows, row_len)."""
    found = [r for r in run if case_key(r) == (op, dtype, *case) and r["impl"] == impl]
    assert len(found) == 1, (op, impl, case, len(found))
    return found[0]


def of_copy(record):
    return record["gbps"] / record["copy_gbps"]


def rounds(name):
    """The records of rounds/<name>.json, numbered by round as rounds_table.py
    numbers them. The records are in round order, but not every file numbers
    its rounds: a round ends before a case it already has."""
    per_round = []
    for r in records(f"rounds/{name}"):
        if not per_round or (r["impl"], case_key(r)) in per_round[-1]:
            per_round.append({})
        per_round[-1][r["impl"], case_key(r)] = r
    return join(list(one_round.values()) for one_round in per_round)


def in_rounds(name, op, impl, case):
    """impl's records of op and case (rows, row_len), bfloat16, one per round."""
    return [r for r in rounds(name) if case_key(r) == (op, "bfloat16", *case)
            and r["impl"] == impl]


def fraction_in_rounds(name, op, case):
    return spread(rounds(name))[(op, "bfloat16", *case)][0]


def speed_in_rounds(name, op, case):
    return spread(rounds(name))[(op, "bfloat16", *case)][1]


def percents(values):
    return f"{min(values):.1%} to {max(values):.1%}"


def main_case(rows, row_len):
    return rows >= 16384 and 1024 <= row_len <= 16384


def main_forwards(run, impl):
    """{(rows, row_len): fraction of copy} of impl's bfloat16 forward in the main cases."""
    return {(r["rows"], r["row_len"]): of_copy(r) for r in run if r["op"] == "fwd"
            and r["impl"] == impl and r["dtype"] == "bfloat16"
            and main_case(r["rows"], r["row_len"])}


def test_the_forward_cannot_reach_1_2_times_xla(prose):
    past_copy = []  # (ours' fraction of copy, 1.2 times XLA's, case, GPU)
    for device, gpu in ((H100, "H100"), (H200, "H200")):
        run = records(device)
        xla, ours = main_forwards(run, "xla"), main_forwards(run, "gpu_ops")
        assert len(xla) == 8 and min(xla.values()) > 1 / 1.2, device
        past_copy += [(ours[case], 1.2 * xla[case], case, gpu) for case in ours]
    fastest, needed, (rows, row_len), gpu = max(past_copy)
    h100_least = min(need for _, need, _, on in past_copy if on == "H100")
    assert h100_least > fastest  # beyond the fastest forward of any case, on either GPU
    assert (f"ours did by at most {fastest - 1:.1%}, for {rows:,} rows of {row_len:,} on the "
            f"{gpu}, where 1.2 times XLA's speed would need {needed:.1%} of it; on the H100 "
            f"it would need at least {h100_least:.1%} in every main case") in prose
    h200 = records(H200)
    xla = main_forwards(h200, "xla")
    speed = {case: pick(h200, "fwd", "xla", case)["median_us"]
             / pick(h200, "fwd", "gpu_ops", case)["median_us"] for case in xla}
    lowest, closest = min(xla, key=xla.get), max(speed, key=speed.get)
    assert (f"on the H200 the lowest is {xla[lowest]:.1%}, for {lowest[0]:,} rows of "
            f"{lowest[1]:,}; ours comes closest for {closest[0]:,} rows of {closest[1]:,}: "
            f"{speed[closest]:.2f} times") in prose


def test_seed_shape(prose):
    h100, h200 = records(H100), records(H200)
    fwd, fwd_bwd = (of_copy(pick(h100, op, "gpu_ops", SEED)) for op in ("fwd", "fwd_bwd"))
    assert f"({fwd:.1%} and {fwd_bwd:.1%} of the copy bandwidth)" in prose
    fwd, fwd_bwd = (of_copy(pick(h200, op, "gpu_ops", SEED)) for op in ("fwd", "fwd_bwd"))
    assert f"it reaches {fwd:.0%} and {fwd_bwd:.0%}" in prose
    fwd, fwd_bwd = (fraction_in_rounds(f"{H100}_near_targets", op, SEED)
                    for op in ("fwd", "fwd_bwd"))
    assert min(fwd) >= 0.9 and min(fwd_bwd) >= 0.8
    assert (f"in the {COUNTS[len(fwd)]} rounds ({percents(fwd)} and {percents(fwd_bwd)})"
            in prose)
    assert f"the seed shape's forward + backward at {percents(fwd_bwd)} of the copy" in prose
    fwd, fwd_bwd = (fraction_in_rounds(f"{H200}_near_targets", op, SEED)
                    for op in ("fwd", "fwd_bwd"))
    assert f"({percents(fwd)} and {percents(fwd_bwd)} in the rounds)" in prose
    # The H100's forward + backward with the harness before the plotted runs'.
    fresh, jax_0_11, jax_0_12 = (
        f"{of_copy(pick(records(name), 'fwd_bwd', 'gpu_ops', SEED)):.1%}"
        for name in (f"earlier_runs/{H100}_9e9c7ee_fresh_outputs",
                     f"jax_versions/{H100}_jax_0.11.2", f"jax_versions/{H100}_jax_0.12.0.1"))
    assert (f"it reached {fresh}, then {jax_0_11} and {jax_0_12} on one machine with JAX "
            f"0.11.2 and 0.12.0.1") in prose
    rounds = fraction_in_rounds(f"{H100}_seed_shape_fresh_outputs", "fwd_bwd", SEED)
    assert f"and {percents(rounds)} in {COUNTS[len(rounds)]} rounds on another" in prose


def test_forward_and_backward_of_rows_of_1024(prose):
    h100 = fraction_in_rounds(f"{H100}_near_targets", "fwd_bwd", ROWS_1024)
    assert min(h100) >= 0.8
    assert f"the forward + backward of 16,384 rows of 1,024 at {percents(h100)}" in prose
    assert f"this case reaches {percents(h100)} in the rounds" in prose

    def quoted(record):
        return f"{of_copy(record):.1%}", f"{record['median_us']:.1f} µs", \
            f"{record['copy_gbps']:,.0f} GB/s"
    plotted, before, before_that = (
        quoted(pick(records(name), "fwd_bwd", "gpu_ops", ROWS_1024))
        for name in (H200, f"earlier_runs/{H200}_e3a235c",
                     f"earlier_runs/{H200}_9e9c7ee_fresh_outputs"))
    assert (f"It reached {plotted[0]} of the copy bandwidth in the run plotted here "
            f"({plotted[1]}, against a copy measured at {plotted[2]})") in prose
    assert f"{before[0]} in the run before, on another machine ({before[1]}, {before[2]}" in prose
    assert f"{before_that[0]} in the one before that ({before_that[1]}, {before_that[2]})" in prose
    h200_rounds = in_rounds(f"{H200}_near_targets", "fwd_bwd", "gpu_ops", ROWS_1024)
    us = [r["median_us"] for r in h200_rounds]
    copy = [r["copy_gbps"] for r in h200_rounds]
    h200 = percents([of_copy(r) for r in h200_rounds])
    assert (f"{h200} in the {COUNTS[len(h200_rounds)]} rounds, on one machine "
            f"({min(us):.1f} to {max(us):.1f} µs, {min(copy):,.0f} to {max(copy):,.0f} GB/s)"
            ) in prose
    assert (f"({plotted[0]} in the run plotted here, {h200} in the {COUNTS[len(h200_rounds)]} "
            f"rounds, though {before[0]} in the run before)") in prose


def test_small_batch_forward(prose):
    h100_ours, h100_xla, h200_ours, h200_xla = (
        pick(records(device), "fwd", impl, SMALL)["median_us"]
        for device in (H100, H200) for impl in ("gpu_ops", "xla"))
    assert (f"ours took {h100_ours:.2f} µs against XLA's {h100_xla:.2f} on the H100, and "
            f"{h200_ours:.2f} against {h200_xla:.2f} µs on the H200: "
            f"{h100_xla / h100_ours:.2f} and {h200_xla / h200_ours:.2f} times") in prose

    def rounds_of(device):
        name = f"{device}_small_batch"
        times = {impl: [r["median_us"] for r in in_rounds(name, "fwd", impl, SMALL)]
                 for impl in ("gpu_ops", "xla")}
        return (times, speed_in_rounds(name, "fwd", SMALL),
                speed_in_rounds(name, "fwd_bwd", SMALL))

    times, fwd, fwd_bwd = rounds_of(H200)
    assert (f"In {COUNTS[len(fwd)]} rounds one after another on one H200 ours took "
            f"{min(times['gpu_ops']):.2f} to {max(times['gpu_ops']):.2f} µs and XLA's "
            f"{min(times['xla']):.2f} to {max(times['xla']):.2f}: {min(fwd):.3f} to "
            f"{max(fwd):.3f} times XLA's speed, while the forward + backward was "
            f"{min(fwd_bwd):.2f} to {max(fwd_bwd):.2f} times XLA's speed in all "
            f"{COUNTS[len(fwd_bwd)]}") in prose
    assert max(fwd) < 1 and f"missed on the H200 by up to {1 - min(fwd):.0%}" in prose
    times, fwd, fwd_bwd = rounds_of(H100)
    assert min(fwd) >= 1
    assert (f"In {COUNTS[len(fwd)]} rounds on one H100 ours took "
            f"{min(times['gpu_ops']):.2f} to {max(times['gpu_ops']):.2f} µs and XLA's "
            f"{min(times['xla']):.2f} to {max(times['xla']):.2f}: {min(fwd):.3f} to "
            f"{max(fwd):.3f} times XLA's speed, and {min(fwd_bwd):.2f} to "
            f"{max(fwd_bwd):.2f} in the forward + backward") in prose
    assert f"the small batch's forward at {min(fwd):.2f} to {max(fwd):.2f} times" in prose
    h100_before, h200_before = (speed_in_rounds(f"{d}_small_batch_9e9c7ee", "fwd", SMALL)
                                for d in (H100, H200))
    assert (f"{min(h100_before):.3f} to {max(h100_before):.3f} times XLA's speed in "
            f"{COUNTS[len(h100_before)]} rounds on one H100, {min(h200_before):.3f} to "
            f"{max(h200_before):.3f} in {COUNTS[len(h200_before)]} on one H200") in prose


def test_between_runs(prose):
    def moved(impl):
        """The most a case's time moved over the rounds near their targets: slowest
        over fastest, less one, on either GPU."""
        times = collections.defaultdict(list)
        for device in (H100, H200):
            for r in rounds(f"{device}_near_targets"):
                if r["impl"] == impl:
                    times[device, case_key(r)].append(r["median_us"])
        return max(max(case) / min(case) - 1 for case in times.values())
    assert (f"moved each of our times by at most {moved('gpu_ops'):.1%} (the "
            f"`*_near_targets` files; XLA's by up to {moved('xla'):.1%})") in prose

    def changes(device):
        """{case: time with JAX 0.12.0.1 over time with 0.11.2, less one}."""
        before, after = ({(r["op"], r["impl"], r["rows"], r["row_len"]): r["median_us"]
                          for r in records(f"jax_versions/{device}_jax_{version}")}
                         for version in ("0.11.2", "0.12.0.1"))
        assert before.keys() == after.keys()
        return {case: after[case] / before[case] - 1 for case in before}
    h100, h200 = changes(H100), changes(H200)
    # "The same time to 1%" at the one decimal of the versions' logs (+1.0% is 1.02%).
    same = [sum(round(abs(c) * 1000) <= 10 for c in d.values()) for d in (h100, h200)]
    longer = [d["fwd", "xla", 16384, 16384] for d in (h100, h200)]
    assert (f"to 1% in {same[0]} of {len(h100)} cases on one H100 and {same[1]} on one "
            f"H200, XLA's and ours; XLA's forward of 16,384 rows of 16,384 took "
            f"{longer[0]:.1%} and {longer[1]:.1%} longer") in prose
    assert (f"took the same time with both versions, to 1%, in {same[0]} and {same[1]} of "
            f"{len(h100)} cases") in text_of("README.md")
