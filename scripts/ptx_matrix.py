#!/usr/bin/env python3
"""The PTX of a matrix of fa3's Hopper kernels, for refactoring the kernel
builders without a GPU: dump it before a change, dump it after, compare.

    python3 scripts/ptx_matrix.py dump /tmp/before     # at the old commit
    python3 scripts/ptx_matrix.py dump /tmp/after      # after the change
    python3 scripts/ptx_matrix.py compare /tmp/before /tmp/after

The matrix: the bf16/f16 forward at d64/128/256, causal or not, in every
kernel structure of fa3.schedules (WS, pingpong, overlap, persistent, ...)
and in the length buckets fa3.attention picks for four (Sq, Sk); the
backward; the FP8 forward. `compare` reports kernels whose PTX differs in
anything but the `// begin/end inline asm` comment lines (which only say
where an instruction came from), and separately those equal up to a
consistent renumbering of virtual registers and labels, and those that
differ otherwise (two independent instructions in another order, say) but
which ptxas assembles to the same cubin. Such kernels run the same
machine code, so a change that keeps every kernel in one of these classes
needs no GPU run; any other difference does. `compare` takes any two
directories of .ptx files, e.g. two dumps of scripts/dump-hopper-ptx.sh.
Needs the built extension (`bash scripts/build.sh`) to dump, ptxas
(`$FA3_PTXAS`, on the PATH or in /usr/local/cuda/bin) for the cubin
check, and no GPU.
"""

import argparse
import itertools
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]


def dump(out):
    # A fresh kernel cache: every kernel compiles.
    os.environ["FA3_CACHE_DIR"] = tempfile.mkdtemp(prefix="fa3-ptx-matrix-")
    sys.path.insert(0, str(REPO / "python"))
    from fa3 import _jit, schedules
    from fa3._spec import AttentionSpec

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    count = 0

    def write(name, kernel):
        nonlocal count
        (out / f"{name}.ptx").write_text(kernel.ptx)
        count += 1

    for dtype, d, causal in itertools.product(("bf16", "f16"), (64, 128, 256), (False, True)):
        spec = AttentionSpec(dtype=dtype, num_heads=8, num_kv_heads=2, head_dim=d, head_dim_v=d, causal=causal,
                             scale=0.125)
        for structure in schedules.STRUCTURES:
            if structure == "n176_overlap" and d != 128:
                continue
            write(f"fwd-{dtype}-d{d}-causal{int(causal)}-{structure}",
                  _jit.get(spec, "ptx", "fwd", schedule=schedules.hopper_forward(d, structure)))
        for sq, sk in ((197, 197), (512, 512), (8192, 8192), (8192, 512)):
            write(f"bucket-{dtype}-d{d}-causal{int(causal)}-{sq}x{sk}",
                  _jit.get(spec, "ptx", "fwd", schedule=_jit.forward_schedule(spec, sq, sk)))
        write(f"bwd-{dtype}-d{d}-causal{int(causal)}", _jit.get(spec, "ptx", "bwd"))
    for d, causal in itertools.product((64, 128, 256), (False, True)):
        spec = AttentionSpec(dtype="f8E4M3FN", num_heads=8, num_kv_heads=2, head_dim=d, head_dim_v=d,
                             causal=causal, scale=0.125)
        write(f"fp8-d{d}-causal{int(causal)}", _jit.get(spec, "ptx", "fwd"))
    print(f"{count} kernels in {out}")


def _code(path):
    return [line for line in path.read_text().splitlines() if "inline asm" not in line]


_NAME = re.compile(r"(%rd|%rs|%r|%p|%fd|%f|\$L__BB)([0-9_]+)")


def _renamed(lines):
    """`lines` with every virtual register and label renamed by its first
    appearance (%r7 first seen third among the %r becomes %r#2): two PTX
    texts equal after this differ only in the numbering the compiler chose,
    which is a consistent renaming, so they compute the same."""
    seen = {}

    def canonical(m):
        if m.group(0) not in seen:
            seen[m.group(0)] = f"{m.group(1)}#{sum(k.startswith(m.group(1) + '#') for k in seen.values())}"
        return seen[m.group(0)]

    return [_NAME.sub(canonical, line) for line in lines]


def _ptxas():
    """CUDA's ptxas, or None."""
    for candidate in (os.environ.get("FA3_PTXAS"), shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def _same_cubin(ptxas, a, b):
    """Whether ptxas assembles PTX files `a` and `b` for sm_90a to the same
    bytes (False if either fails to assemble)."""
    with tempfile.TemporaryDirectory() as tmp:
        cubins = []
        for i, path in enumerate((a, b)):
            out = pathlib.Path(tmp) / f"{i}.cubin"
            if subprocess.run([ptxas, "-arch=sm_90a", str(path), "-o", str(out)], capture_output=True).returncode:
                return False
            cubins.append(out.read_bytes())
        return cubins[0] == cubins[1]


def compare(before, after, ptxas=None):
    """Prints each kernel that is missing on one side, differs, is equal only
    up to register numbering, or differs in its PTX but assembles (with
    `ptxas`, default: _ptxas()) to the same cubin; returns 1 if any is
    missing or differs."""
    before, after = pathlib.Path(before), pathlib.Path(after)
    ptxas = ptxas or _ptxas()
    names = sorted({p.name for p in before.glob("*.ptx")} | {p.name for p in after.glob("*.ptx")})
    missing = [n for n in names if not (before / n).exists() or not (after / n).exists()]
    unequal = [n for n in names if n not in missing and _code(before / n) != _code(after / n)]
    renamed = [n for n in unequal if _renamed(_code(before / n)) == _renamed(_code(after / n))]
    assembled = [n for n in unequal if n not in renamed and ptxas and _same_cubin(ptxas, before / n, after / n)]
    changed = [n for n in unequal if n not in renamed and n not in assembled]
    for n in missing:
        print(f"only in one directory: {n}")
    for n in changed:
        print(f"differs: {n}")
    for n in renamed:
        print(f"equal up to register numbering: {n}")
    for n in assembled:
        print(f"same cubin: {n}")
    print(f"{len(names) - len(missing) - len(unequal)} of {len(names)} kernels identical, "
          f"{len(renamed)} equal up to register numbering, {len(assembled)} with the same cubin"
          + ("" if ptxas else " (no ptxas: cubins not compared)"))
    return 1 if missing or changed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dump").add_argument("dir")
    cmp = sub.add_parser("compare")
    cmp.add_argument("before")
    cmp.add_argument("after")
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.dir)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
