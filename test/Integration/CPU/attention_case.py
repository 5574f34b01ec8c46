"""One attention test case: its MLIR function, inputs, run and error bound."""

import dataclasses
import os
import subprocess

import ml_dtypes
import numpy as np

from fa3 import reference

# Unit roundoff of each storage type: rounding a value to it moves the value
# by at most u times its magnitude.
UNIT_ROUNDOFF = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
U32 = 2.0**-24


@dataclasses.dataclass
class Case:
    sq: int
    sk: int
    d: int = 64
    dtype: str = "f16"
    causal: bool = False
    window: tuple = (-1, -1)
    softcap: float = 0.0
    scale: float | None = None
    b: int = 1
    hq: int = 8
    hkv: int = 2
    dv: int | None = None
    dynamic: bool = True
    block_m: int = 0
    block_n: int = 0
    # A #fa3.schedule attribute written on the op (None: the cost model's).
    schedule: str | None = None
    # PackGQA: the hq / hkv heads of a kv head as rows of one tile.
    pack_gqa: bool = False

    @property
    def head_dim_v(self):
        return self.dv or self.d

    def id(self):
        parts = [f"b{self.b}", f"sq{self.sq}", f"sk{self.sk}", f"h{self.hq}x{self.hkv}", f"d{self.d}"]
        if self.dv:
            parts.append(f"dv{self.dv}")
        parts.append(self.dtype)
        if self.causal:
            parts.append("causal")
        if self.window != (-1, -1):
            parts.append(f"win{self.window[0]}_{self.window[1]}")
        if self.softcap:
            parts.append(f"cap{self.softcap:g}")
        if self.scale is not None:
            parts.append(f"scale{self.scale:g}")
        parts.append("dyn" if self.dynamic else "static")
        if self.block_m or self.block_n:
            parts.append(f"blk{self.block_m}x{self.block_n}")
        if self.pack_gqa:
            parts.append("pack")
        return "-".join(parts)

    def mlir(self):
        """The function `attn` taking q, k, v and returning o, lse."""
        b, sq, sk = (("?", "?", "?") if self.dynamic else (self.b, self.sq, self.sk))
        e = self.dtype
        qt = f"tensor<{b}x{sq}x{self.hq}x{self.d}x{e}>"
        kt = f"tensor<{b}x{sk}x{self.hkv}x{self.d}x{e}>"
        vt = f"tensor<{b}x{sk}x{self.hkv}x{self.head_dim_v}x{e}>"
        ot = f"tensor<{b}x{sq}x{self.hq}x{self.head_dim_v}x{e}>"
        lt = f"tensor<{b}x{self.hq}x{sq}xf32>"
        attrs = []
        if self.causal:
            attrs.append("causal")
        if self.scale is not None:
            attrs.append(f"scale = {self.scale!r} : f32")
        if self.window != (-1, -1):
            attrs.append(f"window = array<i64: {self.window[0]}, {self.window[1]}>")
        if self.softcap:
            attrs.append(f"softcap = {self.softcap!r} : f32")
        if self.schedule:
            attrs.append(f"schedule = {self.schedule}")
        if self.pack_gqa:
            attrs.append("pack_gqa")
        attr_dict = " {" + ", ".join(attrs) + "}" if attrs else ""
        return (
            f"func.func @attn(%q: {qt}, %k: {kt}, %v: {vt}) -> ({ot}, {lt}) {{\n"
            f"  %o, %lse = fa3.attention %q, %k, %v{attr_dict} : ({qt}, {kt}, {vt}) -> ({ot}, {lt})\n"
            f"  return %o, %lse : {ot}, {lt}\n"
            "}\n"
        )

    def inputs(self, rng):
        """Fresh N(0, 1) inputs, rounded to the case's dtype (kept as the numpy
        dtype fa3-run reads: float32 for f32 and bf16, float16 for f16)."""
        shapes = [
            (self.b, self.sq, self.hq, self.d),
            (self.b, self.sk, self.hkv, self.d),
            (self.b, self.sk, self.hkv, self.head_dim_v),
        ]
        arrays = []
        for shape in shapes:
            x = rng.standard_normal(shape).astype(np.float32)
            if self.dtype == "f16":
                x = x.astype(np.float16)
            elif self.dtype == "bf16":
                x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
            arrays.append(x)
        return arrays

    def run(self, fa3_run, tmp_path, rng):
        """Runs fa3-run; returns (inputs, o, lse)."""
        src = tmp_path / "attn.mlir"
        src.write_text(self.mlir())
        q, k, v = self.inputs(rng)
        paths = {}
        for name, x in (("q", q), ("k", k), ("v", v)):
            paths[name] = tmp_path / f"{name}.npy"
            np.save(paths[name], x)
        # Poison the outputs: a run that writes nothing must not pass on
        # stale or default data.
        o_path, lse_path = tmp_path / "o.npy", tmp_path / "lse.npy"
        np.save(o_path, np.full((1,), np.nan, np.float32))
        np.save(lse_path, np.full((1,), np.nan, np.float32))
        cmd = [fa3_run, str(src), "--function=attn", "--device=cpu"]
        cmd += [f"--input=@{paths[n]}" for n in ("q", "k", "v")]
        cmd += [f"--output=@{o_path}", f"--output=@{lse_path}"]
        if self.block_m:
            cmd.append(f"--block-m={self.block_m}")
        if self.block_n:
            cmd.append(f"--block-n={self.block_n}")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"fa3-run failed:\n{proc.stderr}"
        return (q, k, v), np.load(o_path), np.load(lse_path)

    def check(self, inputs, o, lse):
        """Compares with the float64 reference under the bound of `bounds`."""
        q, k, v = (x.astype(np.float64) for x in inputs)
        ref_o, ref_lse = reference.attention(
            q, k, v, causal=self.causal, scale=self.scale, window=self.window, softcap=self.softcap
        )
        assert o.shape == ref_o.shape, f"output shape {o.shape}, expected {ref_o.shape}"
        assert lse.shape == ref_lse.shape, f"lse shape {lse.shape}, expected {ref_lse.shape}"
        o = o.astype(np.float64)
        assert not np.isnan(o).any(), "NaN in the output"
        assert not np.isnan(lse).any(), "NaN in the LSE"
        # Rows that see no key: exactly O = 0 and LSE = -inf.
        empty = np.isneginf(ref_lse)
        np.testing.assert_array_equal(np.isneginf(lse), empty, "rows with LSE = -inf differ")
        empty_rows = np.moveaxis(empty, 1, 2)  # [B, Sq, Hq]
        assert (o[empty_rows] == 0).all(), "a row that sees no key is not 0"

        o_bound, lse_bound = self.bounds(q, k, v, ref_o, ref_lse)
        o_err = np.abs(o - ref_o)
        assert (o_err <= o_bound).all(), (
            f"O error {o_err.max():.3g} exceeds its bound "
            f"(worst ratio {(o_err / o_bound).max():.3g})"
        )
        finite = ~empty
        lse_err = np.abs(lse[finite] - ref_lse[finite])
        assert (lse_err <= lse_bound[finite]).all(), (
            f"LSE error {lse_err.max():.3g} exceeds its bound "
            f"(worst ratio {(lse_err / lse_bound[finite]).max():.3g})"
        )
        return o_err.max(initial=0.0), lse_err.max(initial=0.0)

    def bounds(self, q, k, v, ref_o, ref_lse):
        """Per-element error bounds, from where fa3 rounds (see docs/Testing.md):

        * scores: an f32 dot product of D terms is off by at most
          gamma_D * sum_d |q_d k_d| (Higham), gamma_D ~ D * u32, plus a few
          u32 of |s| for the scaling and exp2 argument;
        * P is rounded to the storage type before P V: each weight moves by
          u_type relatively, so O moves by at most u_type * max|v|;
        * O is rounded to the storage type: u_type * |O|;
        * the sums over Sk keys in f32: gamma_Sk * max|v| for O, gamma_Sk for l.
        A score error ds moves O by at most 2 * ds * max|v| and the LSE by ds.
        The bound is twice the sum, so a correct kernel passes with margin and
        an off-by-one mask or a lost rescale (errors of order |v|) does not.
        """
        u = UNIT_ROUNDOFF[self.dtype]
        d = q.shape[-1]
        scale = self.scale if self.scale is not None else 1.0 / np.sqrt(d)
        group = self.hq // self.hkv
        kk = np.repeat(k, group, axis=2)
        abs_dot = np.einsum("bqhd,bkhd->bhqk", np.abs(q), np.abs(kk)) * scale
        row_abs = abs_dot.max(axis=-1, initial=0.0)  # [B, Hq, Sq]
        ds = U32 * (d * row_abs + 8 * (row_abs + 1))
        vmax = np.abs(v).max(initial=0.0)
        sk = k.shape[1]
        ds_o = np.moveaxis(ds, 1, 2)[..., None]  # [B, Sq, Hq, 1]
        o_bound = 2 * (u * np.abs(ref_o) + u * vmax + 2 * ds_o * vmax + sk * U32 * vmax) + 1e-7
        lse_bound = 2 * (ds + U32 * (sk + 8) * (1 + np.abs(np.where(np.isfinite(ref_lse), ref_lse, 0))))
        return o_bound, lse_bound
