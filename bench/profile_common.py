"""What bench/profile_forward.py and bench/profile_backward.py share: their
common arguments and the FA3-paper shape of (d, seqlen) they launch on
(16k tokens a batch, 2048 / d heads, as bench_attention.py's rows)."""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# fa3 (python/) and bench_attention (bench/) for the profiling scripts.
for path in (ROOT / "python", ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def profile_parser(cudnn_help):
    """--d, --seqlen, --causal, --cudnn and --launches; callers add more."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--cudnn", action="store_true", help=cudnn_help)
    ap.add_argument("--launches", type=int, default=4)
    return ap


def paper_shape(args):
    """(batch, heads, seqlen, head dim) of the FA3 paper's benchmark."""
    s, d = args.seqlen, args.d
    return 16384 // s, 2048 // d, s, d
