"""scripts/gpu/ab_table.py, the A/B benchmark's table, on synthetic runs:
per-round values of both sides, the change of the means, rows only one
side has are left out, FP8 rows compare the fa3_fp8 column, backward rows
the deterministic column too."""
import importlib.util
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ab_table", ROOT / "scripts" / "gpu" / "ab_table.py")
ab_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_table)


def row(direction="fwd", d=128, causal=True, seqlen=512, **values):
    return {"direction": direction, "d": d, "causal": causal, "seqlen": seqlen, "batch": 32,
            "heads": 16, "fa3_schedule": "128x128p", **values}


def write_runs(tmp_path, runs):
    for name, rows in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench.json").write_text(json.dumps({"meta": {}, "rows": rows}))


def test_table_means_and_rounds(tmp_path):
    write_runs(tmp_path, {
        "this-1": [row(fa3=300.0, cudnn=320.0), row(seqlen=1024, fa3=400.0), {"direction": "fp8-gemm", "tflops": 1300}],
        "this-2": [row(fa3=310.0, cudnn=318.0), row(seqlen=1024, fa3=410.0)],
        "other-1": [row(fa3=250.0, cudnn=322.0)],
        "other-2": [row(fa3=260.0, cudnn=316.0), row(seqlen=1024, fa3=390.0)],
    })
    runs = {side: [ab_table.load(tmp_path / f"{side}-{r}" / "bench.json") for r in (1, 2)]
            for side in ("this", "other")}
    lines = ab_table.table(runs["this"], runs["other"])
    assert len(lines) == 3  # header, separator, one shape: 1024 lacks an 'other' round
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[5] == "250 / 260" and cells[6] == "300 / 310"
    assert cells[7] == f"{100 * (305 / 255 - 1):+.1f}%"  # +19.6%
    assert cells[8] == "319"


def test_fp8_rows_compare_the_fp8_column(tmp_path):
    fp8 = dict(direction="fwd-fp8", seqlen=8192)
    write_runs(tmp_path, {"this-1": [row(**fp8, fa3_bf16=600.0, fa3_fp8=880.0)],
                          "other-1": [row(**fp8, fa3_bf16=650.0, fa3_fp8=800.0)]})
    lines = ab_table.table([ab_table.load(tmp_path / "this-1" / "bench.json")],
                           [ab_table.load(tmp_path / "other-1" / "bench.json")])
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[5:8] == ["800", "880", "+10.0%"]
    assert cells[8] == "n/a"


def test_backward_rows_compare_the_deterministic_column_too(tmp_path):
    bwd = dict(direction="bwd", seqlen=4096)
    write_runs(tmp_path, {"this-1": [row(**bwd, fa3=400.0, fa3_deterministic=260.0, cudnn=410.0)],
                          "other-1": [row(**bwd, fa3=400.0, fa3_deterministic=200.0, cudnn=410.0)]})
    lines = ab_table.table([ab_table.load(tmp_path / "this-1" / "bench.json")],
                           [ab_table.load(tmp_path / "other-1" / "bench.json")])
    assert len(lines) == 4
    plain, det = ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])
    assert plain[0] == "bwd" and plain[5:8] == ["400", "400", "+0.0%"]
    assert det[0] == "bwd det" and det[5:8] == ["200", "260", "+30.0%"]
