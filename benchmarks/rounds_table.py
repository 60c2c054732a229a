"""Joins rounds of rms_norm_bench.py, run one after another, and tables their spread.

    python benchmarks/rounds_table.py ROUND.json ... --out JOINED.json > LOG

A single run of a case near its target can fall on either side of it; rounds
on one machine show how far the case moves between runs. Writes the rounds'
records into one file, in round order, each with its round number (from 1),
and prints each round as the benchmark printed it (with two decimals), then,
for each case, gpu_ops' fraction of the copy bandwidth and its speed against
XLA's (XLA's time over gpu_ops') in each round, with their median.
"""

import argparse
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from rms_norm_bench import record_line  # noqa: E402


def join(rounds):
    """The records of each round (a list of records), numbered by round."""
    return [{**r, "round": i} for i, records in enumerate(rounds, 1) for r in records]


def case_key(record):
    return record["op"], record["dtype"], record["rows"], record["row_len"]


def spread(records):
    """{case: (fractions of copy, times XLA's speed)}, one value per round, for gpu_ops."""
    by_round = {(r["round"], r["impl"], case_key(r)): r for r in records}
    table = {}
    for r in records:
        if r["impl"] != "gpu_ops":
            continue
        fractions, speedups = table.setdefault(case_key(r), ([], []))
        fractions.append(r["gbps"] / r["copy_gbps"])
        xla = by_round.get((r["round"], "xla", case_key(r)))
        if xla:
            speedups.append(xla["median_us"] / r["median_us"])
    return table


def lines(records):
    """The log: each round's records, then the spread of each case."""
    out, last_round = [], None
    for r in records:
        if r["round"] != last_round:
            out.append(f"{r['device']}: copy bandwidth {r['copy_gbps']:.0f} GB/s (round {r['round']})")
            last_round = r["round"]
        out.append(record_line(r, decimals=2))
    table = spread(records)

    def row(case, values, fmt):
        op, dtype, rows, row_len = case
        shown = " ".join(format(v, fmt) for v in values)
        return (f"{op:8} {dtype:9} {rows:6} x {row_len:<7} {shown}  "
                f"min {min(values):{fmt}} median {statistics.median(values):{fmt}} "
                f"max {max(values):{fmt}}")

    out.append("== gpu_ops' fraction of the copy bandwidth by round, % (one decimal)")
    out += [row(case, [100 * f for f in fractions], ".1f")
            for case, (fractions, _) in table.items()]
    out.append("== gpu_ops' speed against XLA's by round (XLA's time over gpu_ops', three decimals)")
    out += [row(case, speedups, ".3f") for case, (_, speedups) in table.items() if speedups]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=pathlib.Path, nargs="+",
                        help="rms_norm_bench.py's results files, in the order they ran")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the joined JSON file")
    args = parser.parse_args(argv)
    records = join(json.loads(path.read_text()) for path in args.rounds)
    args.out.write_text(json.dumps(records, indent=1) + "\n")
    print("\n".join(lines(records)))


if __name__ == "__main__":
    sys.exit(main())
