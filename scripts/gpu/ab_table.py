"""The table of an A/B benchmark (scripts/gpu/run.sh ab-bench): fa3's
TFLOP/s with this bundle's libfa3.so and with another, over rounds that
alternate the two (this, other, this, other, ...), and the change of the
means. One process per side and round: the same kernels moved by up to ±5%
between two processes on an H100 (docs/Performance.md, 2026-12-06), so
several alternating rounds tell a small change from that spread.

  python3 scripts/gpu/ab_table.py AB_DIR ROUNDS

reads AB_DIR/this-R/bench.json and AB_DIR/other-R/bench.json for R = 1..ROUNDS.
"""
import json
import pathlib
import sys


def key(row):
    return (row["direction"], row["d"], row["causal"], row["seqlen"], row.get("shape", ""))


def columns(row):
    """The FP8 rows (--fp8) compare fa3_fp8, the others fa3 and, where the
    backward measured it, fa3_deterministic (its own line, "bwd det")."""
    if row["direction"] == "fwd-fp8":
        return ["fa3_fp8"]
    return ["fa3"] + (["fa3_deterministic"] if "fa3_deterministic" in row else [])


def load(path):
    rows = json.loads(pathlib.Path(path).read_text())["rows"]
    return {key(r): r for r in rows if "d" in r}  # not the FP8 GEMM row


def table(this_runs, other_runs):
    """Markdown lines: per shape each round's value of both sides, the change
    of the means and cuDNN's mean over every run."""
    n = len(this_runs)
    lines = ["| direction | d | causal | B x H x S | schedule | other (rounds) | this (rounds) | change | cuDNN |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k, first in this_runs[0].items():
        for col in columns(first):
            sides = []
            for runs in (other_runs, this_runs):
                values = [r.get(k, {}).get(col) for r in runs]
                sides.append(values if all(values) else None)
            if not all(sides):
                continue
            other, this = sides
            mean_other, mean_this = sum(other) / n, sum(this) / n
            cudnn = [r[k]["cudnn"] for r in this_runs + other_runs if "cudnn" in r.get(k, {})]
            cudnn_text = f"{sum(cudnn) / len(cudnn):.0f}" if cudnn else "n/a"
            direction = first["direction"] + (" det" if col == "fa3_deterministic" else "")
            lines.append(f"| {direction} | {first['d']} | {first['causal']} | "
                         f"{first['batch']}x{first['heads']}x{first['seqlen']} | {first.get('fa3_schedule')} | "
                         f"{' / '.join(f'{v:.0f}' for v in other)} | {' / '.join(f'{v:.0f}' for v in this)} | "
                         f"{100 * (mean_this / mean_other - 1):+.1f}% | {cudnn_text} |")
    return lines


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ab_dir, rounds = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    runs = {side: [load(ab_dir / f"{side}-{r}" / "bench.json") for r in range(1, rounds + 1)]
            for side in ("this", "other")}
    print("\n".join(table(runs["this"], runs["other"])))


if __name__ == "__main__":
    main()
