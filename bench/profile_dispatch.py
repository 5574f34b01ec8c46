"""Where the host time of one cached fa3.attention call goes: each step of the
eager path (python/fa3/_torch.py) timed alone, in the same process and on
the same small shape, as bench/bench_dispatch.py times the whole call.

Each row is the median over 25 loops of 200 calls (far below the launch
queue's depth) between torch.cuda.synchronize() calls, in microseconds per
call. Rows that launch a kernel include the driver's launch; the GPU work of
these shapes is shorter than the host time, so the host bounds them.

Usage: python bench/profile_dispatch.py [--out DIR]   (writes DIR/profile-dispatch.txt)
"""
import argparse
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import fa3  # noqa: E402
from bench_dispatch import host_us  # noqa: E402  (the same timing as the whole-call benchmark)
from fa3 import _torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    b, s, h, d = 1, 128, 16, 64
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    fa3.attention(q, k, v)
    fa3.attention(qg, kg, vg).sum().backward()
    plan = _torch._plan(q, k, v, False, None, (-1, -1), 0.0)
    out = torch.empty(plan.out_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=q.device)
    ptrs = [x.data_ptr() for x in (q, k, v, out, lse)]
    stream = _torch._raw_stream(0)
    launch = plan.fwd.launch
    kernel = fa3.compile("bf16", h, d)
    do = torch.randn_like(q)
    _torch._forward(plan, q, k, v)

    rows = [
        ("C API launch through pybind (precomputed pointers)", lambda: launch(*ptrs, b, s, s, stream)),
        ("raw current stream", lambda: _torch._raw_stream(0)),
        ("plan lookup (_torch._plan)", lambda: _torch._plan(q, k, v, False, None, (-1, -1), 0.0)),
        ("2 x torch.empty (out, lse)", lambda: (torch.empty(plan.out_shape, dtype=q.dtype, device=q.device),
                                                torch.empty(plan.lse_shape, dtype=torch.float32,
                                                            device=q.device))),
        ("2 x q.new_empty (out, lse)", lambda: (q.new_empty(plan.out_shape),
                                                q.new_empty(plan.lse_shape, dtype=torch.float32))),
        ("3 x contiguous() + 5 x data_ptr()", lambda: ([x.contiguous() for x in (q, k, v)],
                                                        [x.data_ptr() for x in (q, k, v, out, lse)])),
        ("_torch._forward (all of the above)", lambda: _torch._forward(plan, q, k, v)),
        ("Kernel.launch_into (checked public launch)", lambda: kernel.launch_into(q, k, v, out, lse)),
        ("fa3.attention, no grad", lambda: fa3.attention(q, k, v)),
        ("fa3.attention, no grad, return_lse=True", lambda: fa3.attention(q, k, v, return_lse=True)),
        ("torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing),
        ("fa3.attention, requires_grad (autograd.Function)", lambda: fa3.attention(qg, kg, vg)),
        ("_torch._backward (dq/dk/dv, workspace, 3 launches)",
         lambda: _torch._backward(plan, do, q, k, v, out, lse)),
        ("fa3.attention + out.backward(do) (autograd engine)",
         lambda: fa3.attention(qg, kg, vg).backward(do)),
    ]
    lines = [f"profile_dispatch: B={b} S={s} H={h} d={d} bf16, {torch.cuda.get_device_name()}, "
             f"torch {torch.__version__}", ""]
    for name, fn in rows:
        fn()
        lines.append(f"{host_us(fn):8.2f} us  {name}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(args.out) / "profile-dispatch.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
