"""Prints the SASS lines of `ncu --page source --print-source sass --csv` (stdin) with the most warp-stall samples.

    ncu --import REPORT --page source --print-source sass --csv | python3 top_stalls.py 25
"""
import csv
import sys


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    text = sys.stdin.read()
    start = text.find('"')  # ncu may print lines before the table
    rows = list(csv.reader(text[start:].splitlines()))
    if not rows:
        print(text[:2000])
        return
    header, body = rows[0], rows[1:]
    samples = next((i for i, name in enumerate(header) if name.startswith("Warp Stall Sampling (All")), None)
    if samples is None:
        print("no stall-sampling column; header:", header)
        return
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
