"""benchmarks/bench_attention.py: both sides compute the same attention, and the page shows every case and pass."""

import torch

from benchmarks import bench_attention


def test_both_sides_compute_the_same_attention_at_a_case_with_padding():
    case = bench_attention.Case("small", rows=9, queries=3, keys=6)
    query, key, value, allowed = bench_attention.inputs(case, grad=False)
    assert not allowed[1:8, :, :, 0].any() and allowed[0, :, :, 0].all()  # rows 1-7 left-padded, row 0 not
    seen = allowed.any(-1)[:, 0]  # a padding query that sees no key is read by nothing (the two sides differ there)
    assert not seen.all()
    with torch.no_grad():
        torch.testing.assert_close(bench_attention.sdpa(query, key, value, allowed, 0.25)[seen],
                                   bench_attention.blas(query, key, value, allowed, 0.25)[seen], rtol=0, atol=2e-6)


def test_the_page_has_each_case_in_both_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_attention, "CASES", (bench_attention.Case("tiny", rows=2, queries=3, keys=5),))
    out = tmp_path / "bench_attention.md"
    bench_attention.main(["--repeats", "2", "--inner", "1", "--out", str(out)])
    page = out.read_text()
    rows = [line for line in page.splitlines() if line.startswith("| tiny |")]
    assert [row.split(" | ")[2] for row in rows] == ["forward", "forward and backward"]
    for row in rows:
        difference = float(row.rstrip(" |").split(" | ")[-1])
        assert difference < 1e-5  # the sides agree: a fast wrong attention would show here
