"""One attention backward test case: its MLIR functions, inputs, run, error
bound, and a NumPy model of the kernel's rounding (to test the bound itself)."""

import dataclasses
import subprocess

import ml_dtypes
import numpy as np

from attention_case import U32, UNIT_ROUNDOFF, Case
from fa3 import reference

GRAD_NAMES = ("dq", "dk", "dv")

# Half the spacing of each storage type's subnormals: rounding a value below
# the smallest normal moves it by at most this much (on top of u relative).
# Matters for f16 only (P or dS below 6e-5); bf16 and f32 share f32's range.
UNDERFLOW = {"f32": 2.0**-150, "f16": 2.0**-25, "bf16": 2.0**-134}


def to_storage(x, dtype):
    """x rounded to `dtype`, as the numpy array fa3-run reads and writes:
    float32 for f32 and bf16 (rounded to bf16), float16 for f16."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return x.astype(ml_dtypes.bfloat16).astype(np.float32)
    return x


def _round32(x, dtype):
    """An f32 array rounded to `dtype` and widened back to f32."""
    return to_storage(x, dtype).astype(np.float32)


def run_fa3(fa3_run, tmp_path, mlir, function, inputs, outputs, block_m=0, block_n=0, extra=()):
    """Runs `function` of `mlir` on the named input arrays; returns the named
    outputs. Output files are poisoned with NaN first: a run that writes
    nothing must not pass on stale or default data. `extra`: more fa3-run
    flags (e.g. --grid)."""
    src = tmp_path / f"{function}.mlir"
    src.write_text(mlir)
    cmd = [fa3_run, str(src), f"--function={function}", "--device=cpu"]
    for name, x in inputs:
        path = tmp_path / f"{name}.npy"
        np.save(path, np.ascontiguousarray(x))
        cmd.append(f"--input=@{path}")
    out_paths = [tmp_path / f"{name}.npy" for name in outputs]
    for path in out_paths:
        np.save(path, np.full((1,), np.nan, np.float32))
        cmd.append(f"--output=@{path}")
    if block_m:
        cmd.append(f"--block-m={block_m}")
    if block_n:
        cmd.append(f"--block-n={block_n}")
    cmd += list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"fa3-run failed:\n{proc.stderr}"
    return [np.load(path) for path in out_paths]


@dataclasses.dataclass
class GradCase(Case):
    """Same fields and id as the forward's Case."""

    def types(self):
        """(q, k, v, o, lse) tensor types; dq, dk, dv, do share q, k, v, o's."""
        b, sq, sk = (("?", "?", "?") if self.dynamic else (self.b, self.sq, self.sk))
        e = self.dtype
        return (
            f"tensor<{b}x{sq}x{self.hq}x{self.d}x{e}>",
            f"tensor<{b}x{sk}x{self.hkv}x{self.d}x{e}>",
            f"tensor<{b}x{sk}x{self.hkv}x{self.head_dim_v}x{e}>",
            f"tensor<{b}x{sq}x{self.hq}x{self.head_dim_v}x{e}>",
            f"tensor<{b}x{self.hq}x{sq}xf32>",
        )

    def attr_dict(self):
        attrs = []
        if self.causal:
            attrs.append("causal")
        if self.scale is not None:
            attrs.append(f"scale = {self.scale!r} : f32")
        if self.window != (-1, -1):
            attrs.append(f"window = array<i64: {self.window[0]}, {self.window[1]}>")
        if self.softcap:
            attrs.append(f"softcap = {self.softcap!r} : f32")
        return " {" + ", ".join(attrs) + "}" if attrs else ""

    def mlir(self):
        """The function `attn_bwd` taking do, q, k, v, o, lse and returning
        dq, dk, dv."""
        qt, kt, vt, ot, lt = self.types()
        a = self.attr_dict()
        return (
            f"func.func @attn_bwd(%do: {ot}, %q: {qt}, %k: {kt}, %v: {vt}, %o: {ot}, %lse: {lt})"
            f" -> ({qt}, {kt}, {vt}) {{\n"
            f"  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse{a}"
            f" : ({ot}, {qt}, {kt}, {vt}, {ot}, {lt}) -> ({qt}, {kt}, {vt})\n"
            f"  return %dq, %dk, %dv : {qt}, {kt}, {vt}\n"
            "}\n"
        )

    def train_step_mlir(self):
        """The function `train_step` taking q, k, v, do and returning
        o, lse, dq, dk, dv: fa3.attention, then fa3.attention_grad on its
        results."""
        qt, kt, vt, ot, lt = self.types()
        a = self.attr_dict()
        return (
            f"func.func @train_step(%q: {qt}, %k: {kt}, %v: {vt}, %do: {ot})"
            f" -> ({ot}, {lt}, {qt}, {kt}, {vt}) {{\n"
            f"  %o, %lse = fa3.attention %q, %k, %v{a} : ({qt}, {kt}, {vt}) -> ({ot}, {lt})\n"
            f"  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse{a}"
            f" : ({ot}, {qt}, {kt}, {vt}, {ot}, {lt}) -> ({qt}, {kt}, {vt})\n"
            f"  return %o, %lse, %dq, %dk, %dv : {ot}, {lt}, {qt}, {kt}, {vt}\n"
            "}\n"
        )

    def forward_case(self):
        """The forward Case of the same problem (for its bounds and check)."""
        return Case(**dataclasses.asdict(self))

    def kwargs(self):
        return dict(causal=self.causal, scale=self.scale, window=self.window, softcap=self.softcap)

    def grad_inputs(self, rng):
        """Fresh N(0, 1) q, k, v, do rounded to the dtype (storage arrays)."""
        q, k, v = self.inputs(rng)
        do = to_storage(rng.standard_normal((self.b, self.sq, self.hq, self.head_dim_v)), self.dtype)
        return q, k, v, do

    def forward_reference(self, q, k, v):
        """The float64 reference forward's O rounded to the dtype and its LSE
        rounded to f32: the o and lse operands of the backward."""
        o, lse = reference.attention(*(x.astype(np.float64) for x in (q, k, v)), **self.kwargs())
        return to_storage(o, self.dtype), lse.astype(np.float32)

    def run(self, fa3_run, tmp_path, rng, extra=()):
        """Runs @attn_bwd (with more fa3-run flags `extra`); returns ((q, k,
        v, do, o, lse), (dq, dk, dv))."""
        q, k, v, do = self.grad_inputs(rng)
        o, lse = self.forward_reference(q, k, v)
        inputs = (("do", do), ("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse))
        grads = run_fa3(
            fa3_run, tmp_path, self.mlir(), "attn_bwd", inputs, GRAD_NAMES, self.block_m, self.block_n, extra
        )
        return (q, k, v, do, o, lse), grads

    def run_train_step(self, fa3_run, tmp_path, rng):
        """Runs @train_step; returns ((q, k, v, do), (o, lse, dq, dk, dv))."""
        q, k, v, do = self.grad_inputs(rng)
        inputs = (("q", q), ("k", k), ("v", v), ("do", do))
        outputs = ("o", "lse") + GRAD_NAMES
        results = run_fa3(
            fa3_run, tmp_path, self.train_step_mlir(), "train_step", inputs, outputs, self.block_m, self.block_n
        )
        return (q, k, v, do), results

    # -- checking ---------------------------------------------------------

    def check(self, q, k, v, do, grads, o_err=None, lse_err=None):
        """Compares dq, dk, dv with the exact float64 gradient at the given
        (rounded) q, k, v, do, under the bound of `bounds`. o_err / lse_err:
        bounds on the error of the o and lse operands the kernel was given
        (default: the rounding of the exact ones). Returns the worst ratio of
        error to bound over the three results."""
        q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
        refs = reference.attention_grad(q, k, v, do, **self.kwargs())
        for name, g, ref in zip(GRAD_NAMES, grads, refs):
            assert g.shape == ref.shape, f"{name} shape {g.shape}, expected {ref.shape}"
            assert not np.isnan(g).any(), f"NaN in {name}"
            if self.dtype != "f32":
                g32 = np.asarray(g, np.float32)
                assert (_round32(g32, self.dtype) == g32).all(), f"{name} is not rounded to {self.dtype}"

        # Structural zeros, exactly: dq of rows that see no key, dk and dv of
        # keys that no query sees (their P column is 0).
        mask = reference.visible(self.sq, self.sk, self.causal, self.window)
        dq, dk, dv = (np.asarray(g, np.float64) for g in grads)
        assert (dq[:, ~mask.any(axis=1)] == 0).all(), "dq of a row that sees no key is not 0"
        unseen = ~mask.any(axis=0)
        assert (dk[:, unseen] == 0).all(), "dk of a key that no query sees is not 0"
        assert (dv[:, unseen] == 0).all(), "dv of a key that no query sees is not 0"

        bounds = self.bounds(q, k, v, do, refs, o_err=o_err, lse_err=lse_err)
        worst = 0.0
        for name, g, ref, bound in zip(GRAD_NAMES, (dq, dk, dv), refs, bounds):
            err = np.abs(g - ref)
            ratio = (err / bound).max(initial=0.0)
            assert (err <= bound).all(), (
                f"{name} error {err.max():.3g} exceeds its bound (worst ratio {ratio:.3g}, "
                f"bound {bound.flat[np.argmax(err / bound)]:.3g}, |{name}| max {np.abs(ref).max():.3g})"
            )
            worst = max(worst, ratio)
        return worst

    def bounds(self, q, k, v, do, refs, o_err=None, lse_err=None):
        """Per-element bounds on |kernel - exact| for dq, dk, dv, from where
        the kernel rounds (derivation in docs/Testing.md, "Backward bounds").

        u is the storage type's unit roundoff, u32 = 2^-24; "row" quantities
        are per (batch, query head, query row). All inputs float64.

        * Δs: the f32 score, scaling and softcap error, as in the forward:
          u32 (D·rowmax Σ_d|q_d k_d|·scale + 8 (rowmax + 1)).
        * P = exp(scale·T - LSE): relative error
          δ = Δs + ΔLSE + u32 (rowmax + |LSE| + 4)  (the LSE operand's error,
          the subtraction, exp).
        * dP = dO Vᵀ in f32: Dv·u32·Σ|dO||V|.
        * Delta = rowsum(dO ∘ O): Σ|dO| ΔO + Dv·u32·Σ|dO||O|.
        * dS = P (dP - Delta) f: E = P [(δ + 3u32) |dP - Delta| f
          + (ΔdP + ΔDelta) f + |dP - Delta| Δf], f = 1 - (s/cap)² and
          Δf = 2 Δs / cap + 4 u32 with softcap (f = 1, Δf = 0 without);
          then rounded to the storage type: E' = E + u (|dS| + E).
        * dQ = scale Σ_keys round(dS) K: scale (Σ E'|K| + Sk u32 Σ (|dS| + E')|K|),
          dK likewise over the G·Sq (query head, row) pairs of a kv head;
          plus 2 u32 for the scale product and u for the final rounding.
        * dV = Σ round(P) dO: Σ P (δ + u) |dO| + G·Sq·u32 Σ P |dO|, plus u |dV|.

        Every rounding to f16 also adds up to 2^-25 absolute (subnormals).
        Each is doubled (second-order terms, the few-ulp libm exp and tanh),
        plus 1e-10 absolute for f32 underflow of P.
        """
        u = UNIT_ROUNDOFF[self.dtype]
        b, sq, hq, d = q.shape
        sk, hkv, dvd = k.shape[1], k.shape[2], v.shape[3]
        g = hq // hkv
        scale = self.scale if self.scale is not None else 1.0 / np.sqrt(d)
        cap = self.softcap
        kk = np.repeat(k, g, axis=2)
        vv = np.repeat(v, g, axis=2)
        o_ref, lse = reference.attention(q, k, v, **self.kwargs())
        eta = UNDERFLOW[self.dtype]
        if o_err is None:
            o_err = u * np.abs(o_ref) + eta
        if lse_err is None:
            lse_err = U32 * np.abs(np.where(np.isfinite(lse), lse, 0.0))
        finite = np.isfinite(lse)
        lse0 = np.where(finite, lse, 0.0)[..., None]  # [B, Hq, Sq, 1]

        z = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
        s = cap * np.tanh(z / cap) if cap > 0 else z
        mask = reference.visible(sq, sk, self.causal, self.window)
        p = np.where(mask & finite[..., None], np.exp(np.minimum(s - lse0, 0.0)), 0.0)

        abs_dot = np.einsum("bqhd,bkhd->bhqk", np.abs(q), np.abs(kk)) * scale
        row_abs = abs_dot.max(axis=-1, initial=0.0)[..., None]
        ds = U32 * (d * row_abs + 8 * (row_abs + 1))
        delta_p = ds + np.asarray(lse_err)[..., None] + U32 * (row_abs + np.abs(lse0) + 4)

        dp = np.einsum("bqhd,bkhd->bhqk", do, vv)
        dp_err = dvd * U32 * np.einsum("bqhd,bkhd->bhqk", np.abs(do), np.abs(vv))
        delta = np.einsum("bqhd,bqhd->bhq", do, o_ref)[..., None]
        delta_err = (
            np.einsum("bqhd,bqhd->bhq", np.abs(do), o_err)
            + dvd * U32 * np.einsum("bqhd,bqhd->bhq", np.abs(do), np.abs(o_ref) + o_err)
        )[..., None]
        diff = np.abs(dp - delta)
        if cap > 0:
            f = 1.0 - (s / cap) ** 2
            df = 2 * ds / cap + 4 * U32
        else:
            f, df = 1.0, 0.0
        e = p * ((delta_p + 3 * U32) * diff * f + (dp_err + delta_err) * f + diff * df)
        ds_abs = p * diff * f
        e = e + u * (ds_abs + e) + eta * (p > 0)  # rounded to the storage type
        mag = ds_abs + e

        def group_sum(x):  # [B, Sk, Hq, ...] -> [B, Sk, Hkv, ...]
            return x.reshape(b, sk, hkv, g, x.shape[-1]).sum(axis=3)

        dq, dk, dv = (np.abs(r) for r in refs)
        dq_b = scale * (
            np.einsum("bhqk,bkhd->bqhd", e, np.abs(kk)) + sk * U32 * np.einsum("bhqk,bkhd->bqhd", mag, np.abs(kk))
        )
        dk_b = scale * group_sum(
            np.einsum("bhqk,bqhd->bkhd", e, np.abs(q)) + g * sq * U32 * np.einsum("bhqk,bqhd->bkhd", mag, np.abs(q))
        )
        dv_b = group_sum(
            np.einsum("bhqk,bqhd->bkhd", p * (delta_p + u) + eta * (p > 0), np.abs(do))
            + g * sq * U32 * np.einsum("bhqk,bqhd->bkhd", p, np.abs(do))
        )
        out = []
        for bound, ref, extra in ((dq_b, dq, 2 * U32), (dk_b, dk, 2 * U32), (dv_b, dv, 0.0)):
            bound = bound + extra * ref
            out.append(2 * (bound + u * (ref + bound) + eta) + 1e-10)
        return out

    # -- a model of the kernel, for testing the bound ----------------------

    def emulate(self, q, k, v, do, o, lse):
        """The kernel's arithmetic in NumPy f32, rounding where the CPU
        lowering rounds (P before dV, dS before dK and dQ, the three results;
        docs/Testing.md, "Backward bounds"). Takes the storage arrays;
        returns float64 (dq, dk, dv)."""
        f32 = np.float32
        q, k, v, do, o = (np.asarray(x, f32) for x in (q, k, v, do, o))
        lse = np.asarray(lse, f32)
        b, sq, hq, d = q.shape
        sk, hkv = k.shape[1], k.shape[2]
        g = hq // hkv
        scale = f32(self.scale if self.scale is not None else 1.0 / np.sqrt(d))
        kk = np.repeat(k, g, axis=2)
        vv = np.repeat(v, g, axis=2)
        s = np.einsum("bqhd,bkhd->bhqk", q, kk)
        if self.softcap > 0:
            c = f32(self.softcap)
            t = (c / scale) * np.tanh(s * scale / c)
        else:
            t = s
        mask = reference.visible(sq, sk, self.causal, self.window)
        finite = np.isfinite(lse)[..., None]
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp(scale * t - np.where(finite, lse[..., None], f32(0)))
        p = np.where(mask & finite, p, f32(0)).astype(f32)
        delta = np.einsum("bqhd,bqhd->bhq", do, o)[..., None]
        dv = np.einsum("bhqk,bqhd->bkhd", _round32(p, self.dtype), do)
        dp = np.einsum("bqhd,bkhd->bhqk", do, vv)
        ds = p * (dp - delta)
        if self.softcap > 0:
            ds = ds * (f32(1) - (t * scale / c) ** 2)
        ds = _round32(ds, self.dtype)
        dq = scale * np.einsum("bhqk,bkhd->bqhd", ds, kk)
        dk = scale * np.einsum("bhqk,bqhd->bkhd", ds, q)
        dk = dk.reshape(b, sk, hkv, g, d).sum(axis=3, dtype=f32)
        dv = dv.reshape(b, sk, hkv, g, v.shape[3]).sum(axis=3, dtype=f32)
        return tuple(to_storage(x, self.dtype).astype(np.float64) for x in (dq, dk, dv))
