"""fa3's attention forward and backward beside PyTorch SDPA (cuDNN and FLASH
backends) on the FA3-paper shapes: 16k tokens (batch = 16384 // seqlen),
hidden 2048 (heads = 2048 // headdim), bf16, causal and not. FLOPs: forward
4·B·H·S²·D, backward 2.5 × that, halved when causal. Timings are medians of
device-event timed runs after warm-up, all in this process through
triton.testing.do_bench (its L2 flush between runs): fa3 through its C API
(`fa3.compile_mlir` kernels of fa3._fa3 over libfa3.so's C API, launched into
preallocated buffers on torch's current stream), the
peers through torch.

Each cell times ~100 ms of calls. On a GPU at its power limit (an H100
under this load) that is short enough for the clock to depend on what ran
just before: byte-identical kernels move by up to ±7% from run to run, and
fa3 and cuDNN, equal under ncu and in 4-second windows, came out 0.86-1.09
apart at d128 4k (docs/Performance.md, 2026-12-07). Decide between kernels
with alternating rounds (scripts/gpu/run.sh ab-bench) or
bench/bench_sustained.py, not one table.

Backward timing, measuring only the backward and subtracting nothing:
* fa3: one GradKernel.launch (every kernel of fa3_launch_attention_grad,
  its preprocessing and dQ conversion included) with preallocated dQ, dK,
  dV and workspace; O and LSE come from fa3's forward, run once before.
* cuDNN / FLASH: one SDPA forward under sdpa_kernel([backend]) with
  requires_grad inputs, run once; each timed call is
  torch.autograd.grad(out, (q, k, v), dO, retain_graph=True): the backend's
  backward kernels (its dO·O preprocessing and dQ conversion included) and
  autograd's host dispatch, no forward (as shared/bench/peers.py does).
The backward rows' sanity columns: fa3's dQ, dK, dV against the peer's
(cuDNN's, else FLASH's) on the same inputs, max abs difference.

Decode (--decode): B = 32 (the inference issue's shape), then the small
batches B = 1 and 4, where split-KV matters: the fa3.attention_kvcache
kernel in one split and in fa3's choice of splits (num_splits=0's rule, the
chosen N printed and in the table) beside cuDNN and FLASH.

Packed batches (--varlen): fa3.attention_varlen on 10 sequences of mixed
lengths (256 ... 4096, 16256 tokens, H = 16, d128) beside SDPA cuDNN and
FLASH on the same tokens padded to the longest, useful TFLOP/s, forward and
backward (the backward timed as above).

Usage: python bench/bench_attention.py [--out DIR] [--quick] [--fwd-only | --bwd-only | --fp8 | --tiles | --decode | --varlen]
       [--dims 64,128] [--seqlens 2048,8192] [--variants ws_overlap,...] [--no-vit]
Writes DIR/bench.json (rows with direction "fwd", "bwd", "decode", ...), DIR/bench.md
(one table per direction) and DIR/bench.png.
"""
import argparse
import dataclasses
import datetime
import itertools
import json
import pathlib
import re

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

ROOT = pathlib.Path(__file__).resolve().parents[1]
import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "python"))
import fa3  # noqa: E402
from fa3 import _jit, schedules  # noqa: E402
from fa3._spec import AttentionSpec  # noqa: E402


def flops(b, h, s, d, causal):
    return 4.0 * b * h * s * s * d / (2 if causal else 1)


def grad_flops(b, h, s, d, causal):
    return 2.5 * flops(b, h, s, d, causal)


def schedule_variants(d, only=None):
    """The A/B columns, each the cost model's tiles for head dim d with one
    choice changed (fa3.schedules): `no_ws` the kernel without a producer
    warpgroup, `ws_no_pp` warp specialization without pingpong (two
    consumers only), `ws_overlap` / `ws_no_overlap` with intra-warpgroup
    overlap switched on (d64, whose default lacks it) or off (d128, d256),
    `persistent` the default on a persistent grid, at d128
    `n176_overlap` FlashAttention-3's non-causal 128 x 176 tile with
    overlap, and when asked for by name `default` (the cost model's
    schedule for a dynamic length: the baseline of the columns, where the
    "fa3" column is the length bucket's kernel) and `lazy_rescale`
    (rescale_threshold = 8)."""
    default = schedules.hopper_forward_fields(d)
    names = ["no_ws", "ws_no_overlap" if default["intra_wg_overlap"] else "ws_overlap", "persistent"]
    if default["consumer_wgs"] == 2:
        names.insert(1, "ws_no_pp")
    if d == 128:
        names.append("n176_overlap")
    if only is not None:
        # Columns only asked for by name: the baseline and lazy rescaling.
        names += [name for name in ("default", "lazy_rescale") if name in only]
        names = [name for name in names if name in only]
    return {name: schedules.hopper_forward(d, name) for name in names}


def describe(schedule):
    """A short name of a `#fa3.schedule<...>` string: block_m x block_n, and
    "p" for a persistent grid."""
    fields = dict(re.findall(r"(\w+) = (\w+)", schedule or ""))
    if not fields:
        return "compiler's"
    return f"{fields['block_m']}x{fields['block_n']}" + ("p" if fields["persistent"] == "true" else "")


def mlir_for(h, d, causal, schedule=None):
    t = f"tensor<?x?x{h}x{d}xbf16>"
    lt = f"tensor<?x{h}x?xf32>"
    attrs = (["causal"] if causal else []) + ([f"schedule = {schedule}"] if schedule else [])
    a = " {" + ", ".join(attrs) + "}" if attrs else ""
    return (f"func.func @attn(%q: {t}, %k: {t}, %v: {t}) -> ({t}, {lt}) {{\n"
            f"  %o, %lse = fa3.attention %q, %k, %v{a} : ({t}, {t}, {t}) -> ({t}, {lt})\n"
            f"  return %o, %lse : {t}, {lt}\n}}\n")


def mlir_gqa_for(hq, hkv, d, causal=False, pack_gqa=False, schedule=None):
    """`@attn` for GQA (hq query heads over hkv key/value heads), optionally
    with PackGQA and a schedule."""
    qt, kt = f"tensor<?x?x{hq}x{d}xbf16>", f"tensor<?x?x{hkv}x{d}xbf16>"
    lt = f"tensor<?x{hq}x?xf32>"
    attrs = (["causal"] if causal else []) + (["pack_gqa"] if pack_gqa else []) + \
        ([f"schedule = {schedule}"] if schedule else [])
    a = " {" + ", ".join(attrs) + "}" if attrs else ""
    return (f"func.func @attn(%q: {qt}, %k: {kt}, %v: {kt}) -> ({qt}, {lt}) {{\n"
            f"  %o, %lse = fa3.attention %q, %k, %v{a} : ({qt}, {kt}, {kt}) -> ({qt}, {lt})\n"
            f"  return %o, %lse : {qt}, {lt}\n}}\n")


def _decode_peers(q, k, v, row, record):
    """SDPA cuDNN and FLASH on a decode shape, with enable_gqa (else on K/V
    expanded to Hq heads, said in the row): recorded as "cudnn" and
    "flash"; returns the first one's output [B, Sq, Hq, D] in f32 (None if
    neither ran)."""
    ref = None
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        for expanded in (False, True):
            try:
                if expanded:
                    ke, ve = (x.repeat_interleave(group, 1) for x in (kt, vt))

                    def fn():
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(qt, ke, ve)
                else:
                    def fn():
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
                out = fn()
                record(name, do_bench(fn, warmup=25, rep=100, return_mode="median"))
                row[name + "_kv"] = "expanded" if expanded else "gqa"
                if ref is None:
                    ref = out.transpose(1, 2).float()
                break
            except Exception as e:  # noqa: BLE001
                row[name + "_error"] = repr(e)[:200]
    return ref


def bench_decode_small(sk, b, sq=1, hq=32, hkv=8, d=128, dev="cuda"):
    """One small-batch decode row (B·Hkv well below the SMs: B = 1 gives 8
    packed tiles): the fa3.attention_kvcache kernel on K/V as a full
    contiguous cache in one split ("fa3_kvcache") and in fa3's choice of
    splits ("fa3_splits": num_splits=0's rule, N in the row; partial
    attentions into a preallocated workspace, then the merge kernel, both
    timed), beside SDPA cuDNN and FLASH; microseconds and K/V TB/s as
    bench_decode."""
    from fa3 import _kvcache_cuda  # noqa: PLC0415

    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, sk, hkv, d, device=dev, dtype=torch.bfloat16)
    kv_bytes = 2 * b * sk * hkv * d * 2
    row = {"direction": "decode", "shape": "small-batch", "d": d, "seqlen_q": sq, "seqlen_k": sk, "batch": b,
           "heads": hq, "kv_heads": hkv}

    def record(name, ms):
        row[name + "_us"] = ms * 1e3
        row[name + "_tbps"] = kv_bytes / ms / 1e9

    ref = _decode_peers(q, k, v, row, record)
    # SDPA's default softmax scale, so the KV-cache kernels compute what the peers do.
    spec = AttentionSpec("bf16", hq, hkv, d, d, scale=d ** -0.5)
    pack = _jit.should_pack_gqa(spec, sq, sk) and 64 % (hq // hkv) == 0
    lens = torch.full((b,), sk, dtype=torch.int32, device=dev)
    stream = torch.cuda.current_stream().cuda_stream
    chosen = _kvcache_cuda.choose_num_splits(spec, pack, b, sq, sk, q.device.index)
    row["fa3_splits_n"] = chosen
    print(f"B={b} Sk={sk}: fa3 chooses num_splits = {chosen}", flush=True)
    for name, splits in (("fa3_kvcache", 1), ("fa3_splits", chosen)):
        try:
            kernel = _kvcache_cuda._kernel(spec, pack, sq, sk, q.device.index, num_splits=splits)
            o = torch.empty_like(q)
            lse = torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
            if splits > 1:
                workspace = torch.empty(max(kernel.forward_workspace_bytes(b, sq, sk), 256), dtype=torch.uint8,
                                        device=dev)

                def fn():
                    kernel.launch_kvcache_splits(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                                 lse.data_ptr(), lens.data_ptr(), workspace.data_ptr(), b, sq, sk,
                                                 stream)
            else:
                def fn():
                    kernel.launch_kvcache(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                          lens.data_ptr(), b, sq, sk, stream)
            record(name, do_bench(fn, warmup=25, rep=100, return_mode="median"))
            if ref is not None:
                row[name + "_max_abs_diff_vs_sdpa"] = (o.float() - ref).abs().max().item()
        except fa3.Error as e:
            row[name + "_error"] = str(e)[:300]
    best = min((row[n + "_us"] for n in ("fa3_kvcache", "fa3_splits") if row.get(n + "_us")), default=None)
    if row.get("cudnn_us") and best:
        row["fa3_over_cudnn"] = row["cudnn_us"] / best
    return row


def bench_decode(sk, sq=1, b=32, hq=32, hkv=8, d=128, dev="cuda"):
    """One decode-shaped forward row (the inference issue's shape: B = 32,
    one query, GQA 32:8, d128): microseconds and the K/V bytes read per
    second (B·Sk·Hkv·D·2 bytes each of K and V, read once). fa3: the kernel
    fa3.attention picks (PackGQA by its rule, the schedule for Sq·G rows),
    the same attention unpacked (A/B), and the fa3.attention_kvcache kernel
    on K/V as a full cache, contiguous and paged (pages of 64 keys in a
    shuffled order and in order, the same keys); peers: SDPA cuDNN and FLASH with enable_gqa
    (else on K/V expanded to Hq heads, said in the row)."""
    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, sk, hkv, d, device=dev, dtype=torch.bfloat16)
    kv_bytes = 2 * b * sk * hkv * d * 2
    row = {"direction": "decode", "d": d, "seqlen_q": sq, "seqlen_k": sk, "batch": b, "heads": hq,
           "kv_heads": hkv}

    def record(name, ms):
        row[name + "_us"] = ms * 1e3
        row[name + "_tbps"] = kv_bytes / ms / 1e9

    ref = _decode_peers(q, k, v, row, record)
    # SDPA's default softmax scale, so the KV-cache kernels compute what the peers do.
    spec = AttentionSpec("bf16", hq, hkv, d, d, scale=d ** -0.5)
    pack = _jit.should_pack_gqa(spec, sq, sk) and 64 % (hq // hkv) == 0
    for name, packed in (("fa3", pack), ("fa3_nopack", False)):
        if name == "fa3_nopack" and not pack:
            continue
        schedule = _jit.forward_schedule(dataclasses.replace(spec, pack_gqa=packed), sq, sk)
        try:
            kernel = fa3.compile_mlir(mlir_gqa_for(hq, hkv, d, pack_gqa=packed, schedule=schedule), "attn")
            o = torch.empty_like(q)
            lse = torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
            record(name, do_bench(lambda: kernel.launch_into(q, k, v, o, lse), warmup=25, rep=100,
                                  return_mode="median"))
            row[name + "_schedule"] = describe(schedule) + (" packed" if packed else "")
            if ref is not None:
                row[name + "_max_abs_diff_vs_sdpa"] = (o.float() - ref).abs().max().item()
        except fa3.Error as e:
            row[name + "_error"] = str(e)[:300]
    fa3.attention(q, k, v)
    record("fa3_attention", do_bench(lambda: fa3.attention(q, k, v), warmup=25, rep=100, return_mode="median"))
    # The same keys as a KV cache (every batch at its full length): the
    # fa3.attention_kvcache kernel, lengths read on the device.
    try:
        from fa3 import _kvcache_cuda  # noqa: PLC0415

        cache_kernel = _kvcache_cuda._kernel(spec, pack, sq, sk, q.device.index)
        lens = torch.full((b,), sk, dtype=torch.int32, device=dev)
        o = torch.empty_like(q)
        lse = torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
        stream = torch.cuda.current_stream().cuda_stream
        record("fa3_kvcache", do_bench(lambda: cache_kernel.launch_kvcache(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), lens.data_ptr(), b, sq, sk,
            stream), warmup=25, rep=100, return_mode="median"))
        if ref is not None:
            row["fa3_kvcache_max_abs_diff_vs_sdpa"] = (o.float() - ref).abs().max().item()
    except fa3.Error as e:
        row["fa3_kvcache_error"] = str(e)[:300]
    # The same keys again in pages of 64, handed out in a shuffled order
    # ("fa3_paged"), and in order ("fa3_paged_inorder": the table is the
    # identity, so the pages hold the contiguous cache's rows): the A/B that
    # separates the cost of scattered pages (TLB reach, DRAM locality) from
    # the paged kernel's own cost.
    for name, shuffled in (("fa3_paged", True), ("fa3_paged_inorder", False)):
        try:
            from fa3 import _kvcache_cuda  # noqa: PLC0415

            page_size = 64
            max_pages = -(-sk // page_size)
            num_pages = b * max_pages
            order = torch.randperm(num_pages, device=dev) if shuffled else torch.arange(num_pages, device=dev)
            table = order.view(b, max_pages).to(torch.int32).contiguous()
            kp = torch.zeros(num_pages, page_size, hkv, d, device=dev, dtype=torch.bfloat16)
            vp = torch.zeros_like(kp)
            pos = torch.arange(sk, device=dev)
            for i in range(b):
                kp[table[i, pos // page_size].long(), pos % page_size] = k[i]
                vp[table[i, pos // page_size].long(), pos % page_size] = v[i]
            paged_kernel = _kvcache_cuda._kernel(spec, pack, sq, max_pages * page_size, q.device.index, paged=True)
            lens = torch.full((b,), sk, dtype=torch.int32, device=dev)
            o = torch.empty_like(q)
            lse = torch.empty(b, hq, sq, device=dev, dtype=torch.float32)
            stream = torch.cuda.current_stream().cuda_stream
            record(name, do_bench(lambda: paged_kernel.launch_paged_kvcache(
                q.data_ptr(), kp.data_ptr(), vp.data_ptr(), o.data_ptr(), lse.data_ptr(), lens.data_ptr(),
                table.data_ptr(), b, sq, num_pages, page_size, max_pages, stream), warmup=25, rep=100,
                return_mode="median"))
            row[name + "_page_size"] = page_size
            if ref is not None:
                row[name + "_max_abs_diff_vs_sdpa"] = (o.float() - ref).abs().max().item()
            del kp, vp
        except fa3.Error as e:
            row[name + "_error"] = str(e)[:300]
    if row.get("cudnn_us") and row.get("fa3_us"):
        row["fa3_over_cudnn"] = row["cudnn_us"] / row["fa3_us"]
    return row


# A packed training batch of mixed lengths (16256 tokens), the inference
# issue's "varlen training forward on a packed batch of mixed lengths".
VARLEN_LENGTHS = (4096, 2048, 3072, 1024, 512, 2560, 1536, 768, 256, 384)


def bench_varlen(d=128, h=16, causal=True, lengths=VARLEN_LENGTHS, dev="cuda"):
    """One packed-batch forward row: the sequences of `lengths` packed into
    [T, H, D] (bf16), fa3.attention_varlen end to end (its host checks of the
    offsets included: one device-to-host copy per call) beside SDPA cuDNN and
    FLASH on the same tokens padded to the longest sequence ([B, max, H, D],
    right-padded; causal, so each real query sees only its own sequence's
    real keys and the padded rows are wasted work; not causal, the padded
    SDPA runs without a key mask, so its real queries also see the zero
    padding keys: its time is that of the padded work, its output not the
    packed attention). TFLOP/s count the useful work only, sum_b 4·H·S_b²·D
    (halved when causal), for every column; the max abs difference compares
    fa3 with SDPA run on each sequence alone (default backend)."""
    torch.manual_seed(0)
    lengths = list(lengths)
    b, longest, total = len(lengths), max(lengths), sum(lengths)
    cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device=dev)
    q, k, v = (torch.randn(total, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    useful = sum(4.0 * h * s * s * d / (2 if causal else 1) for s in lengths)
    row = {"direction": "varlen", "d": d, "heads": h, "causal": causal, "batch": b, "tokens": total,
           "max_seqlen": longest, "lengths": lengths}

    def padded(x):
        out = torch.zeros(b, longest, h, d, device=dev, dtype=x.dtype)
        for i, s in enumerate(lengths):
            out[i, :s] = x[cu[i]:cu[i] + s]
        return out.transpose(1, 2)  # [B, H, S, D] for SDPA
    qp, kp, vp = padded(q), padded(k), padded(v)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal)
                ms = do_bench(lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal),
                              warmup=25, rep=100, return_mode="median")
            row[name] = useful / ms / 1e9
            row[name + "_ms"] = ms
        except RuntimeError as e:
            row[name + "_error"] = str(e)[:300]
    # The reference: each sequence alone, [1, H, S_b, D].
    ref = [F.scaled_dot_product_attention(*(t[cu[i]:cu[i] + s].transpose(0, 1).unsqueeze(0) for t in (q, k, v)),
                                          is_causal=causal)[0].transpose(0, 1) for i, s in enumerate(lengths)]
    try:
        fn = lambda: fa3.attention_varlen(q, k, v, cu, cu, longest, longest, causal=causal)  # noqa: E731
        o = fn()
        o = o[0] if isinstance(o, tuple) else o
        ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
        row["fa3"] = useful / ms / 1e9
        row["fa3_ms"] = ms
        row["max_abs_diff_vs_sdpa"] = max(
            (o[cu[i]:cu[i] + s].float() - ref[i].float()).abs().max().item() for i, s in enumerate(lengths))
    except (fa3.Error, ValueError, TypeError, NotImplementedError) as e:
        row["fa3_error"] = str(e)[:300]
    if row.get("fa3") and row.get("cudnn"):
        row["fa3_over_cudnn"] = row["fa3"] / row["cudnn"]
    # The backward alone (2.5 x the forward's useful FLOPs), as
    # bench_backward times it: autograd.grad of one retained forward. fa3's
    # runs the varlen backward kernels (one launch of each for the batch).
    grads = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            qg, kg, vg = (t.detach().requires_grad_() for t in (qp, kp, vp))
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                dout = torch.randn_like(out)
                ms = do_bench(lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True),
                              warmup=10, rep=50, return_mode="median")
            grads[name] = ms
            row[name + "_bwd"] = 2.5 * useful / ms / 1e9
        except RuntimeError as e:
            row[name + "_bwd_error"] = str(e)[:300]
    try:
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        out = fa3.attention_varlen(qg, kg, vg, cu, cu, longest, longest, causal=causal)
        dout = torch.randn_like(out)
        ms = do_bench(lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True), warmup=10, rep=50,
                      return_mode="median")
        row["fa3_bwd"] = 2.5 * useful / ms / 1e9
        if row.get("cudnn_bwd"):
            row["fa3_bwd_over_cudnn"] = row["fa3_bwd"] / row["cudnn_bwd"]
    except (fa3.Error, ValueError, TypeError, NotImplementedError) as e:
        row["fa3_bwd_error"] = str(e)[:300]
    return row


def mlir_grad_for(h, d, causal, deterministic=False):
    t = f"tensor<?x?x{h}x{d}xbf16>"
    lt = f"tensor<?x{h}x?xf32>"
    attrs = (["causal"] if causal else []) + (["deterministic"] if deterministic else [])
    a = " {" + ", ".join(attrs) + "}" if attrs else ""
    return (f"func.func @attn_grad(%do: {t}, %q: {t}, %k: {t}, %v: {t}, %o: {t}, %lse: {lt}) -> ({t}, {t}, {t}) {{\n"
            f"  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse{a}"
            f" : ({t}, {t}, {t}, {t}, {t}, {lt}) -> ({t}, {t}, {t})\n"
            f"  return %dq, %dk, %dv : {t}, {t}, {t}\n}}\n")


def bench_forward(d, causal, s, dev="cuda", b=None, h=None, extra=None, dispatch=False, variants=None):
    """One forward row; `extra` adds A/B columns {name: schedule};
    `variants` limits the schedule_variants columns to these names (None:
    all); `dispatch` times fa3.attention itself too."""
    b, h = b or 16384 // s, h or 2048 // d
    torch.manual_seed(0)
    q = torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
    f = flops(b, h, s, d, causal)
    row = {"direction": "fwd", "d": d, "seqlen": s, "batch": b, "heads": h, "causal": causal}
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    ref = None
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            def fn():
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            row[name] = f / ms / 1e9
            if ref is None:
                ref = fn().transpose(1, 2).float()
        except Exception as e:  # noqa: BLE001
            row[name] = None
            row[name + "_error"] = repr(e)[:200]
    # fa3: the kernel fa3.attention runs for this shape (its length bucket's
    # schedule from the compiler's cost model).
    schedule = _jit.forward_schedule(AttentionSpec("bf16", h, h, d, d, causal), s, s)
    row["fa3_schedule"] = describe(schedule)
    try:
        kernel = fa3.compile_mlir(mlir_for(h, d, causal, schedule), "attn")
        o = torch.empty_like(q)
        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        ms = do_bench(lambda: kernel.launch_into(q, k, v, o, lse), warmup=25, rep=100, return_mode="median")
        row["fa3_kernel"] = kernel.name
    except fa3.Error as e:
        ms, o = None, str(e)
    if ms is None:
        row["fa3"] = None
        row["fa3_error"] = o[:300]
    else:
        row["fa3"] = f / ms / 1e9
        # Sanity: the timed kernel's output agrees with cuDNN/FLASH.
        if ref is not None:
            row["max_abs_diff_vs_sdpa"] = (o.float() - ref).abs().max().item()
    # A/B in the same process: the same tiles with another kernel structure.
    for variant, schedule in {**schedule_variants(d, variants), **(extra or {})}.items():
        try:
            other = fa3.compile_mlir(mlir_for(h, d, causal, schedule), "attn")
            o2 = torch.empty_like(q)
            lse2 = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            ms2 = do_bench(lambda: other.launch_into(q, k, v, o2, lse2), warmup=25, rep=100,
                           return_mode="median")
            row["fa3_" + variant] = f / ms2 / 1e9
            if ref is not None:
                row[f"fa3_{variant}_max_abs_diff_vs_sdpa"] = (o2.float() - ref).abs().max().item()
        except fa3.Error as e:
            row[f"fa3_{variant}_error"] = str(e)[:300]
    if dispatch:
        # End to end through fa3.attention (the torch custom op: its
        # length-bucket dispatch, host work and output allocation included).
        fa3.attention(q, k, v, causal=causal)
        ms3 = do_bench(lambda: fa3.attention(q, k, v, causal=causal), warmup=25, rep=100, return_mode="median")
        row["fa3_attention"] = f / ms3 / 1e9
    if row.get("cudnn") and row.get("fa3"):
        row["fa3_over_cudnn"] = row["fa3"] / row["cudnn"]
    return row


_GRAD_KERNELS = {}


def _grad_kernels(h, d, causal):
    """fa3's forward (for O and LSE) and backward kernels of one shape class,
    compiled once per process."""
    key = (h, d, causal)
    if key not in _GRAD_KERNELS:
        _GRAD_KERNELS[key] = (fa3.compile_mlir(mlir_for(h, d, causal), "attn"),
                              fa3.compile_mlir(mlir_grad_for(h, d, causal), "attn_grad", backward=True))
    return _GRAD_KERNELS[key]


def bench_backward(d, causal, s, dev="cuda"):
    b, h = 16384 // s, 2048 // d
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
    f = grad_flops(b, h, s, d, causal)
    row = {"direction": "bwd", "d": d, "seqlen": s, "batch": b, "heads": h, "causal": causal}
    ref = None
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves), is_causal=causal)
            grad_out = do.transpose(1, 2)

            def fn():
                return torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
            row[name] = f / ms / 1e9
            if ref is None:
                ref = [g.float() for g in fn()]
            del out, leaves
        except Exception as e:  # noqa: BLE001
            row[name] = None
            row[name + "_error"] = repr(e)[:200]
    try:
        fwd, bwd = _grad_kernels(h, d, causal)
        o = torch.empty_like(q)
        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        fwd.launch_into(q, k, v, o, lse)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        ws = torch.empty(max(bwd.workspace_bytes(b, s, s), 1), device=dev, dtype=torch.uint8)
        row["workspace_bytes"] = bwd.workspace_bytes(b, s, s)
        ms = do_bench(lambda: bwd.launch_grad_into(do, q, k, v, o, lse, dq, dk, dv, workspace=ws),
                      warmup=25, rep=100, return_mode="median")
        row["fa3_kernel"] = bwd.name
        row["fa3"] = f / ms / 1e9
        # The deterministic backward (dQ added in key-block order) on the
        # same inputs: its cost, and whether two runs give the same bits.
        try:
            det = fa3.compile_mlir(mlir_grad_for(h, d, causal, deterministic=True), "attn_grad", backward=True)
            det_ws = torch.empty(max(det.workspace_bytes(b, s, s), 1), device=dev, dtype=torch.uint8)
            grads = [torch.empty_like(x) for x in (q, k, v)]
            ms_det = do_bench(lambda: det.launch_grad_into(do, q, k, v, o, lse, *grads, workspace=det_ws),
                              warmup=25, rep=100, return_mode="median")
            row["fa3_deterministic"] = f / ms_det / 1e9
            first = [x.clone() for x in grads]
            det.launch_grad_into(do, q, k, v, o, lse, *grads, workspace=det_ws)
            row["deterministic_bit_identical"] = all(torch.equal(x, y) for x, y in zip(first, grads))
        except fa3.Error as e:
            row["fa3_deterministic_error"] = str(e)[:300]
        # Sanity: the timed launch's gradients agree with cuDNN's/FLASH's.
        if ref is not None:
            for name, x, r in zip(("dq", "dk", "dv"), (dq, dk, dv), ref):
                row[f"{name}_max_abs_diff_vs_sdpa"] = (x.float() - r).abs().max().item()
                row[f"{name}_max_abs_sdpa"] = r.abs().max().item()
    except fa3.Error as e:
        row["fa3"] = None
        row["fa3_error"] = str(e)[:300]
    if row.get("cudnn") and row.get("fa3"):
        row["fa3_over_cudnn"] = row["fa3"] / row["cudnn"]
    return row


def bench_llama_step(b=2, s=4096, hq=32, hkv=8, d=128, dev="cuda"):
    """Issue #12's Llama-shaped training step of one attention layer: the
    forward and backward of causal GQA attention (B=2, S=4096, 32 query over
    8 key/value heads, d128) through autograd, in milliseconds: fa3.attention
    beside SDPA cuDNN and FLASH (enable_gqa; a backend that refuses GQA runs
    on K/V expanded outside the timed step)."""
    torch.manual_seed(0)
    q, do = (torch.randn(b, s, hq, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, s, hkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    row = {"direction": "llama-step", "d": d, "seqlen": s, "batch": b, "heads": hq, "kv_heads": hkv,
           "causal": True}

    def timed(step):
        step()
        return do_bench(step, warmup=25, rep=100, return_mode="median")

    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        for expanded in (False, True):
            try:
                kv = (k, v) if not expanded else tuple(x.repeat_interleave(hq // hkv, dim=2) for x in (k, v))
                leaves = [x.detach().clone().requires_grad_() for x in (q, *kv)]

                def step(leaves=leaves, expanded=expanded, backend=backend):
                    with sdpa_kernel([backend]):
                        out = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in leaves),
                                                             is_causal=True, enable_gqa=not expanded)
                    return torch.autograd.grad(out, leaves, do.transpose(1, 2))
                row[name + "_ms"] = timed(step)
                row[name + "_kv"] = "expanded" if expanded else "gqa"
                break
            except Exception as e:  # noqa: BLE001
                row[name + "_error"] = repr(e)[:200]
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]

    def step():
        return torch.autograd.grad(fa3.attention(*leaves, causal=True), leaves, do)
    row["fa3_ms"] = timed(step)
    if row.get("cudnn_ms"):
        row["fa3_over_cudnn_time"] = row["fa3_ms"] / row["cudnn_ms"]
    return row


def fp8_schedule_variants(d, causal=False, only=None):
    """The FP8 forward's A/B columns: the cost model's schedule at head dim
    d (causal or not, sequence lengths unknown) with one choice changed: `no_ws` without a producer warpgroup (the
    structure of the FP8 kernel before it went through the tile level),
    `no_overlap` without the intra-warpgroup overlap (d > 64), `n256` 256-key
    blocks without the overlap (d128; with it ptxas spills), `m192` 192-row
    tiles on three consumer warpgroups without the overlap (d128), `n192` /
    `n128` 192- / 128-key blocks with the overlap (d128; the cost model
    takes 192 for non-causal kernels on a plain grid), `n192_no_pingpong`
    192-key blocks without pingpong, `no_pingpong` without pingpong, `persistent` /
    `plain_grid` on a persistent / plain grid, `sN` (and `sN_persistent`) a
    K/V ring of N stages, `lrN` lazy rescaling with rescale_threshold = N.
    `only` limits the columns to these names (None: all)."""
    from fa3 import _jit  # noqa: PLC0415 (needs the extension, built by scripts/gpu/run.sh)

    default = dict(_jit._module().select_forward_schedule(d, True, causal, 0, 0))
    # A persistent grid needs the producer warpgroup.
    variants = {"no_ws": dict(default, producer_regs=0, consumer_regs=0, pingpong=False,
                              intra_wg_overlap=False, persistent=False),
                "persistent": dict(default, persistent=True),
                "plain_grid": dict(default, persistent=False)}
    if default["intra_wg_overlap"]:
        variants["no_overlap"] = dict(default, intra_wg_overlap=False)
    if d == 128:
        variants["n256"] = dict(default, block_n=256, intra_wg_overlap=False)
        # Three consumer warpgroups (FA3's 32/160 split) on 192-row tiles:
        # more warps to hide the softmax's latency instead of the overlap,
        # which spills at 160 registers (ptxas: 144 bytes).
        variants["m192"] = dict(default, block_m=192, consumer_wgs=3, producer_regs=32,
                                consumer_regs=160, pingpong=False, intra_wg_overlap=False)
        # FA3's larger e4m3 key blocks: 192 keys (V' in 64-key atoms), with
        # the overlap (ptxas: no spills, where 256 keys spill 144 B).
        variants["n192"] = dict(default, block_n=192)
        variants["n128"] = dict(default, block_n=128)
        variants["n192_no_pingpong"] = dict(default, block_n=192, pingpong=False)
    if default["pingpong"]:
        variants["no_pingpong"] = dict(default, pingpong=False)
    # Lazy rescaling with P · 2^(8 - τ) in e4m3 (fa3-lazy-rescale).
    for threshold in (4, 8):
        variants[f"lr{threshold}"] = dict(default, rescale_threshold=threshold)
    # e4m3 tiles take half the shared memory: room for deeper K/V rings.
    for stages in (3, 4):
        variants[f"s{stages}"] = dict(default, stages=stages)
        variants[f"s{stages}_persistent"] = dict(default, stages=stages, persistent=True)
    if only:
        variants = {name: fields for name, fields in variants.items() if name in only}
    return {name: schedules.schedule(**fields) for name, fields in variants.items()}


def fp8_quantized(q, k, v):
    """(q8, k8, v8, descale): q, k, v [B, S, H, D] as the benchmarks feed the
    FP8 kernels, x · 64 rounded to e4m3, with the descale 1/64 per (batch,
    head)."""
    descale = torch.full((q.shape[0], q.shape[2]), 1.0 / 64, device=q.device)
    return (*((x.float() * 64).to(torch.float8_e4m3fn) for x in (q, k, v)), descale)


def fp8_launch_fn(kernel, q8, k8, v8, descale, out, lse):
    """A no-argument launch of the FP8 forward `kernel` on these tensors
    (the descale for q, k and v alike) into out and lse, on the current
    stream, with a workspace of the size this kernel asks for."""
    b, s, _, _ = q8.shape
    sk = k8.shape[1]
    workspace = torch.empty(max(kernel.forward_workspace_bytes(b, s, sk), 256), device=q8.device,
                            dtype=torch.uint8)
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (q8.data_ptr(), k8.data_ptr(), v8.data_ptr(), out.data_ptr(), lse.data_ptr(), descale.data_ptr(),
            descale.data_ptr(), descale.data_ptr(), workspace.data_ptr())

    def launch():
        kernel.launch_fp8(*ptrs, b, s, sk, stream)
    # The launch reads these tensors: they live as long as it does.
    launch.keep = (q8, k8, v8, descale, out, lse, workspace)
    return launch


def bench_fp8(d, causal, s, dev="cuda", variants=False):
    """fa3's FP8 forward (e4m3 in, per-(batch, kv-head) descales, bf16 out;
    the timed launch includes the V' layout kernel) beside fa3's bf16
    forward on the same shape, both through fa3._fa3 with preallocated
    buffers; with `variants` (True: all; or a list of names), the
    fp8_schedule_variants columns too."""
    from fa3 import _jit  # noqa: PLC0415 (needs the extension, built by scripts/gpu/run.sh)
    from fa3._spec import AttentionSpec  # noqa: PLC0415

    b, h = 16384 // s, 2048 // d
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    f = flops(b, h, s, d, causal)
    row = {"direction": "fwd-fp8", "d": d, "seqlen": s, "batch": b, "heads": h, "causal": causal}
    stream = torch.cuda.current_stream().cuda_stream
    scale = 1.0 / d ** 0.5
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
    bf16 = _jit.get(AttentionSpec("bf16", h, h, d, d, causal, scale), "cuda:0", "fwd")
    ms = do_bench(lambda: bf16.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                                      b, s, s, stream), warmup=25, rep=100, return_mode="median")
    row["fa3_bf16"] = f / ms / 1e9
    ref = out.float().clone()
    q8, k8, v8, descale = fp8_quantized(q, k, v)
    fp8 = _jit.get(AttentionSpec("f8E4M3FN", h, h, d, d, causal, scale), "cuda:0", "fwd")
    ms = do_bench(fp8_launch_fn(fp8, q8, k8, v8, descale, out, lse), warmup=25, rep=100, return_mode="median")
    row["fa3_fp8"] = f / ms / 1e9
    row["fp8_over_bf16"] = row["fa3_fp8"] / row["fa3_bf16"]
    row["fp8_vs_bf16_rmse"] = (out.float() - ref).pow(2).mean().sqrt().item()
    only = None if variants in (True, ["all"]) else variants
    for name, schedule in (fp8_schedule_variants(d, causal, only) if variants else {}).items():
        try:
            other = _jit.get(AttentionSpec("f8E4M3FN", h, h, d, d, causal, scale), "cuda:0", "fwd",
                             schedule=schedule)
            # (Each variant with its own workspace: its V' may be laid out
            # for another block_n.)
            ms = do_bench(fp8_launch_fn(other, q8, k8, v8, descale, out, lse), warmup=25, rep=100,
                          return_mode="median")
            row[f"fp8_{name}"] = f / ms / 1e9
        except Exception as e:  # noqa: BLE001 (a variant the build does not support is reported, not fatal)
            row[f"fp8_{name}"] = None
            print(f"# fp8 variant {name} at d={d}: {e}", file=sys.stderr)
    return row


def fp8_variant_names(rows):
    """The fp8_schedule_variants columns present in `rows`, in first-seen order."""
    names = []
    for r in rows:
        for key in r:
            if key.startswith("fp8_") and key not in ("fp8_over_bf16", "fp8_vs_bf16_rmse") and key[4:] not in names:
                names.append(key[4:])
    return names


def fp8_gemm_tflops(n=8192, dev="cuda"):
    """The device's e4m3 GEMM rate (torch._scaled_mm, n^3), for scale."""
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    bt = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    ms = do_bench(lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                  warmup=25, rep=100, return_mode="median")
    return 2.0 * n ** 3 / ms / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=30)
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--fwd-only", action="store_true", help="the forward only")
    only.add_argument("--bwd-only", action="store_true", help="the backward only")
    only.add_argument("--fp8", action="store_true", help="the FP8 forward beside the bf16 forward only")
    only.add_argument("--decode", action="store_true",
                      help="decode shapes only: B=32, then B=1 and B=4 (split-KV), Sq=1, GQA 32:8, d128, "
                      "Sk = --seqlens (default 4k ... 32k)")
    only.add_argument("--varlen", action="store_true",
                      help="the packed-batch forward only (mixed lengths, 16k tokens, d128, H16) beside padded "
                      "cuDNN and FLASH, causal and not")
    only.add_argument("--llama", action="store_true",
                      help="the Llama-shaped attention step only (B=2, S=4096, GQA 32:8, d128, causal; "
                           "forward + backward through autograd, ms)")
    only.add_argument("--tiles", action="store_true",
                      help="d64 forward by query tile (block_m 64/128/192, 128 also persistent) on the FA3 and ViT shapes only")
    ap.add_argument("--dims", help="comma-separated head dims (default 64,128,256)")
    ap.add_argument("--seqlens", help="comma-separated sequence lengths (default 512 ... 16384)")
    ap.add_argument("--variants", help="comma-separated forward A/B columns (schedule_variants names; "
                    "default all, '' none)")
    ap.add_argument("--no-vit", action="store_true", help="skip the ViT shapes")
    ap.add_argument("--fp8-variants", default="",
                    help="with --fp8: comma-separated fp8_schedule_variants columns ('all': every one)")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seqlens = [512, 1024, 2048, 4096, 8192, 16384]
    dims = [64, 128, 256]
    if args.quick:
        seqlens, dims = [2048, 8192], [128]
    if args.dims:
        dims = [int(x) for x in args.dims.split(",")]
    if args.seqlens:
        seqlens = [int(x) for x in args.seqlens.split(",")]
    variants = None if args.variants is None else {x for x in args.variants.split(",") if x}
    directions = ["fwd"] * (not args.bwd_only) + ["bwd"] * (not args.fwd_only)
    rows = []
    # d64 tiles (--tiles): cuDNN runs the causal 512 forward with 64 x 128
    # tiles (ncu, docs/Performance.md), so 64-row tiles with a producer
    # warpgroup, 64-key blocks and the rotated key loop are columns too.
    tiles = {"bm64": schedules.schedule(64, 128, 1),
             "bm64p_ws": schedules.schedule(64, 128, 1, 56, 256, persistent=True),
             "bm128": schedules.schedule(128, 128, 2, 24, 240, pingpong=True),
             "bm128p": schedules.schedule(128, 128, 2, 24, 240, pingpong=True, persistent=True),
             "bm128n64p": schedules.schedule(128, 64, 2, 24, 240, pingpong=True, persistent=True),
             "bm128p_ov": schedules.schedule(128, 128, 2, 24, 240, pingpong=True, intra_wg_overlap=True,
                                             persistent=True),
             "bm192": schedules.hopper_forward(64)}
    if args.tiles:
        for causal in (False, True):
            for s in seqlens:
                row = bench_forward(64, causal, s, extra=tiles, dispatch=True)
                row["shape"] = "tiles"
                rows.append(row)
                print(json.dumps(row), flush=True)
        directions = ["fwd"]
        dims = []
    if args.decode:
        decode_lengths = [int(x) for x in args.seqlens.split(",")] if args.seqlens else [4096, 8192, 16384, 32768]
        for sk in decode_lengths:
            row = bench_decode(sk)
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
        for b in (1, 4):
            for sk in decode_lengths:
                row = bench_decode_small(sk, b)
                rows.append(row)
                print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
        directions = []
        dims = []
    if args.llama:
        row = bench_llama_step()
        rows.append(row)
        print(json.dumps(row), flush=True)
        directions = []
        dims = []
    if args.varlen:
        for causal in (True, False):
            row = bench_varlen(causal=causal)
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
        directions = []
        dims = []
    if args.fp8:
        seqlens_fp8 = ([int(x) for x in args.seqlens.split(",")] if args.seqlens
                       else [8192] if args.quick else [1024, 4096, 8192, 16384])
        row = {"direction": "fp8-gemm", "tflops": fp8_gemm_tflops()}
        print(json.dumps(row), flush=True)
        rows.append(row)
        for d in ([int(x) for x in args.dims.split(",")] if args.dims else (64, 128, 256)):
            for causal in (False, True):
                for s in seqlens_fp8:
                    row = bench_fp8(d, causal, s, variants=(args.fp8_variants.split(",")
                                                            if args.fp8_variants else False))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    torch.cuda.empty_cache()
        directions = []
    for direction in directions:
        bench = bench_forward if direction == "fwd" else bench_backward
        for d in dims:
            for causal in (False, True):
                for s in seqlens:
                    row = bench(d, causal, s, variants=variants) if direction == "fwd" else bench(d, causal, s)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    torch.cuda.empty_cache()
    if "fwd" in directions and not args.quick and not args.no_vit:
        # Vision transformer shapes (B=128, H=12, d64; 7x7, 14x14 + cls,
        # 28x28 patches): short sequences, many heads.
        # A/B over the query tile: 64 rows (one consumer, no producer), 128
        # (two consumers, producer, pingpong), 192 (the default).
        for s in (49, 197, 784):
            row = bench_forward(64, False, s, b=128, h=12, extra=tiles, dispatch=True, variants=variants)
            row["shape"] = "vit"
            rows.append(row)
            print(json.dumps(row), flush=True)

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "commit": (ROOT / ".bundle" / "COMMIT").read_text().strip() if (ROOT / ".bundle" / "COMMIT").exists() else "?",
    }
    (out / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    def fmt(x):
        return f"{x:.0f}" if isinstance(x, float) else "n/a"
    lines = []
    fwd_rows = [r for r in rows if r["direction"] == "fwd"]
    bwd_rows = [r for r in rows if r["direction"] == "bwd"]
    if fwd_rows:
        lines += [f"bf16 forward, TFLOP/s — {meta['gpu']}, {meta['date']}, fa3 {meta['commit'][:12]}, torch {meta['torch']}", "",
                  "fa3: the kernel fa3.attention runs for the shape (its length bucket's schedule: "
                  "block_m x block_n, p = persistent grid); A/B columns (the cost model's tiles for an unknown "
                  "length): no WS = no producer warpgroup, "
                  "WS no-pp = warp-specialized without pingpong, overlap toggled = intra-warpgroup overlap "
                  "switched on (d64) or off (d128, d256), persistent = the default on a persistent grid", "",
                  "| d | causal | B x H x seqlen | fa3 (schedule) | no WS | WS no-pp | overlap toggled | persistent | cuDNN | "
                  "FLASH | fa3/cuDNN | max abs diff vs SDPA |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in fwd_rows:
            ratio = f"{r['fa3_over_cudnn']:.2f}" if r.get("fa3_over_cudnn") else "n/a"
            diff = f"{r['max_abs_diff_vs_sdpa']:.2e}" if "max_abs_diff_vs_sdpa" in r else r.get("fa3_error", "n/a")[:60]
            lines.append(f"| {r['d']} | {r['causal']} | {r['batch']}x{r['heads']}x{r['seqlen']} | {fmt(r.get('fa3'))} "
                         f"({r.get('fa3_schedule')}) | {fmt(r.get('fa3_no_ws'))} | {fmt(r.get('fa3_ws_no_pp'))} | {fmt(r.get('fa3_ws_overlap', r.get('fa3_ws_no_overlap')))} | "
                         f"{fmt(r.get('fa3_persistent'))} | "
                         f"{fmt(r.get('cudnn'))} | {fmt(r.get('flash'))} | {ratio} | {diff} |")
    tile_rows = [r for r in fwd_rows if "fa3_bm64" in r]
    if tile_rows:
        lines += ["", "d64 forward by query tile: block_m 64 / 128 / 192; fa3 = the length bucket's kernel "
                  "(its schedule), fa3.attention = the call end to end", "",
                  "| causal | B x H x seqlen | bm64 | bm128 | bm192 | fa3 (schedule) | fa3.attention | cuDNN | FLASH | "
                  "fa3.attention / cuDNN |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in tile_rows:
            att = r.get("fa3_attention")
            ratio = f"{att / r['cudnn']:.2f}" if att and r.get("cudnn") else "n/a"
            lines.append(f"| {r['causal']} | {r['batch']}x{r['heads']}x{r['seqlen']} | {fmt(r.get('fa3_bm64'))} | "
                         f"{fmt(r.get('fa3_bm128'))} | {fmt(r.get('fa3_bm192'))} | {fmt(r.get('fa3'))} "
                         f"({r.get('fa3_schedule')}) | {fmt(att)} | "
                         f"{fmt(r.get('cudnn'))} | {fmt(r.get('flash'))} | {ratio} |")
    if bwd_rows:
        if lines:
            lines.append("")
        lines += [f"bf16 backward (2.5 × forward FLOPs), TFLOP/s — {meta['gpu']}, {meta['date']}, fa3 {meta['commit'][:12]}, "
                  f"torch {meta['torch']}", "",
                  "| d | causal | seqlen | fa3 | fa3 deterministic | cuDNN | FLASH | fa3/cuDNN | "
                  "max abs diff vs SDPA dQ / dK / dV |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in bwd_rows:
            ratio = f"{r['fa3_over_cudnn']:.2f}" if r.get("fa3_over_cudnn") else "n/a"
            if "dq_max_abs_diff_vs_sdpa" in r:
                diff = " / ".join(f"{r[n + '_max_abs_diff_vs_sdpa']:.2e}" for n in ("dq", "dk", "dv"))
            else:
                diff = r.get("fa3_error", "n/a")[:60]
            lines.append(f"| {r['d']} | {r['causal']} | {r['seqlen']} | {fmt(r.get('fa3'))} | "
                         f"{fmt(r.get('fa3_deterministic'))} | {fmt(r.get('cudnn'))} | "
                         f"{fmt(r.get('flash'))} | {ratio} | {diff} |")
    llama_rows = [r for r in rows if r["direction"] == "llama-step"]
    if llama_rows:
        if lines:
            lines.append("")
        lines += [f"Llama-shaped attention step (forward + backward through autograd), ms — {meta['gpu']}, "
                  f"{meta['date']}, fa3 {meta['commit'][:12]}, torch {meta['torch']}", "",
                  "| B x Hq:Hkv x S, d, causal | fa3 | cuDNN | FLASH | fa3 / cuDNN (time) |",
                  "| --- | --- | --- | --- | --- |"]
        for r in llama_rows:
            def ms(name):
                x = r.get(name + "_ms")
                kv = r.get(name + "_kv")
                return "n/a" if x is None else f"{x:.3f}" + (" (K/V expanded)" if kv == "expanded" else "")
            ratio = f"{r['fa3_over_cudnn_time']:.2f}" if r.get("fa3_over_cudnn_time") else "n/a"
            lines.append(f"| {r['batch']} x {r['heads']}:{r['kv_heads']} x {r['seqlen']}, d{r['d']} | "
                         f"{ms('fa3')} | {ms('cudnn')} | {ms('flash')} | {ratio} |")
    decode_rows = [r for r in rows if r["direction"] == "decode" and r.get("shape") != "small-batch"]
    small_rows = [r for r in rows if r["direction"] == "decode" and r.get("shape") == "small-batch"]
    if decode_rows:
        if lines:
            lines.append("")

        def us(r, name):
            x = r.get(name + "_us")
            return f"{x:.1f} µs, {r[name + '_tbps']:.2f} TB/s" if x else "n/a"
        lines += [f"decode (bf16, K/V read once: 2·B·Sk·Hkv·D·2 bytes), µs and TB/s — {meta['gpu']}, {meta['date']}, "
                  f"fa3 {meta['commit'][:12]}, torch {meta['torch']}", "",
                  "| B x Sq x Hq:Hkv x D | Sk | fa3 (schedule) | fa3 unpacked | fa3.attention | fa3 KV cache | "
                  "fa3 paged KV cache (page 64, shuffled) | fa3 paged (in order) | cuDNN | FLASH | "
                  "cuDNN / fa3 time | max abs diff vs SDPA |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in decode_rows:
            ratio = f"{r['fa3_over_cudnn']:.2f}" if r.get("fa3_over_cudnn") else "n/a"
            diff = f"{r['fa3_max_abs_diff_vs_sdpa']:.2e}" if "fa3_max_abs_diff_vs_sdpa" in r else \
                r.get("fa3_error", "n/a")[:60]
            lines.append(f"| {r['batch']}x{r['seqlen_q']}x{r['heads']}:{r['kv_heads']}x{r['d']} | {r['seqlen_k']} | "
                         f"{us(r, 'fa3')} ({r.get('fa3_schedule')}) | {us(r, 'fa3_nopack')} | {us(r, 'fa3_attention')} | "
                         f"{us(r, 'fa3_kvcache')} | {us(r, 'fa3_paged')} | {us(r, 'fa3_paged_inorder')} | "
                         f"{us(r, 'cudnn')} ({r.get('cudnn_kv', '-')}) | {us(r, 'flash')} ({r.get('flash_kv', '-')}) | "
                         f"{ratio} | {diff} |")
    if small_rows:
        if lines:
            lines.append("")

        def us_small(r, name):
            x = r.get(name + "_us")
            return f"{x:.1f} µs, {r[name + '_tbps']:.2f} TB/s" if x else r.get(name + "_error", "n/a")[:60]
        lines += [f"small-batch decode (bf16, split-KV), µs and TB/s — {meta['gpu']}, {meta['date']}, "
                  f"fa3 {meta['commit'][:12]}, torch {meta['torch']}", "",
                  "fa3 KV cache: the fa3.attention_kvcache kernel on a full contiguous cache, num_splits=1 and "
                  "num_splits=0 (fa3's choice N: partial attentions and the merge kernel, both timed)", "",
                  "| B x Sq x Hq:Hkv x D | Sk | fa3 KV cache (1 split) | fa3 KV cache (fa3's N) | N | cuDNN | FLASH | "
                  "cuDNN / best fa3 time | max abs diff vs SDPA (1 split / N) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in small_rows:
            ratio = f"{r['fa3_over_cudnn']:.2f}" if r.get("fa3_over_cudnn") else "n/a"
            diff = " / ".join(f"{r[n + '_max_abs_diff_vs_sdpa']:.2e}" if n + "_max_abs_diff_vs_sdpa" in r else "n/a"
                              for n in ("fa3_kvcache", "fa3_splits"))
            lines.append(f"| {r['batch']}x{r['seqlen_q']}x{r['heads']}:{r['kv_heads']}x{r['d']} | {r['seqlen_k']} | "
                         f"{us_small(r, 'fa3_kvcache')} | {us_small(r, 'fa3_splits')} | {r.get('fa3_splits_n', '-')} | "
                         f"{us_small(r, 'cudnn')} ({r.get('cudnn_kv', '-')}) | "
                         f"{us_small(r, 'flash')} ({r.get('flash_kv', '-')}) | {ratio} | {diff} |")
    varlen_rows = [r for r in rows if r["direction"] == "varlen"]
    if varlen_rows:
        if lines:
            lines.append("")
        lines += [f"packed-batch forward (bf16; useful TFLOP/s: sum_b 4·H·S_b²·D, halved when causal) — "
                  f"{meta['gpu']}, {meta['date']}, fa3 {meta['commit'][:12]}, torch {meta['torch']}", "",
                  "fa3: fa3.attention_varlen on the packed tokens end to end; cuDNN, FLASH: SDPA on the same "
                  "tokens padded to the longest sequence", "",
                  "| d | H | causal | sequences (tokens, longest) | fa3 | cuDNN padded | FLASH padded | "
                  "fa3/cuDNN | bwd: fa3 | cuDNN padded | FLASH padded | fa3/cuDNN | "
                  "max abs diff vs SDPA |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in varlen_rows:
            ratio = f"{r['fa3_over_cudnn']:.2f}" if r.get("fa3_over_cudnn") else "n/a"
            bwd_ratio = f"{r['fa3_bwd_over_cudnn']:.2f}" if r.get("fa3_bwd_over_cudnn") else "n/a"
            diff = f"{r['max_abs_diff_vs_sdpa']:.2e}" if "max_abs_diff_vs_sdpa" in r else \
                r.get("fa3_error", "n/a")[:60]
            lines.append(f"| {r['d']} | {r['heads']} | {r['causal']} | {r['batch']} ({r['tokens']}, "
                         f"{r['max_seqlen']}) | {fmt(r.get('fa3'))} | {fmt(r.get('cudnn'))} | "
                         f"{fmt(r.get('flash'))} | {ratio} | {fmt(r.get('fa3_bwd'))} | {fmt(r.get('cudnn_bwd'))} | "
                         f"{fmt(r.get('flash_bwd'))} | {bwd_ratio} | {diff} |")
    fp8_rows = [r for r in rows if r["direction"] == "fwd-fp8"]
    if fp8_rows:
        gemm = next((r["tflops"] for r in rows if r["direction"] == "fp8-gemm"), None)
        lines += [f"FP8 (e4m3) forward beside fa3's bf16 forward, TFLOP/s — {meta['gpu']}, {meta['date']}, "
                  f"fa3 {meta['commit'][:12]}; e4m3 GEMM (torch._scaled_mm 8192^3) in this run: {fmt(gemm)}", "",
                  "| d | causal | seqlen | fa3 FP8 | fa3 bf16 | FP8 / bf16 | RMSE FP8 vs bf16 output |"
                  + "".join(f" FP8 {v} |" for v in fp8_variant_names(fp8_rows)),
                  "| --- | --- | --- | --- | --- | --- | --- |" + " --- |" * len(fp8_variant_names(fp8_rows))]
        for r in fp8_rows:
            lines.append(f"| {r['d']} | {r['causal']} | {r['seqlen']} | {fmt(r['fa3_fp8'])} | {fmt(r['fa3_bf16'])} | "
                         f"{r['fp8_over_bf16']:.2f} | {r['fp8_vs_bf16_rmse']:.2e} |"
                         + "".join(f" {fmt(r.get('fp8_' + v))} |" for v in fp8_variant_names(fp8_rows)))
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    try:
        if not directions:
            raise RuntimeError("nothing to plot")
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        panels = [(direction, causal) for direction in directions for causal in (False, True)]
        fig, axes = plt.subplots(len(panels), len(dims), figsize=(max(5 * len(dims), 8), 4 * len(panels)),
                                 squeeze=False)
        for j, d in enumerate(dims):
            for i, (direction, causal) in enumerate(panels):
                ax = axes[i][j]
                sel = [r for r in rows if r["direction"] == direction and r["d"] == d and r["causal"] == causal and "shape" not in r]
                xs = [str(r["seqlen"]) for r in sel]
                for name in ("fa3", "cudnn", "flash"):
                    ax.plot(xs, [r.get(name) or 0 for r in sel], marker="o", label=name)
                ax.set_title(f"{'forward' if direction == 'fwd' else 'backward'}, d={d}, "
                             f"{'causal' if causal else 'non-causal'}")
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.legend()
        what = " and ".join({"fwd": "forward", "bwd": "backward"}[x] for x in directions)
        fig.suptitle(f"bf16 attention {what} on {meta['gpu']} ({meta['date']})")
        fig.tight_layout()
        fig.savefig(out / "bench.png", dpi=80)
    except Exception as e:  # noqa: BLE001
        print("plot skipped:", e)


if __name__ == "__main__":
    main()
