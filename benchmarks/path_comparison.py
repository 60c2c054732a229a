"""Each CUDA kernel path against the one the planner takes without it.

    python benchmarks/rms_norm_bench.py --compare-paths --out FILE [--cases main|paths] [...]

For every path of gpu_ops.kernel_plans.PATHS but the general kernels (which
take every input and cannot be left out), the cases whose forward or
backward plan takes the path are timed again with it left out (``--without``),
in a process of its own: XLA replays recorded calls without asking the
handlers again, so a plan setting needs a fresh process. The run with every
path, also a process of its own, times gpu_ops and XLA; the runs without one
path time gpu_ops. One comparison row per case, op and left-out path says
the time with and without it, the paths planned each way, XLA's time and the
gain; a path earns its place where it gains in a case users meet.
"""

import json
import os
import pathlib
import subprocess
import sys

from gpu_ops import kernel_plans

HARNESS = pathlib.Path(__file__).with_name("rms_norm_bench.py")


def leavable_paths():
    """The paths a run can leave out: all but the general kernels."""
    return kernel_plans.PATHS[:-1]


def cases_taking(path, cases, plan):
    """The cases of `cases` whose plan (``plan(case)``: {direction: path})
    takes `path` in either direction."""
    return [case for case in cases if path in plan(case).values()]


def _case_arguments(cases):
    return [arg for dtype, rows, row_len in cases
            for arg in ("--case", dtype, str(rows), str(row_len))]


def _measure(cases_kind, cases, impls, out, timing, without=None):
    """One harness run in a fresh process; its records."""
    command = [sys.executable, str(HARNESS), "--cases", cases_kind, "--impl", *impls,
               "--out", str(out), *timing, *_case_arguments(cases)]
    if without:
        command += ["--without", without]
    # This process already holds the GPU; each run allocates as it goes.
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    subprocess.run(command, check=True, env=env)
    return json.loads(out.read_text())


def _key(record):
    return record["op"], record["dtype"], record["rows"], record["row_len"]


def comparison(with_every_path, without):
    """Rows comparing each left-out path's records (`without`: {path:
    records}) with the records of the run with every path."""
    ours = {_key(r): r for r in with_every_path if r["impl"] == "gpu_ops"}
    xla = {_key(r): r for r in with_every_path if r["impl"] == "xla"}
    rows = []
    for path, records in without.items():
        for r in records:
            kept = ours[_key(r)]
            rows.append({"op": r["op"], "dtype": r["dtype"], "rows": r["rows"],
                         "row_len": r["row_len"], "left_out": path,
                         "plan_with": kept["plan"], "plan_without": r["plan"],
                         "with_us": kept["median_us"], "without_us": r["median_us"],
                         "xla_us": xla[_key(r)]["median_us"],
                         "gain": round(r["median_us"] / kept["median_us"] - 1, 4)})
    return rows


def row_line(row):
    """One comparison row as the run prints it."""
    shape = f"{row['rows']} x {row['row_len']}"
    return (f"{row['left_out']:14} {row['op']:8} {row['dtype']:9} {shape:15} "
            f"with {row['with_us']:9.1f} us  without {row['without_us']:9.1f} us  "
            f"xla {row['xla_us']:9.1f} us  gain {row['gain']:+.1%}")


def compare_paths(cases_kind, cases, out, timing, plan):
    """Times every leavable path against its alternative over the cases
    that take it; writes the records and the comparison to `out`."""
    scratch = out.with_suffix(".runs")
    scratch.mkdir(exist_ok=True)
    with_every_path = _measure(cases_kind, cases, ["gpu_ops", "xla"],
                               scratch / "with_every_path.json", timing)
    without = {}
    for path in leavable_paths():
        taking = cases_taking(path, cases, plan)
        if taking:
            without[path] = _measure(cases_kind, taking, ["gpu_ops"],
                                     scratch / f"without_{path}.json", timing, without=path)
    rows = comparison(with_every_path, without)
    out.write_text(json.dumps({"with_every_path": with_every_path, "without": without,
                               "comparison": rows}, indent=1) + "\n")
    for row in rows:
        print(row_line(row))
    print(f"wrote {len(rows)} comparisons to {out}")
    return rows
