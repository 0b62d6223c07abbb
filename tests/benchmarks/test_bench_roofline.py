"""benchmarks/roofline.py runs and reports (timings themselves are never asserted)."""

import json

import pytest

from benchmarks import roofline as bench

TINY = {
    "lm train fp32": ("transformer_lm_tiny", "train", 2, 64, "float32"),
    "lm eval fp32": ("transformer_lm_tiny", "eval", 2, 64, "float32"),
    "lm decode fp32": ("transformer_lm_tiny", "decode", 1, 48, "float32"),
}


@pytest.mark.parametrize(
    "op, kind",
    [
        ("aten::mm", "matrix products"),
        ("aten::addmm", "matrix products"),
        ("aten::mkldnn_rnn_layer_backward", "matrix products"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("aten::_log_softmax_backward_data", "loss"),
        ("aten::nll_loss_forward", "loss"),
        ("aten::_fused_adamw_", "optimizer"),
        ("aten::_foreach_mul_", "optimizer"),
        ("aten::gelu_backward", "element-wise and norms"),
        ("aten::native_layer_norm", "element-wise and norms"),
    ],
)
def test_each_op_has_its_kind(op, kind):
    assert bench.kind_of(op) == kind


def test_decodings_flops_leave_out_the_prompt():
    steps = bench._decode_flops("transformer_lm_tiny", 1, 48)
    run, tokens = bench._case("transformer_lm_tiny", "decode", 1, 48, "float32")
    assert tokens == 48 - bench.DECODE_PROMPT
    assert 0 < steps < bench.count_flops(run)


def test_the_page_has_the_peak_every_case_and_the_shares(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "CASES", TINY)
    monkeypatch.setattr(bench, "PEAK_SHAPES", ((32, 32, 32), (64, 64, 64)))
    assert bench.main(["--dtypes", "float32", "--steps", "1", "--rounds", "1", "--profile",
                       "--out", str(tmp_path)]) == 0  # fmt: skip
    (md,) = tmp_path.glob("roofline_cpu_*.md")
    text = md.read_text()
    assert "| 32 x 32 x 32 |" in text and "| **peak** |" in text
    for name in TINY:
        assert f"| {name} |" in text
    data = json.loads(md.with_suffix(".json").read_text())
    shares = data["shares"]["lm train fp32"]
    assert set(shares) == set(bench.KINDS) and sum(shares.values()) == pytest.approx(1.0)
    assert shares["matrix products"] > 0 and shares["optimizer"] > 0
    (case,) = [c for c in data["cases"] if c["case"] == "lm eval fp32"]
    assert case["flops"] > 0 and case["gflops"] == pytest.approx(
        case["flops"] / case["seconds"] / 1e9
    )


def test_compile_adds_each_fp32_case_compiled_with_its_compile_time(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "CASES", {"lm eval fp32": TINY["lm eval fp32"]})
    monkeypatch.setattr(bench, "PEAK_SHAPES", ((32, 32, 32),))
    assert bench.main(["--steps", "1", "--rounds", "1", "--compile", "--out", str(tmp_path)]) == 0
    (md,) = tmp_path.glob("roofline_cpu_*.md")
    cases = {c["case"]: c for c in json.loads(md.with_suffix(".json").read_text())["cases"]}
    assert set(cases) == {"lm eval fp32", "lm eval fp32 compiled"}
    eager, compiled = cases["lm eval fp32"], cases["lm eval fp32 compiled"]
    assert compiled["flops"] == eager["flops"] and compiled["gflops"] > 0
    assert eager["compile_s"] is None and compiled["compile_s"] is not None
    assert "| lm eval fp32 compiled |" in md.read_text()


def test_a_case_that_does_not_compile_is_reported_not_fatal(tmp_path, monkeypatch):
    from torch._dynamo.exc import BackendCompilerFailed

    monkeypatch.setattr(bench, "CASES", {"lm eval fp32": TINY["lm eval fp32"]})
    monkeypatch.setattr(bench, "PEAK_SHAPES", ((32, 32, 32),))
    case = bench._case

    def failing(*args):
        run, tokens = case(*args[:5])
        if len(args) < 6 or not args[5]:
            return run, tokens

        def broken():
            raise BackendCompilerFailed(broken, RuntimeError("C++ compile error"), None)

        return broken, tokens

    monkeypatch.setattr(bench, "_case", failing)
    assert bench.main(["--steps", "1", "--rounds", "1", "--compile", "--out", str(tmp_path)]) == 0
    (md,) = tmp_path.glob("roofline_cpu_*.md")
    assert "| lm eval fp32 compiled | 2 x 64 | - | - | - | - | did not compile (RuntimeError: " \
           "C++ compile error) |" in md.read_text()  # fmt: skip
