"""The benchmarks' results files as the book reads them: chapter 8 and the
results appendix (chapter 12) draw their figures, tables and numbers from
results/benchmarks/ with these functions, so that a new run changes what
they show and nothing else.
"""

import json
import pathlib

import matplotlib.pyplot as plt
import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "results" / "benchmarks"
#: The implementations a run times side by side, in the figures' order.
IMPLS = ("gpu_ops", "apex_seed", "pallas", "xla")


def _short_name(device):
    return "H100" if "H100" in device else "H200"


def latest_runs():
    """{short device name: the records of its latest run} of the one-device benchmark."""
    runs = {}
    for path in sorted(RESULTS.glob("nvidia-*.json")):
        records = json.loads(path.read_text())
        runs[_short_name(records[0]["device"])] = records
    return runs


def training_steps():
    """{short device name: {norm: record}} of the training-step benchmark."""
    steps = {}
    for path in sorted(RESULTS.glob("training_step_*.json")):
        records = json.loads(path.read_text())
        steps[_short_name(records[0]["device"])] = {r["norm"]: r for r in records}
    return steps


def decoding_steps():
    """{short device name: {batch: {norm: record}}} of the decoding-step benchmark."""
    steps = {}
    for path in sorted(RESULTS.glob("decoding_step_*.json")):
        records = json.loads(path.read_text())
        by_batch = steps.setdefault(_short_name(records[0]["device"]), {})
        for r in records:
            by_batch.setdefault(r["batch"], {})[r["norm"]] = r
    return steps


def run_heading(record):
    """What ran where, from a run's record: device, JAX version, commit, date."""
    return (f"**{record['device']}**, JAX {record['jax_version']}, commit "
            f"`{record['commit'][:7]}`, {record['date'][:10]}")


def of_copy(record):
    """The record's bandwidth as a fraction of the copy bandwidth of its run."""
    return record["gbps"] / record["copy_gbps"]


def main_case(record):
    """A case large enough to leave launch costs behind: bfloat16, 16,384
    rows or more of 1,024 to 16,384 values."""
    return (record["dtype"] == "bfloat16" and record["rows"] >= 16384
            and 1024 <= record["row_len"] <= 16384)


def main_case_medians(records, op):
    """(median share of the copy bandwidth by implementation, median of how
    many times each other implementation's time gpu_ops' is) over the main
    cases of `op`."""
    mine = [r for r in records if r["op"] == op and main_case(r)]
    times = {(r["impl"], r["rows"], r["row_len"]): r["median_us"] for r in mine}
    timed = [impl for impl in IMPLS if any(r["impl"] == impl for r in mine)]
    shares = {impl: float(np.median([of_copy(r) for r in mine if r["impl"] == impl]))
              for impl in timed}
    speedups = {impl: float(np.median([times[impl, rows, n] / us
                                       for (i, rows, n), us in times.items() if i == "gpu_ops"]))
                for impl in timed if impl != "gpu_ops"}
    return shares, speedups


def bandwidth_figure(records, dtype="bfloat16"):
    """Bars of each implementation's fraction of the copy bandwidth, per case
    of `dtype`, forward and forward + backward side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    for ax, op, title in zip(axes, ("fwd", "fwd_bwd"), ("forward", "forward + backward")):
        mine = [r for r in records if r["op"] == op and r["dtype"] == dtype]
        cases = sorted({(r["rows"], r["row_len"]) for r in mine})
        at = np.arange(len(cases))
        timed = [impl for impl in IMPLS if any(r["impl"] == impl for r in mine)]
        width = 0.8 / len(timed)
        for i, impl in enumerate(timed):
            value = {(r["rows"], r["row_len"]): of_copy(r) for r in mine if r["impl"] == impl}
            ax.bar(at + (i - (len(timed) - 1) / 2) * width, [value.get(c, 0) for c in cases],
                   width=width, label=impl, color=f"C{IMPLS.index(impl)}")
        ax.axhline(1.0, color="black", linewidth=1, label="copy")
        ax.set_xticks(at, [f"{r}x{c}" for r, c in cases], rotation=60)
        ax.set(title=f"{records[0]['device']} ({records[0]['commit'][:7]}): {title}, {dtype}",
               xlabel="rows x row length", ylim=(0, 1.4))
    axes[0].set_ylabel("fraction of the copy bandwidth")
    axes[0].legend(loc="upper left", ncol=3, fontsize="small")
    fig.tight_layout()


def model_shape_runs():
    """{short device name: the records of its latest model-shape run}
    (rms_norm_bench.py --cases model)."""
    return {_short_name(records[0]["device"]): records
            for records in (json.loads(p.read_text())
                            for p in sorted(RESULTS.glob("model_shapes_*.json")))}


def speedups_over_xla(records, op):
    """{(dtype, rows, row_len): XLA's time / gpu_ops' time} of `op`."""
    times = {(r["impl"], r["dtype"], r["rows"], r["row_len"]): r["median_us"]
             for r in records if r["op"] == op}
    return {(dtype, rows, n): times["xla", dtype, rows, n] / us
            for (impl, dtype, rows, n), us in times.items() if impl == "gpu_ops"}


def model_shape_family(rows, row_len):
    """Where a model calls the norm on rows x row_len: QK-norm (rows of at
    most 256 values, a head's), decoding (at most 64 rows: a token a
    sequence), or prefill and training (more rows of a hidden size)."""
    if row_len <= 256:
        return "QK-norm"
    return "decoding" if rows <= 64 else "prefill and training"


def model_shape_summary(records):
    """[(op, dtype, family, the least and the most times XLA's time gpu_ops'
    is, how many cases gpu_ops is slower in, how many cases)] of a
    model-shape run, in the order of ops, dtypes and families."""
    groups = {}
    for op in ("fwd", "fwd_bwd"):
        for (dtype, rows, n), speedup in speedups_over_xla(records, op).items():
            groups.setdefault((op, dtype, model_shape_family(rows, n)), []).append(speedup)
    families = ("decoding", "QK-norm", "prefill and training")
    return [(op, dtype, family, min(s), max(s), sum(x < 1 for x in s), len(s))
            for (op, dtype, family), s in sorted(
                groups.items(), key=lambda g: (g[0][0], g[0][1], families.index(g[0][2])))]


def model_shape_figure(records):
    """gpu_ops' speed over XLA's on the model-shape set, against the rows a
    call normalises: hidden sizes and QK-norm's head sizes (rows of at most
    256 values) side by side, forward above forward + backward; bfloat16
    solid, bfloat16 x with a float32 weight dashed. Above 1, gpu_ops is faster."""
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), sharex="col", sharey="row")
    for row, (op, title) in enumerate((("fwd", "forward"), ("fwd_bwd", "forward + backward"))):
        speedups = speedups_over_xla(records, op)
        for col, (family, name) in enumerate(((lambda n: n > 256, "hidden size"),
                                              (lambda n: n <= 256, "head_dim (QK-norm)"))):
            ax = axes[row, col]
            lengths = sorted({n for _, _, n in speedups if family(n)})
            for i, length in enumerate(lengths):
                label = f"{length}"  # on the first line of this length
                for dtype, style in (("bfloat16", "-"), ("bfloat16/float32", "--")):
                    points = sorted((rows, s) for (d, rows, n), s in speedups.items()
                                    if d == dtype and n == length)
                    if points:
                        ax.plot(*zip(*points), style, marker="o", color=f"C{i}", label=label)
                        label = None
            ax.axhline(1.0, color="black", linewidth=1)
            ax.set(xscale="log", title=f"{title}, by {name}")
            ax.legend(title=name, fontsize="small", ncol=2)
        axes[row, 0].set_ylabel("XLA's time / gpu_ops' time")
    for ax in axes[1]:
        ax.set_xlabel("rows (tokens; for QK-norm, tokens x heads)")
    fig.suptitle(f"{records[0]['device']}: the model-shape set (dashed: float32 weight)")
    fig.tight_layout()
    return fig
