"""Bits per byte by position in the window (`zoo evaluate SOURCE --by-position`): the buckets add up
to `zoo evaluate`'s number, extrapolation past the trained length (rotary / sinusoidal positions)
works and is labelled, learned positions refuse it, the files, the CLI and the model card."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from fakes import fake_run, pg19mini_test_books, word_salad

import zoo
from zoo.by_position import bits_by_position, position_table, save_position_profile
from zoo.cli import main
from zoo.data import ByteTextDataModule
from zoo.data.windows import EvalWindows
from zoo.drawing import plot_position_profiles
from zoo.errors import CheckpointError, ConfigError
from zoo.evaluation import evaluate
from zoo.hub import Metric
from zoo.loading import extended
from zoo.profiles import load_position_profile
from zoo.publishing import export_run, register

REPO = Path(__file__).resolve().parents[1]
T = 128  # transformer_lm_tiny's max_seq_len
# three tiny "test books": windows of 128, 128, 43 | 128, 71 | 49 targets (short last windows)
BOOK_SIZES = (300, 200, 50)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A data directory whose pg19mini test split is three short books (found before $ZOO_DATA_DIR)."""
    return pg19mini_test_books(tmp_path_factory.mktemp("data"), BOOK_SIZES)


def _save(tmp: Path, name: str, **overrides) -> str:
    torch.manual_seed(0)
    folder = tmp / name
    zoo.create_model("transformer_lm_tiny", **overrides).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """save_pretrained folders of the tiny Transformer with learned, rotary, sinusoidal positions."""
    tmp = tmp_path_factory.mktemp("models")
    return {p: _save(tmp, p, position=p) for p in ("learned", "rotary", "sinusoidal")}


def _window_lengths(sizes, context: int) -> list[int]:
    return [min(context, n - 1 - s) for n in sizes for s in range(0, n - 1, context)]


def test_buckets_add_up_to_the_bits_per_byte_of_evaluate(models, corpus):
    p = bits_by_position(models["learned"], bucket=48, data_dir=str(corpus), progress=False)
    lengths = _window_lengths(BOOK_SIZES, T)
    assert p.windows == len(lengths) == 6 and p.targets == sum(lengths)
    assert p.edges == (0, 48, 96, 128) and not p.extrapolated
    assert (p.max_seq_len, p.context, p.dataset, p.split) == (T, T, "pg19mini", "test")
    # every scored byte counts at its position: short last windows thin out the later buckets
    per_position = [sum(n > t for n in lengths) for t in range(T)]
    assert p.counts == (sum(per_position[:48]), sum(per_position[48:96]), sum(per_position[96:]))
    assert p.counts[0] > p.counts[2]
    weighted = sum(b * n for b, n in zip(p.bits, p.counts, strict=True)) / sum(p.counts)
    assert weighted == pytest.approx(p.bits_per_byte, abs=1e-4)
    m = evaluate(models["learned"], data_dir=str(corpus), progress=False)
    assert m.targets == p.targets
    assert p.bits_per_byte == pytest.approx(m.value, abs=1e-4)


def test_first_bucket_is_the_nll_of_the_first_positions(models, data_dir):
    """On the real test books: windows=2 and first_bytes slice like evaluate does, and a bucket is
    the mean NLL of exactly its positions."""
    p = bits_by_position(models["learned"], windows=2, bucket=32, progress=False)
    assert p.windows == 2 and p.counts == (64, 64, 64, 64)
    assert p.bits_per_byte == pytest.approx(
        evaluate(models["learned"], windows=2, progress=False).value, abs=1e-4
    )
    model = zoo.from_pretrained(models["learned"]).eval()
    docs = ByteTextDataModule(seq_len=T)
    docs.setup("test")
    windows = EvalWindows(docs.splits["test"], T)
    x, y = (torch.stack([windows[i][k] for i in (0, 1)]) for k in (0, 1))
    with torch.no_grad():
        nll = F.cross_entropy(model(x).logits.transpose(1, 2), y, reduction="none")  # (2, T)
    for i in range(4):
        expected = nll[:, 32 * i : 32 * (i + 1)].mean().item() / math.log(2)
        assert p.bits[i] == pytest.approx(expected, abs=1e-4)
    q = bits_by_position(models["learned"], first_bytes=3 * T, bucket=T, progress=False)
    assert q.windows == 3 and q.bits_per_byte == pytest.approx(
        evaluate(models["learned"], first_bytes=3 * T, progress=False).value, abs=1e-4
    )


@pytest.mark.parametrize("stride", [1, 5, 32, T])
def test_sliding_windows_score_every_target_once_with_enough_context(stride):
    """Every target of every document exactly once; past a document's first window, only at
    positions >= seq_len - stride of its window; stride = seq_len is the non-overlapping set."""
    rng = np.random.default_rng(stride)
    docs = [rng.integers(0, 256, n).astype(np.uint8) for n in (0, 1, 2, 40, 128, 129, 300)]
    ds = EvalWindows(docs, T, stride)
    scored = []
    for i, (d, start) in enumerate(ds.index):
        x, y = ds[i]
        positions = (y != -100).nonzero().flatten().tolist()
        assert positions, "a window that scores nothing"
        assert start == 0 or min(positions) >= T - stride
        assert all(y[t] == docs[d][start + t + 1] and x[t] == docs[d][start + t] for t in positions)
        scored += [(d, start + t) for t in positions]
    assert sorted(scored) == [(d, t) for d, doc in enumerate(docs) for t in range(len(doc) - 1)]
    if stride == T:
        assert ds.index == EvalWindows(docs, T).index
    with pytest.raises(ValueError, match="stride must be in"):
        EvalWindows(docs, T, T + 1)


def test_sliding_evaluation_is_the_nll_with_the_longer_context(models, corpus):
    """bits_by_position(stride=s) is the mean NLL of each target predicted from the up-to-T bytes
    before it that its sliding window gives, recomputed here one target at a time."""
    stride = 32
    p = bits_by_position(models["rotary"], stride=stride, bucket=T, data_dir=str(corpus),
                         progress=False)  # fmt: skip
    assert p.stride == stride and p.targets == sum(n - 1 for n in BOOK_SIZES)
    model = zoo.from_pretrained(models["rotary"]).eval()
    total = 0.0
    for seed, n in enumerate(BOOK_SIZES):
        book = torch.tensor(list(word_salad(n, seed)))
        for t in range(n - 1):  # target t + 1, from the window holding it
            start = 0 if t < T else ((t - T) // stride + 1) * stride
            with torch.no_grad():
                logits = model(book[start : t + 1][None]).logits[0, -1]
            total += F.cross_entropy(logits[None], book[t + 1][None]).item()
    assert p.bits_per_byte == pytest.approx(total / p.targets / math.log(2), abs=1e-4)
    plain = bits_by_position(models["rotary"], bucket=T, data_dir=str(corpus), progress=False)
    assert plain.stride is None and plain.targets == p.targets
    assert "Sliding windows: one every 32 bytes" in position_table(p)
    # the first 200 bytes of the first book: its first window (128) and three of 32 more
    q = bits_by_position(models["rotary"], stride=stride, first_bytes=200, bucket=T,
                         data_dir=str(corpus), progress=False)  # fmt: skip
    assert (q.windows, q.targets) == (4, 128 + 3 * 32)


@pytest.mark.parametrize("stride", [0, -1, T + 1])
def test_a_stride_outside_the_window_is_a_config_error(models, stride):
    with pytest.raises(ConfigError, match="stride must be in"):
        bits_by_position(models["learned"], windows=1, stride=stride, progress=False)


@pytest.mark.parametrize("position", ["rotary", "sinusoidal"])
def test_extrapolation_past_the_trained_length_is_computed_and_labelled(models, corpus, position):
    long = bits_by_position(
        models[position], context=2 * T, bucket=64, data_dir=str(corpus), progress=False
    )
    assert long.extrapolated and (long.max_seq_len, long.context) == (T, 2 * T)
    assert long.edges == (0, 64, 128, 192, 256)
    assert [long.bucket_extrapolated(i) for i in range(4)] == [False, False, True, True]
    assert long.counts[2] > 0 and all(math.isfinite(b) for b in long.bits)
    # the rebuilt model keeps the weights: the first window's first T positions score the same
    one = bits_by_position(models[position], context=2 * T, bucket=64, windows=1,
                           data_dir=str(corpus), progress=False)  # fmt: skip
    short = bits_by_position(
        models[position], bucket=64, windows=1, data_dir=str(corpus), progress=False
    )
    assert one.bits[:2] == pytest.approx(short.bits, abs=1e-4)
    table = position_table(long)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "–" in line]
    assert [("(extrapolated)" in r) for r in rows] == [False, False, True, True]
    assert "positions 128 and beyond are extrapolation" in table


def test_routing_model_keeps_its_routing_window_whenextended():
    torch.manual_seed(0)
    model = zoo.create_model("routing_transformer_tiny", position="rotary", routing="causal")
    longer = extended(model, 4 * model.config.max_seq_len, "routing")
    assert longer.config.max_seq_len == 4 * model.config.max_seq_len
    assert longer.config.routing_window == model.config.routing_window
    for key, value in model.state_dict().items():
        assert torch.equal(longer.state_dict()[key], value), key


def test_learned_positions_refuse_a_longer_context(models):
    with pytest.raises(
        ConfigError, match=r"learned positions for 128 bytes only \(max_seq_len=128\)"
    ):
        bits_by_position(models["learned"], context=2 * T, windows=1, progress=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bucket": 0},
        {"context": 0},
        {"context": -5},
        {"bucket": 200},
        {"context": 64, "bucket": 65},
    ],
)
def test_bad_bucket_or_context_is_a_config_error(models, kwargs):
    with pytest.raises(ConfigError):
        bits_by_position(models["learned"], windows=1, progress=False, **kwargs)


def test_files_are_written_and_read_back(models, corpus, tmp_path):
    p = bits_by_position(models["rotary"], context=2 * T, data_dir=str(corpus), progress=False)
    paths = save_position_profile(p, tmp_path / "out", label="tiny rotary")
    assert [x.name for x in paths] == ["by_position.md", "by_position.json", "by_position.png"]
    assert load_position_profile(tmp_path / "out") == p
    assert json.loads(paths[1].read_text())["extrapolated"] is True
    md = paths[0].read_text()
    assert "| 192–255 (extrapolated) |" in md and f"| 0–63 | {p.counts[0]:,} |" in md
    assert paths[2].read_bytes().startswith(PNG) and paths[2].stat().st_size > 5000
    both = plot_position_profiles(
        [("rotary", p), ("sinusoidal", load_position_profile(paths[1]))], tmp_path / "both.png"
    )
    assert both.read_bytes().startswith(PNG)
    with pytest.raises(ConfigError):
        plot_position_profiles([], tmp_path / "none.png")
    with pytest.raises(CheckpointError, match="measure it first .*--by-position"):
        load_position_profile(tmp_path / "missing")
    (tmp_path / "bad.json").write_text('{"bits": [1.0')
    with pytest.raises(CheckpointError, match="not a by-position profile"):
        load_position_profile(tmp_path / "bad.json")


def test_cli_by_position_end_to_end(models, corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["evaluate", models["rotary"], "--by-position", "--context", "256", "--bucket", "128",
          "--data-dir", str(corpus)])  # fmt: skip
    out = capsys.readouterr().out
    assert "bits/byte overall" in out and "128–255 (extrapolated)" in out
    folder = tmp_path / "by_position" / models["rotary"].strip("/").replace("/", "_")
    assert sorted(f.name for f in folder.iterdir()) == [
        "by_position.json", "by_position.md", "by_position.png"
    ]  # fmt: skip
    assert load_position_profile(folder).context == 256
    main(["evaluate", models["learned"], "--by-position", "--windows", "2", "--bucket", "64",
          "--data-dir", str(corpus), "--out-dir", "mine"])  # fmt: skip
    assert "(extrapolated)" not in capsys.readouterr().out
    assert load_position_profile(tmp_path / "mine").windows == 2
    main(["evaluate", models["learned"], "--by-position", "--stride", "64", "--data-dir",
          str(corpus), "--out-dir", "sliding"])  # fmt: skip
    assert "sliding windows every 64 bytes" in capsys.readouterr().out
    assert load_position_profile(tmp_path / "sliding").stride == 64


def test_cli_errors_are_one_line(models, corpus, capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", models["learned"], "--by-position", "--context", "256",
              "--data-dir", str(corpus)])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2 and "max_seq_len=128" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:
        main(["evaluate", models["learned"], "--context", "256"])
    assert e.value.code == 2 and "--by-position" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["evaluate", models["learned"], "--stride", "64"])
    assert e.value.code == 2 and "--by-position" in capsys.readouterr().err


def test_model_card_shows_the_curve_and_publishes_its_files(registry, corpus, tmp_path):
    name, recipe = "transformer_lm_tiny.pg19mini", "recipes/transformer_lm/pg19mini.yaml"
    run = fake_run(tmp_path / "run")
    metric = Metric("bits_per_byte", 8.0, "pg19mini", "test", None, 547, "32-true", context=T)
    plain = export_run(run, tmp_path / "plain", name=name, recipe=REPO / recipe, metrics=[metric])
    assert "by position" not in (plain / "README.md").read_text()

    profile = bits_by_position(run, bucket=64, data_dir=str(corpus), progress=False)
    save_position_profile(profile, run / "by_position")
    folder = export_run(run, registry.shipped_dir / name, name=name, recipe=REPO / recipe,
                        metrics=[metric], by_position=run / "by_position")  # fmt: skip
    card = (folder / "README.md").read_text()
    assert "## Bits per byte by position" in card
    assert "![bits per byte by position in the window](by_position.png)" in card
    assert f"| 64–127 | {profile.counts[1]:,} | {profile.bits[1]:.4f} |" in card
    assert yaml.safe_load(card.split("---")[1])["library_name"] == "attention-zoo"
    assert (folder / "by_position.png").read_bytes() == (
        run / "by_position" / "by_position.png"
    ).read_bytes()
    entry = register(folder, name=name, recipe=recipe, metrics=[metric])
    assert {"by_position.md", "by_position.json", "by_position.png"} <= set(entry.files)
    with pytest.raises(CheckpointError, match="none of"):
        export_run(run, tmp_path / "x", name=name, recipe=REPO / recipe, metrics=[metric],
                   by_position=tmp_path / "empty")  # fmt: skip
