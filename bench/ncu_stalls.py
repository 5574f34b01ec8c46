"""Warp stall samples of one kernel from Nsight Compute's source page: the
total per stall reason and the SASS instructions with the most samples.

  ncu --set full --clock-control none -o REPORT ...   (see docs/GPU.md)
  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > src.csv
  python3 bench/ncu_stalls.py src.csv [--top 25]

The CSV may be xz-compressed (src.csv.xz). Runs anywhere (no GPU, no
torch); docs/perf/*-ncu-stalls.txt are its output.
"""
import argparse
import csv
import io
import lzma
import sys


def read_rows(path):
    """The kernel name and the instruction rows (dicts) of the source CSV."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    lines = text.splitlines()
    if not lines or not lines[0].startswith('"Kernel Name"'):
        sys.exit(f"{path}: not an ncu --page source --csv file (no \"Kernel Name\" line)")
    kernel = next(csv.reader([lines[0]]))[1]
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))
    return kernel, rows


def number(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (.csv or .csv.xz)")
    ap.add_argument("--top", type=int, default=25, help="how many instructions to list")
    args = ap.parse_args()
    kernel, rows = read_rows(args.csv)
    reasons = [c for c in (rows[0].keys() if rows else [])
               if c.startswith("stall_") and not c.endswith("(Not Issued)")]
    totals = {r: sum(number(row[r]) for row in rows) for r in reasons}
    all_samples = sum(number(row["Warp Stall Sampling (All Samples)"]) for row in rows)
    print(f"kernel: {kernel}")
    print("warp stall samples by reason (all samples):")
    for reason, n in sorted(totals.items(), key=lambda kv: -kv[1]):
        if n:
            print(f"  {reason:30s} {n:8d} {100 * n / max(all_samples, 1):5.1f}%")
    print(f"total samples {all_samples}")
    print(f"top {args.top} SASS instructions by samples:")
    ranked = sorted(rows, key=lambda row: -number(row["Warp Stall Sampling (All Samples)"]))
    for row in ranked[:args.top]:
        n = number(row["Warp Stall Sampling (All Samples)"])
        print(f"  {n:7d} {100 * n / max(all_samples, 1):5.1f}% {row['Source'].strip()}")


if __name__ == "__main__":
    main()
