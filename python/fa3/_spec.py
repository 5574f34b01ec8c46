"""What one compiled attention is specialized on, checked arguments, and the
MLIR functions fa3 compiles for it.

Batch and sequence lengths stay dynamic in the MLIR (`?`), so one compiled
function serves every (B, Sq, Sk); head counts, head dims, dtype, masks,
scale and softcap are compiled in.
"""

import dataclasses
import math

# Storage types by name as fa3's MLIR spells them (f8E4M3FN: FP8 forward on
# Hopper, with descales, bf16 output).
MLIR_TYPES = ("f32", "f16", "bf16", "f8E4M3FN")
FP8_HEAD_DIMS = (64, 128, 256)
# Head dims the Hopper kernels are compiled for (forward and backward; v's
# equal to q's). fa3.attention runs every other multiple of 8 up to 256 (and
# v's head dim != q's) at the next of these (rounded_cuda_head_dim); the CPU
# compiles any multiple of 8 up to 256 as it is.
CUDA_HEAD_DIMS = (64, 128, 256)


def has_cuda_kernel(d, dv):
    """Whether q/k head dim `d` and v head dim `dv` are ones the CUDA kernels
    are compiled for (else fa3.attention runs them at
    rounded_cuda_head_dim)."""
    return d == dv and d in CUDA_HEAD_DIMS


def rounded_cuda_head_dim(d, dv):
    """The compiled head dim the CUDA kernels run q/k of head dim `d` and v
    of head dim `dv` at: the smallest of CUDA_HEAD_DIMS >= both (q, k and v
    zero-padded to it; FlashAttention-3 rounds up to its compiled sizes
    alike)."""
    return next(size for size in CUDA_HEAD_DIMS if size >= max(d, dv))


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """One attention specialization. `window` is (left, right), -1 meaning
    unbounded; `scale` is resolved (never None)."""

    dtype: str  # "f32", "f16", "bf16" or "f8E4M3FN"
    num_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_v: int
    causal: bool = False
    scale: float = 1.0
    window: tuple = (-1, -1)
    softcap: float = 0.0
    # bf16 inputs quantized to e4m3 by the compiler (fa3-cast-fp8), with or
    # without the Hadamard transform of q and k.
    cast_fp8: bool = False
    hadamard: bool = False
    # PackGQA (forward only): the query heads of one kv head share a tile.
    pack_gqa: bool = False
    # A backward whose gradients are bit-identical run to run (backward
    # only: the forward always is).
    deterministic: bool = False
    # Attention dropout's probability (0: off); the functions then take a
    # last argument, the Philox (seed, offset) as int64 [2].
    dropout: float = 0.0

    def _attrs(self, schedule=None):
        attrs = []
        if self.causal:
            attrs.append("causal")
        attrs.append(f"scale = {float(self.scale)!r} : f32")
        if self.window != (-1, -1):
            attrs.append(f"window = array<i64: {self.window[0]}, {self.window[1]}>")
        if self.softcap:
            attrs.append(f"softcap = {float(self.softcap)!r} : f32")
        if self.cast_fp8:
            attrs.append(f"fp8 = #fa3.fp8<hadamard = {str(self.hadamard).lower()}>")
        if self.dropout:
            attrs.append(f"dropout = {float(self.dropout)!r} : f32")
        if schedule is not None:
            attrs.append(f"schedule = {schedule}")
        return " {" + ", ".join(attrs) + "}"

    def _split_attrs(self, num_splits, schedule=None):
        """`_attrs(schedule)` with `num_splits` (split-KV) when > 1."""
        attrs = self._attrs(schedule)
        if num_splits > 1:
            attrs = attrs[:-1] + f", num_splits = {int(num_splits)} : i64}}"
        return attrs

    @property
    def fp8(self):
        return self.dtype == "f8E4M3FN"

    def _types(self):
        e = self.dtype
        q = f"tensor<?x?x{self.num_heads}x{self.head_dim}x{e}>"
        k = f"tensor<?x?x{self.num_kv_heads}x{self.head_dim}x{e}>"
        v = f"tensor<?x?x{self.num_kv_heads}x{self.head_dim_v}x{e}>"
        o = f"tensor<?x?x{self.num_heads}x{self.head_dim_v}x{'bf16' if self.fp8 else e}>"
        lse = f"tensor<?x{self.num_heads}x?xf32>"
        return q, k, v, o, lse

    def forward_mlir(self, schedule=None):
        """`@attention(q, k, v) -> (o, lse)`; FP8: `@attention(q, k, v,
        q_descale, k_descale, v_descale)`. `schedule` (a `#fa3.schedule<...>`
        string; None: the compiler's choice) is written into the attention."""
        q, k, v, o, lse = self._types()
        if self.fp8:
            d = f"tensor<?x{self.num_kv_heads}xf32>"
            return (f"func.func @attention(%q: {q}, %k: {k}, %v: {v}, %qd: {d}, %kd: {d}, %vd: {d})"
                    f" -> ({o}, {lse}) {{\n"
                    f"  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd{self._attrs(schedule)}"
                    f" : ({q}, {k}, {v}, {d}, {d}, {d}) -> ({o}, {lse})\n"
                    f"  return %o, %lse : {o}, {lse}\n}}\n")
        attrs = self._attrs(schedule)
        if self.pack_gqa:
            attrs = attrs[:-1] + ", pack_gqa}"
        rng_arg, rng_operand, rng_type = self._rng()
        return (f"func.func @attention(%q: {q}, %k: {k}, %v: {v}{rng_arg}) -> ({o}, {lse}) {{\n"
                f"  %o, %lse = fa3.attention %q, %k, %v{rng_operand}{attrs} : ({q}, {k}, {v}{rng_type})"
                f" -> ({o}, {lse})\n"
                f"  return %o, %lse : {o}, {lse}\n}}\n")

    def _rng(self):
        """With dropout: the Philox (seed, offset) argument, operand and type
        that the forward and backward functions end with; else empty."""
        if not self.dropout:
            return "", "", ""
        return ", %rng: tensor<2xi64>", " rng(%rng)", ", tensor<2xi64>"

    def _packed_types(self):
        """The packed [T, H, D] types of q, k, v, o, the [H, T] LSE and the
        i32 offsets."""
        e = self.dtype
        return (f"tensor<?x{self.num_heads}x{self.head_dim}x{e}>",
                f"tensor<?x{self.num_kv_heads}x{self.head_dim}x{e}>",
                f"tensor<?x{self.num_kv_heads}x{self.head_dim_v}x{e}>",
                f"tensor<?x{self.num_heads}x{self.head_dim_v}x{e}>",
                f"tensor<{self.num_heads}x?xf32>", "tensor<?xi32>")

    def varlen_mlir(self, seqused_k=False, num_splits=1, pack_gqa=False):
        """`@attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k[, seqused_k])
        -> (o, lse)` on packed [T, H, D] tensors: one fa3.attention_varlen
        (split-KV in `num_splits` splits when > 1; PackGQA with `pack_gqa`)."""
        q, k, v, o, lse, idx = self._packed_types()
        attrs = self._split_attrs(num_splits)
        if pack_gqa:
            attrs = attrs[:-1] + ", pack_gqa}"
        used_arg, used_op, used_type = (f", %used: {idx}", ", %used", f", {idx}") if seqused_k else ("", "", "")
        return (f"func.func @attention_varlen(%q: {q}, %k: {k}, %v: {v}, %cuq: {idx}, %cuk: {idx}{used_arg})"
                f" -> ({o}, {lse}) {{\n"
                f"  %o, %lse = fa3.attention_varlen %q, %k, %v, %cuq, %cuk{used_op}{attrs}"
                f" : ({q}, {k}, {v}, {idx}, {idx}{used_type}) -> ({o}, {lse})\n"
                f"  return %o, %lse : {o}, {lse}\n}}\n")

    def varlen_backward_mlir(self, grad_lse=False, seqused_k=False):
        """`@attention_varlen_grad(do, q, k, v, o, lse, cu_seqlens_q,
        cu_seqlens_k[, seqused_k][, dlse]) -> (dq, dk, dv)`: one
        fa3.attention_varlen_grad (with the used key counts and the LSE's
        gradient as further arguments when asked; `deterministic` when the
        spec is)."""
        q, k, v, o, lse, idx = self._packed_types()
        used_arg, used_op, used_type = (f", %used: {idx}", " seqused_k %used", f", {idx}") if seqused_k \
            else ("", "", "")
        dlse_arg, dlse_op, dlse_type = (f", %dlse: {lse}", " grad_lse %dlse", f", {lse}") if grad_lse \
            else ("", "", "")
        attrs = self._attrs()
        if self.deterministic:
            attrs = attrs[:-1] + ", deterministic}"
        return (f"func.func @attention_varlen_grad(%do: {o}, %q: {q}, %k: {k}, %v: {v}, %o: {o}, %lse: {lse}, "
                f"%cuq: {idx}, %cuk: {idx}{used_arg}{dlse_arg}) -> ({q}, {k}, {v}) {{\n"
                f"  %dq, %dk, %dv = fa3.attention_varlen_grad %do, %q, %k, %v, %o, %lse, %cuq, %cuk{used_op}{dlse_op}"
                f"{attrs} : ({o}, {q}, {k}, {v}, {o}, {lse}, {idx}, {idx}{used_type}{dlse_type}) "
                f"-> ({q}, {k}, {v})\n"
                f"  return %dq, %dk, %dv : {q}, {k}, {v}\n}}\n")

    def kvcache_mlir(self, paged=False, append=False, num_splits=1, pack_gqa=False, schedule=None):
        """`@attention_kvcache(q, k_cache, v_cache[, k_new, v_new],
        cache_seqlens[, seqlens_before_append][, page_table]) -> (o, lse[,
        k_cache, v_cache])`: with `append`, fa3.kvcache_append writes the new
        rows at the lengths before the append, and fa3.attention_kvcache
        attends to the lengths after it, in `num_splits` splits of the keys
        (split-KV) when > 1, with the query heads of each KV head packed into
        one tile with `pack_gqa`; `schedule` (a `#fa3.schedule<...>`
        string; None: the compiler's choice) is written into the attention."""
        q, k, v, o, lse = self._types()
        idx, table = "tensor<?xi32>", "tensor<?x?xi32>"
        args = [f"%q: {q}", f"%kc: {k}", f"%vc: {v}"]
        if append:
            args += [f"%k: {k}", f"%v: {v}"]
        args.append(f"%lens: {idx}")
        if append:
            args.append(f"%before: {idx}")
        if paged:
            args.append(f"%pages: {table}")
        pages_op, pages_type = (", %pages", f", {table}") if paged else ("", "")
        body = ""
        caches = "%kc, %vc"
        results, result_types = "%o, %lse", f"{o}, {lse}"
        if append:
            body = (f"  %kc1, %vc1 = fa3.kvcache_append %kc, %vc, %k, %v, %before{pages_op}"
                    f" : ({k}, {v}, {k}, {v}, {idx}{pages_type}) -> ({k}, {v})\n")
            caches = "%kc1, %vc1"
            results += ", %kc1, %vc1"
            result_types += f", {k}, {v}"
        attrs = self._split_attrs(num_splits, schedule)
        if pack_gqa:
            attrs = attrs[:-1] + ", pack_gqa}"
        body += (f"  %o, %lse = fa3.attention_kvcache %q, {caches}, %lens{pages_op}{attrs}"
                 f" : ({q}, {k}, {v}, {idx}{pages_type}) -> ({o}, {lse})\n")
        return (f"func.func @attention_kvcache({', '.join(args)}) -> ({result_types}) {{\n{body}"
                f"  return {results} : {result_types}\n}}\n")

    def backward_mlir(self, grad_lse=False):
        """`@attention_grad(do, q, k, v, o, lse) -> (dq, dk, dv)`; with
        `grad_lse`, a seventh argument: the gradient reaching the LSE."""
        q, k, v, o, lse = self._types()
        extra_arg, extra_operand, extra_type = (f", %dlse: {lse}", ", %dlse", f", {lse}") if grad_lse else ("", "", "")
        rng_arg, rng_operand, rng_type = self._rng()
        extra_arg, extra_operand, extra_type = extra_arg + rng_arg, extra_operand + rng_operand, extra_type + rng_type
        attrs = self._attrs()
        if self.deterministic:
            attrs = attrs[:-1] + ", deterministic}"
        return (f"func.func @attention_grad(%do: {o}, %q: {q}, %k: {k}, %v: {v}, %o: {o}, %lse: {lse}"
                f"{extra_arg}) -> ({q}, {k}, {v}) {{\n"
                f"  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse{extra_operand}{attrs}"
                f" : ({o}, {q}, {k}, {v}, {o}, {lse}{extra_type}) -> ({q}, {k}, {v})\n"
                f"  return %dq, %dk, %dv : {q}, {k}, {v}\n}}\n")


# The CPU schedule's query tile (fa3-select-schedule, target cpu), which
# the PackGQA rule weighs on the CPU.
CPU_BLOCK_M = 64
# The rows of one Hopper consumer warpgroup: with PackGQA they must hold
# whole queries, so the group Hq / Hkv must divide it (and a CPU tile's 64
# rows must hold at least one query's group).
PACK_GQA_ROWS = 64


def resolve_pack_gqa(pack_gqa, num_heads, num_kv_heads, fp8, should_pack):
    """fa3.attention's `pack_gqa`: True/False as given (checked), or for
    None fa3's rule, `should_pack()` (FlashAttention-3's: pack when the
    packed tiles are fuller than 0.9x the unpacked ones). False without a
    group to pack (Hq = Hkv)."""
    if pack_gqa is not None and not isinstance(pack_gqa, bool):
        raise TypeError(f"pack_gqa must be a bool or None, got {type(pack_gqa).__name__}")
    group = num_heads // num_kv_heads
    if group == 1 or pack_gqa is False:
        return False
    reason = None
    if fp8:
        reason = "the FP8 kernels do not pack query heads"
    elif PACK_GQA_ROWS % group:
        reason = (f"the group of {num_heads} / {num_kv_heads} = {group} query heads must divide "
                  f"{PACK_GQA_ROWS} (the rows of one tile's warpgroup hold whole queries)")
    if pack_gqa is None:
        return reason is None and bool(should_pack())
    if reason is not None:
        raise ValueError(f"pack_gqa=True: {reason}")
    return True


def check_options(causal, softmax_scale, window_size, softcap, head_dim):
    """Validates the keyword options; returns (causal, scale, window, softcap)
    resolved. Raises TypeError/ValueError naming the argument."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if softmax_scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    else:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
            raise TypeError(f"softmax_scale must be a float or None, got {type(softmax_scale).__name__}")
        scale = float(softmax_scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"softmax_scale must be positive and finite, got {softmax_scale}")
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size)):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    left, right = window_size
    if left < -1 or right < -1:
        raise ValueError(f"window_size entries must be >= -1 (-1: unbounded), got {tuple(window_size)}")
    if causal and right > 0:
        raise ValueError(f"window_size right bound must be -1 or 0 with causal=True, got {right}")
    if causal:
        right = -1  # causal already bounds the right side
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a float, got {type(softcap).__name__}")
    softcap = float(softcap)
    if not (math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"softcap must be >= 0 and finite (0: off), got {softcap}")
    return causal, scale, (left, right), softcap


def check_dropout(dropout_p, dropout_seed, dropout_offset, seed_required=True):
    """Validates the dropout options; returns (p, rng): p as a float (0:
    off) and rng the int64 [2] numpy array (seed, offset) the compiled
    functions take (None when off, or when the seed is None and not
    `seed_required`: the caller draws one). The seed is any int in [-2^63,
    2^64) (taken as its 64 bits); the offset one in [0, 2^64), of which the
    Philox counter uses the low 32 bits."""
    import numpy as np

    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float, got {type(dropout_p).__name__}")
    p = float(dropout_p)
    if not (0.0 <= float(np.float32(p)) < 1.0):
        raise ValueError(f"dropout_p must be in [0, 1) (as a float32), got {dropout_p}")
    for name, value, low in (("dropout_seed", dropout_seed, -(1 << 63)), ("dropout_offset", dropout_offset, 0)):
        if value is None and name == "dropout_seed":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not low <= int(value) < (1 << 64):
            raise ValueError(f"{name} must be in [{low}, 2**64), got {value}")
    if p == 0.0:
        return 0.0, None
    if dropout_seed is None:
        if not seed_required:
            return p, None
        raise ValueError("dropout_p > 0 needs dropout_seed (an int): the mask is a function of it, and a "
                         "backward regenerates the same mask from the same seed and offset")
    words = [int(dropout_seed) % (1 << 64), int(dropout_offset) % (1 << 64)]
    return p, np.array(words, dtype=np.uint64).view(np.int64)


def check_last_dim_contiguous(name, t):
    """Raises ValueError unless the last dim of `t` (a torch tensor or a
    numpy array) is contiguous: the kernels read rows of the head dim,
    whatever the other strides (those inputs are copied to a dense layout
    first). An empty input, or a last dim of size 1, has no stride to
    keep (numpy and torch give them arbitrary ones; nothing is read)."""
    if hasattr(t, "itemsize") and hasattr(t, "strides"):  # numpy
        if t.size and t.shape[-1] > 1 and t.strides[-1] != t.itemsize:
            raise ValueError(f"{name}'s last dim must be contiguous (stride {t.itemsize} bytes), "
                             f"got strides {t.strides}")
    elif t.numel() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}'s last dim must be contiguous (stride 1), got strides {tuple(t.stride())}")


def check_shapes(q_shape, k_shape, v_shape, cuda):
    """Validates [B, S, H, D] shapes; returns (Hq, Hkv, D, Dv)."""
    for name, shape, layout in (("q", q_shape, "(batch, seqlen_q, num_heads, head_dim)"),
                                ("k", k_shape, "(batch, seqlen_k, num_kv_heads, head_dim)"),
                                ("v", v_shape, "(batch, seqlen_k, num_kv_heads, head_dim_v)")):
        if len(shape) != 4:
            raise ValueError(f"{name} must have 4 dims {layout}, got shape {tuple(shape)}")
    if not (q_shape[0] == k_shape[0] == v_shape[0]):
        raise ValueError(f"batch sizes differ: q has {q_shape[0]}, k has {k_shape[0]}, v has {v_shape[0]}")
    if k_shape[1] != v_shape[1]:
        raise ValueError(f"k and v sequence lengths differ: {k_shape[1]} vs {v_shape[1]}")
    hq, hkv = q_shape[2], k_shape[2]
    if v_shape[2] != hkv:
        raise ValueError(f"k has {hkv} heads but v has {v_shape[2]}")
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"q's {hq} heads must be a positive multiple of k/v's {hkv} heads (GQA)")
    d, dv = q_shape[3], v_shape[3]
    if k_shape[3] != d:
        raise ValueError(f"head dims differ: q has {d}, k has {k_shape[3]}")
    for name, dim in (("q/k", d), ("v", dv)):
        if dim <= 0 or dim > 256 or dim % 8:
            raise ValueError(f"{name} head dim must be a multiple of 8 in [8, 256], got {dim}")
    if cuda:
        if d not in CUDA_HEAD_DIMS:
            raise ValueError(f"head_dim must be one of {CUDA_HEAD_DIMS} for a CUDA kernel, got {d} "
                             "(fa3.attention runs other multiples of 8 up to 256 at the next of these; "
                             "the CPU compiles any)")
        if dv != d:
            raise ValueError(f"v's head dim must equal q's for a CUDA kernel, got {dv} vs {d} "
                             "(fa3.attention pads both to one compiled head dim)")
    return hq, hkv, d, dv
