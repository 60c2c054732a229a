"""Prints the SASS lines of `ncu --page source --print-source sass --csv` (stdin) with the most warp-stall samples.

    ncu --import REPORT --page source --print-source sass --csv | python3 top_stalls.py 25
"""
import csv
import sys


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    text = sys.stdin.read()
    rows = list(csv.reader(text.splitlines()))
    # ncu prints the kernel's name before the table: the header is the first
    # row with a stall-sampling column.
    at = next((k for k, row in enumerate(rows)
               if any(name.startswith("Warp Stall Sampling (All") for name in row)), None)
    if at is None:
        print("no stall-sampling column in:", text[:2000])
        return
    header, body = rows[at], rows[at + 1:]
    samples = next(i for i, name in enumerate(header) if name.startswith("Warp Stall Sampling (All"))
    keep = [i for i, name in enumerate(header)
            if name in ("Address", "Source") or name.startswith("Warp Stall Sampling")]
    print(" | ".join(header[i] for i in keep))
    total = sum(float(r[samples] or 0) for r in body if len(r) > samples)
    print(f"total samples: {total:.0f}")
    body.sort(key=lambda r: -float(r[samples] or 0) if len(r) > samples else 0)
    for r in body[:count]:
        print(" | ".join(r[i] for i in keep if i < len(r)))


if __name__ == "__main__":
    main()
