"""python -m benchmarks.rotary runs and writes its table (timings are never asserted)."""

import torch

from benchmarks import rotary


def test_writes_a_row_per_dtype(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rotary.main(["--shape", "2", "16", "2", "8", "--repeats", "2", "--out", str(tmp_path)])
    text = (tmp_path / "rotary_cpu.md").read_text()
    assert "--shape 2 16 2 8 --repeats 2" in text and "batch 2, 16 positions, 2 heads of 8" in text
    rows = [line for line in text.splitlines() if line.startswith(("| bfloat16", "| float32"))]
    assert len(rows) == 2 and all(line.endswith("x |") for line in rows)


def test_the_composed_formula_is_the_same_turn():
    """The benchmark's baseline must compute what the zoo computes, or the race means nothing."""
    rope = rotary.RotaryEmbedding(8)
    x = torch.randn(2, 3, 16, 8)
    cos, sin = rope.angles(0, 16, x.device)
    torch.testing.assert_close(rotary.composed(x, cos, sin), rope(x), rtol=1e-6, atol=1e-6)
