"""`zoo bench`: benchmark cards of tiny saved models. Behaviour only (rows, files, schema, errors),
never speed: one repeat, no warm-up, 4 new tokens."""

import json
import math

import pytest
import torch

import zoo
from zoo.bench import BenchRow, bench_lengths, benchmark, measure_length
from zoo.cli import main
from zoo.roofline import MatmulPeak, count_flops

FAST = dict(warmup=0, repeats=1, new_tokens=4)
FAST_ARGS = ["--warmup", "0", "--repeats", "1", "--new-tokens", "4"]
ROW_KEYS = {
    "seq_len", "forward_s", "forward_peak_bytes", "prompt_tokens", "new_tokens",
    "generate_tokens_per_s", "generate_peak_bytes", "train_step_s", "train_peak_bytes",
    "forward_flops", "generate_flops_per_token", "train_flops",
}  # fmt: skip
CARD_KEYS = {
    "format", "name", "model_type", "parameters", "context", "device", "hardware",
    "torch_version", "precision", "repeats", "warmup", "memory", "date", "zoo_version", "rows",
    "peak",
}  # fmt: skip
ONE_GFLOPS = MatmulPeak(dtype="float32", device="cpu", threads=1, gflops=1.0, shape=(8, 8, 8))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """save_pretrained folders of tiny models: a language model of context 1024, an image model
    of context 48, a sparse model of context 256 and an encoder-decoder."""
    root = tmp_path_factory.mktemp("bench_models")
    torch.manual_seed(0)
    zoo.create_model("transformer_lm_tiny", max_seq_len=1024).save_pretrained(root / "lm")
    zoo.create_model("image_transformer_tiny").save_pretrained(root / "image")
    zoo.create_model("sparse_transformer_tiny").save_pretrained(root / "sparse")
    zoo.create_model("transformer_tiny").save_pretrained(root / "seq2seq")
    return root


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and `--threads` changes it): restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_lengths_double_from_256_to_the_context():
    assert bench_lengths(4096) == [256, 512, 1024, 2048, 4096]
    assert bench_lengths(3072) == [256, 512, 1024, 2048, 3072]  # the context itself last
    assert bench_lengths(256) == [256]
    assert bench_lengths(48) == [48]  # a tiny model: its context alone
    assert bench_lengths(256, start=32) == [32, 64, 128, 256]  # encoder-decoders start at 32


def _assert_measured(row: BenchRow) -> None:
    for value in (row.forward_s, row.generate_tokens_per_s, row.train_step_s):
        assert math.isfinite(value) and value > 0
    for peak in (row.forward_peak_bytes, row.generate_peak_bytes, row.train_peak_bytes):
        assert peak is None or (isinstance(peak, int) and peak >= 0)
    assert row.prompt_tokens + row.new_tokens == row.seq_len and row.new_tokens >= 1
    for flops in (row.forward_flops, row.generate_flops_per_token, row.train_flops):
        assert isinstance(flops, int) and flops > 0
    assert row.train_flops > 2 * row.forward_flops  # the backward counts about twice the forward


@pytest.mark.parametrize(
    "folder, lengths",
    [("lm", [256, 512, 1024]), ("image", [48]), ("sparse", [256]), ("seq2seq", [32, 64])],
)
def test_a_row_per_length_up_to_the_context(saved, folder, lengths):
    card = benchmark(str(saved / folder), **FAST)
    assert [r.seq_len for r in card.rows] == lengths
    assert card.context == lengths[-1] and card.device == "cpu" and card.precision == "32-true"
    for row in card.rows:
        _assert_measured(row)
        assert row.new_tokens == 4  # the last 4 tokens of each length are decoded
    if card.memory.startswith("growth"):  # Linux: the peak resident set is measured
        assert all(r.train_peak_bytes is not None for r in card.rows)


def test_generation_is_capped_by_a_short_context(saved):
    (row,) = benchmark(str(saved / "image"), warmup=0, repeats=1, new_tokens=64).rows
    assert (row.prompt_tokens, row.new_tokens) == (1, 47)  # 48 positions in all


def test_measuring_leaves_the_model_as_it_was():
    """The training step's AdamW updates (and the routing centroids' k-means steps) are undone."""
    model = zoo.create_model("routing_transformer_tiny").eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    row = measure_length(model, 64, device=torch.device("cpu"), **FAST)
    _assert_measured(row)
    assert not model.training
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_other_precisions(saved, precision):
    card = benchmark(str(saved / "lm"), lengths=[256], precision=precision, peak=ONE_GFLOPS,
                     **FAST)  # fmt: skip
    assert card.precision == precision
    _assert_measured(card.rows[0])


def test_zoo_bench_prints_a_table_and_writes_the_card(saved, tmp_path, capsys):
    out = tmp_path / "card"
    main(["bench", str(saved / "lm"), "--lengths", "512", "256", "--threads", "1",
          "--out-dir", str(out), *FAST_ARGS])  # fmt: skip
    printed = capsys.readouterr().out
    assert "fwd ms" in printed and "gen tok/s" in printed and "bench.md" in printed
    assert {p.name for p in out.iterdir()} == {"bench.md", "bench.json", "bench.png"}

    data = json.loads((out / "bench.json").read_text())
    md = (out / "bench.md").read_text().splitlines()
    assert md[0] == f"# Benchmark of {saved / 'lm'} on {data['hardware']}"  # self-contained
    assert data["hardware"].endswith("(1 threads)")  # --threads, named with the CPU
    table = [line for line in md if line.startswith("|")]
    assert table[0].startswith("| length | forward (ms) | forward peak (MiB) | generation")
    assert [line.split("|")[1].strip() for line in table[2:4]] == ["256", "512"]  # sorted
    assert table[4].startswith("| length | forward (GFLOP/s) |")  # then the executed FLOP/s
    assert [line.split("|")[1].strip() for line in table[6:]] == ["256", "512"]
    assert "Executed FLOP/s" in printed and "%pk" in printed

    assert set(data) == CARD_KEYS and data["format"] == "zoo-bench/2"
    assert data["peak"]["dtype"] == "float32" and data["peak"]["gflops"] > 0
    assert data["peak"]["threads"] == 1 and len(data["peak"]["shape"]) == 3
    assert data["context"] == 1024 and data["model_type"] == "transformer_lm"
    assert data["parameters"] > 0 and data["torch_version"] == torch.__version__
    assert [r["seq_len"] for r in data["rows"]] == [256, 512]
    for r in data["rows"]:
        assert set(r) == ROW_KEYS
        _assert_measured(BenchRow(**r))
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_default_out_dir_is_bench_slash_the_name(saved, monkeypatch, capsys):
    monkeypatch.chdir(saved)
    main(["bench", "./sparse", *FAST_ARGS])
    md = (saved / "bench" / "sparse" / "bench.md").read_text()
    assert md.startswith("# Benchmark of ./sparse on ")


@pytest.mark.parametrize(
    "args, message",
    [
        (["no_such_checkpoint"], "no published checkpoint called 'no_such_checkpoint'"),
        (["{lm}", "--lengths", "256", "2048"], "[2048] outside 2..1024"),
        (["{lm}", "--device", "cuda"], "no CUDA device"),
        (["{lm}", "--device", "gpu0"], "is not a device"),
        (["{lm}", "--repeats", "0"], "--repeats must be >= 1"),
        (["{missing}"], "is not a directory"),
    ],
)
def test_bad_input_is_a_one_line_error(saved, tmp_path, args, message, capsys):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    folders = {"lm": saved / "lm", "seq2seq": saved / "seq2seq", "missing": saved / "missing"}
    args = [a.format(**folders) for a in args]
    with pytest.raises(SystemExit) as e:
        main(["bench", *args, "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("zoo bench: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_an_encoder_decoder_decodes_into_its_cache_as_translate_does(saved):
    """The generation row of an encoder-decoder times `decode` steps over a cache of the encoded
    source: the same logits as decoding the whole target at once (so it is the real loop)."""
    from zoo.bench import _prefill, _step

    model = zoo.from_pretrained(saved / "seq2seq")
    x = torch.randint(4, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        logits, cache = _prefill(model, x, 8)
        steps = [_step(model, x[:, t : t + 1], cache) for t in range(8, 12)]
        full = model(x, x).logits
    torch.testing.assert_close(torch.cat([logits, *steps], 1), full, atol=1e-5, rtol=1e-5)


def test_the_flop_counts_are_the_models_matrix_products(saved):
    """A forward's count is the one of its matrix products and attention: counted again around
    the same call it is equal; a decoding step counts about 2 FLOPs per weight it multiplies."""
    model = zoo.from_pretrained(saved / "lm")
    (row,) = benchmark(str(saved / "lm"), lengths=[256], peak=ONE_GFLOPS, **FAST).rows
    x = torch.randint(0, 256, (1, 256), generator=torch.Generator().manual_seed(256))
    with torch.no_grad():
        assert count_flops(lambda: model(x)) == row.forward_flops
    c = model.config
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head, attention = c.vocab_size * c.d_model, 4 * 256 * c.d_model * c.n_layers  # at most
    assert 2 * weights <= row.generate_flops_per_token <= 2 * (weights + head) + attention


def test_the_card_gives_each_rate_as_a_share_of_the_peak(saved, tmp_path):
    from zoo.bench import render_markdown

    card = benchmark(str(saved / "lm"), lengths=[256], peak=ONE_GFLOPS, **FAST)
    (row,) = card.rows
    assert row.gflops("forward") == pytest.approx(row.forward_flops / row.forward_s / 1e9)
    assert row.gflops("generate") == pytest.approx(
        row.generate_flops_per_token * row.generate_tokens_per_s / 1e9
    )
    md = render_markdown(card).splitlines()
    at = md.index(next(line for line in md if line.startswith("Executed FLOP/s.")))
    assert "1.0 GFLOP/s" in md[at] and "8 x 8 x 8" in md[at]
    assert md[at + 2].startswith("| length | forward (GFLOP/s) | forward (% of peak) |")
    cells = [c.strip() for c in md[at + 4].strip("|").split("|")]
    expected = [f"{100 * row.gflops(k):.0f} %" for k in ("forward", "generate", "train")]
    assert cells[0] == "256" and cells[2::2] == expected  # a peak of 1 GFLOP/s
    assert cells[1::2] == [f"{row.gflops(k):,.1f}" for k in ("forward", "generate", "train")]
