"""Shared by the fa3-cast-fp8 tests (test_cast_fp8_cpu.py here and
test/Integration/GPU/test_cast_fp8_gpu.py): running a function through
fa3-run on .npy files, and the MLIR of an attention marked `fp8` and of the
explicit chain fa3-cast-fp8 should turn it into."""

import subprocess

import numpy as np

import fp8_model


def run(fa3_run, tmp_path, src, inputs, outputs, device="cpu"):
    path = tmp_path / "f.mlir"
    path.write_text(src)
    for i, x in enumerate(inputs):
        np.save(tmp_path / f"in{i}.npy", np.asarray(x, np.float32))
    for i in range(outputs):
        np.save(tmp_path / f"out{i}.npy", np.full((1,), np.nan, np.float32))
    proc = subprocess.run([fa3_run, str(path), "--function=f", f"--device={device}"]
                          + [f"--input=@{tmp_path}/in{i}.npy" for i in range(len(inputs))]
                          + [f"--output=@{tmp_path}/out{i}.npy" for i in range(outputs)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return [np.load(tmp_path / f"out{i}.npy").astype(np.float64) for i in range(outputs)]


def attention_src(hq, hkv, d, attrs):
    qt, kt = f"tensor<?x?x{hq}x{d}xbf16>", f"tensor<?x?x{hkv}x{d}xbf16>"
    lt = f"tensor<?x{hq}x?xf32>"
    return (f"func.func @f(%q: {qt}, %k: {kt}, %v: {kt}) -> ({qt}, {lt}) {{\n"
            f"  %o, %lse = fa3.attention %q, %k, %v {{{attrs}}} : ({qt}, {kt}, {kt}) -> ({qt}, {lt})\n"
            f"  return %o, %lse : {qt}, {lt}\n}}\n")


def explicit_src(hq, hkv, d, causal, hadamard, seed):
    qt, kt = f"tensor<?x?x{hq}x{d}xbf16>", f"tensor<?x?x{hkv}x{d}xbf16>"
    q8t, k8t = (t.replace("bf16", "f8E4M3FN") for t in (qt, kt))
    dt, lt = f"tensor<?x{hkv}xf32>", f"tensor<?x{hq}x?xf32>"
    lines = [f"func.func @f(%q: {qt}, %k: {kt}, %v: {kt}) -> ({qt}, {lt}, {q8t}, {k8t}, {k8t}, {dt}, {dt}, {dt}) {{"]
    qin, kin, qin_t, kin_t = "%q", "%k", qt, kt
    if hadamard:
        qin_t, kin_t = qt.replace("bf16", "f32"), kt.replace("bf16", "f32")
        lines += [f"  %qh = fa3.hadamard %q {{seed = {seed} : i64}} : {qt} -> {qin_t}",
                  f"  %kh = fa3.hadamard %k {{seed = {seed} : i64}} : {kt} -> {kin_t}"]
        qin, kin = "%qh", "%kh"
    lines += [f"  %q8, %qd = fa3.quantize {qin} : {qin_t} -> {q8t}, {dt}",
              f"  %k8, %kd = fa3.quantize {kin} : {kin_t} -> {k8t}, {dt}",
              f"  %v8, %vd = fa3.quantize %v : {kt} -> {k8t}, {dt}",
              f"  %o, %lse = fa3.attention %q8, %k8, %v8, %qd, %kd, %vd{' {causal}' if causal else ''} : "
              f"({q8t}, {k8t}, {k8t}, {dt}, {dt}, {dt}) -> ({qt}, {lt})",
              f"  return %o, %lse, %q8, %k8, %v8, %qd, %kd, %vd : {qt}, {lt}, {q8t}, {k8t}, {k8t}, {dt}, {dt}, {dt}",
              "}"]
    return "\n".join(lines) + "\n"


def run_attribute_and_chain(fa3_run, tmp_path, q, k, v, causal, hadamard, seed, device="cpu"):
    """Runs the attention marked `fp8` and the explicit chain on bf16 q, k,
    v; checks that they agree exactly and that the chain's quantized inputs
    match fp8_model.quantize (bit-exact without Hadamard; with it, the f32
    butterflies may put a rare value on the other side of an e4m3 tie from
    the float64 product). Returns (o, lse, q8, k8, v8, qd, kd, vd)."""
    hq, hkv, d = q.shape[2], k.shape[2], q.shape[3]
    attrs = ("causal, " if causal else "") + f"fp8 = #fa3.fp8<hadamard = {str(hadamard).lower()}, seed = {seed}>"
    o, lse = run(fa3_run, tmp_path, attention_src(hq, hkv, d, attrs), [q, k, v], 2, device=device)
    # fa3-cast-fp8's rewrite is the explicit chain of ops.
    o2, lse2, q8, k8, v8, qd, kd, vd = run(fa3_run, tmp_path, explicit_src(hq, hkv, d, causal, hadamard, seed),
                                           [q, k, v], 8, device=device)
    np.testing.assert_array_equal(o, o2)
    np.testing.assert_array_equal(lse, lse2)

    qh, kh = q, k
    if hadamard:
        m = fp8_model.hadamard_matrix(d, seed)
        qh, kh = ((x.astype(np.float64) @ m).astype(np.float32) for x in (q, k))
    for got, got_descale, x in ((q8, qd, qh), (k8, kd, kh), (v8, vd, v)):
        want, want_descale = fp8_model.quantize(x, hkv)
        np.testing.assert_allclose(got_descale, want_descale, rtol=1e-6 if hadamard else 0)
        if hadamard and x is not v:
            assert np.mean(got == want) >= 0.999
            np.testing.assert_allclose(got, want, rtol=2.0 ** -3, atol=2.0 ** -9)
        else:
            np.testing.assert_array_equal(got, want)
    return o, lse, q8, k8, v8, qd, kd, vd
