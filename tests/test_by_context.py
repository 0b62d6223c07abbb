"""Bits per byte of the same bytes by context length (`zoo evaluate SOURCE --by-context`): every
context scores the same target bytes, each from the window the docs promise; a model that cannot
see past its receptive field gains exactly nothing from more context; errors, files, the CLI and
the model card (`zoo export --by-context`)."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fakes import fake_run, pg19mini_test_books

import zoo
from zoo.by_context import (
    bits_by_context,
    context_table,
    gain_difference,
    paired_difference,
    save_context_profile,
)
from zoo.cli import main
from zoo.data import ByteTextDataModule
from zoo.errors import CheckpointError, ConfigError
from zoo.hub import Metric
from zoo.profiles import default_contexts, load_context_profile
from zoo.publishing import export_run, register

REPO = Path(__file__).resolve().parents[1]

BOOK_SIZES = (600, 400, 50)  # blocks every 64 bytes: 9 + 6 + 0
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return pg19mini_test_books(tmp_path_factory.mktemp("data"), BOOK_SIZES)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """save_pretrained folders: the tiny Transformer (learned, rotary positions) and a tiny
    Routing Transformer whose heads are all local (window 16) with rotary positions: two layers
    of it see at most the last 32 bytes."""
    tmp = tmp_path_factory.mktemp("models")
    out = {}
    for name, preset, overrides in (
        ("learned", "transformer_lm_tiny", {}),
        ("rotary", "transformer_lm_tiny", {"position": "rotary"}),
        ("local", "routing_transformer_tiny", {"position": "rotary", "n_local_heads": 4}),
    ):
        torch.manual_seed(0)
        zoo.create_model(preset, **overrides).save_pretrained(tmp / name)
        out[name] = str(tmp / name)
    return out


def test_default_contexts_are_powers_of_two_up_to_the_trained_length():
    assert default_contexts(4096) == (64, 128, 256, 512, 1024, 2048, 4096)
    assert default_contexts(8192, smallest=256) == (256, 512, 1024, 2048, 4096, 8192)
    assert default_contexts(100) == (64, 100)


def test_each_target_is_predicted_from_the_window_the_profile_names(models, corpus):
    """Brute force, one forward pass per target byte: target byte ``p`` of a block ending at ``e``
    (targets ``e - L + 1 .. e``) is predicted at context ``c`` from the ``c`` bytes before the
    end of its sliding window, windows ending every ``stride = min(L, c // 2)`` bytes."""
    L, contexts = 16, (8, 32, 64)
    p = bits_by_context(models["learned"], contexts=contexts, target_len=L,
                        data_dir=str(corpus), progress=False)  # fmt: skip
    assert (p.block_spacing, p.blocks, p.targets) == (64, 15, 15 * L)
    assert p.min_context == (5, 17, 49)
    model = zoo.from_pretrained(models["learned"]).float().eval()
    dm = ByteTextDataModule(seq_len=64, data_dir=str(corpus))
    dm.setup("test")
    docs = dm.splits["test"]
    for i, c in enumerate(contexts):
        stride = min(L, c // 2)
        windows, at, targets = [], [], []  # one window per target: its own forward pass
        for doc in docs:
            for e in range(64, len(doc), 64):
                for t in range(e - L + 1, e + 1):  # predict doc[t]
                    end = min(e - L + stride * math.ceil((t - (e - L)) / stride), e)
                    windows.append(torch.from_numpy(doc[end - c : end].astype(np.int64)))
                    at.append(t - 1 - (end - c))
                    targets.append(int(doc[t]))
        with torch.no_grad():  # the windows side by side in a batch: each is its own sequence
            logits = model(torch.stack(windows)).logits[torch.arange(len(at)), torch.tensor(at)]
        nats = F.cross_entropy(logits, torch.tensor(targets), reduction="sum").item()
        assert min(at) + 1 == p.min_context[i]
        assert p.bits[i] == pytest.approx(nats / p.targets / math.log(2), abs=1e-4)
    assert p.gain == pytest.approx([b - p.bits[-1] for b in p.bits], abs=2e-5)
    assert p.gain[-1] == 0 and p.gain_se[-1] == 0 and all(se > 0 for se in p.gain_se[:-1])


def test_context_past_the_receptive_field_gains_nothing(models, corpus):
    """All-local heads (window 16, 2 layers): once every byte has more than 32 bytes before it,
    more context changes nothing; a dense model given the same windows does change."""
    kwargs = dict(contexts=(16, 64, 128), target_len=16, data_dir=str(corpus), progress=False)
    local = bits_by_context(models["local"], **kwargs)
    assert local.min_context == (9, 49, 113)
    assert local.bits[1] == pytest.approx(local.bits[2], abs=1e-5)
    assert abs(local.gain[1]) < 1e-5 and local.gain_se[1] < 1e-5
    assert abs(local.gain[0]) > 1e-4  # 9 to 16 bytes: inside the field
    dense = bits_by_context(models["rotary"], **kwargs)
    assert dense.bits[1] != pytest.approx(dense.bits[2], abs=1e-4)
    assert (dense.blocks, dense.targets) == (local.blocks, local.targets)


def test_models_of_different_contexts_share_the_target_bytes(models, corpus):
    """A 64-byte model with block_spacing 256 is scored on the bytes a 256-byte run scores."""
    long = bits_by_context(models["rotary"], contexts=(64, 256), target_len=16,
                           data_dir=str(corpus), progress=False)  # fmt: skip
    short = bits_by_context(models["learned"], contexts=(64,), target_len=16, block_spacing=256,
                            data_dir=str(corpus), progress=False)  # fmt: skip
    assert long.block_spacing == short.block_spacing == 256
    assert (short.blocks, short.targets) == (long.blocks, long.targets) == (3, 48)


def test_paired_differences_between_contexts_and_between_models(models, corpus):
    kwargs = dict(target_len=16, block_spacing=128, data_dir=str(corpus), progress=False)
    a = bits_by_context(models["rotary"], contexts=(16, 64, 128), **kwargs)
    b = bits_by_context(models["learned"], contexts=(64,), **kwargs)
    assert len(a.block_bits) == 3 and all(len(row) == a.blocks == 7 for row in a.block_bits)
    assert [sum(row) / len(row) for row in a.block_bits] == pytest.approx(a.bits, abs=1e-4)
    for i, c in enumerate(a.contexts[:-1]):  # against the largest: the profile's own gain
        assert paired_difference(a, c, a, 128) == pytest.approx((a.gain[i], a.gain_se[i]), abs=2e-5)
    diff, se = paired_difference(a, 64, b, 64)
    assert diff == pytest.approx(a.at(64) - b.at(64), abs=2e-5) and se > 0
    assert paired_difference(b, 64, b, 64) == (0.0, 0.0)
    c = bits_by_context(models["local"], contexts=(16, 64, 128), **kwargs)
    more, more_se = gain_difference(a, c, 16, 128)  # the gain from 16 to 128 bytes, a's minus c's
    assert more == pytest.approx((a.at(16) - a.at(128)) - (c.at(16) - c.at(128)), abs=4e-5)
    assert more_se > 0 and gain_difference(a, a, 16, 128) == (0.0, 0.0)
    assert gain_difference(c, a, 16, 128)[0] == pytest.approx(-more)
    other = bits_by_context(models["learned"], contexts=(64,), target_len=16, data_dir=str(corpus),
                            progress=False)  # fmt: skip
    with pytest.raises(ConfigError, match="block_spacing 128 vs 64"):
        paired_difference(a, 64, other, 64)
    with pytest.raises(ConfigError, match="block_spacing 128 vs 64"):
        gain_difference(a, other, 16, 64)
    with pytest.raises(ConfigError, match="context 32 was not measured"):
        paired_difference(a, 32, b, 64)


def test_extrapolation_is_labelled_and_learned_positions_refuse_it(models, corpus):
    p = bits_by_context(models["rotary"], contexts=(64, 256), target_len=16, blocks=2,
                        data_dir=str(corpus), progress=False)  # fmt: skip
    assert p.blocks == 2 and [p.extrapolated(i) for i in range(2)] == [False, True]
    assert "(extrapolated)" in context_table(p)
    with pytest.raises(ConfigError, match="max_seq_len=128"):
        bits_by_context(models["learned"], contexts=(64, 256), data_dir=str(corpus))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"contexts": (1, 64)}, "2 bytes or more"),
        ({"contexts": (64,), "target_len": 0}, "target_len must be positive"),
        (
            {"contexts": (64,), "target_len": 16, "block_spacing": 32},
            "block_spacing=32 is too short",
        ),
        ({"contexts": (64,), "blocks": 0}, "blocks must be positive"),
        ({"contexts": (64,), "split": "train"}, "split must be"),
        ({"contexts": (64,), "block_spacing": 1000}, "no document"),
    ],
)
def test_bad_arguments_are_config_errors(models, corpus, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        bits_by_context(models["learned"], data_dir=str(corpus), progress=False, **kwargs)


def test_files_are_written_and_read_back(models, corpus, tmp_path):
    p = bits_by_context(models["learned"], contexts=(16, 64), target_len=16,
                        data_dir=str(corpus), progress=False)  # fmt: skip
    paths = save_context_profile(p, tmp_path / "out")
    assert [f.name for f in paths] == ["by_context.md", "by_context.json", "by_context.png"]
    assert paths[2].read_bytes().startswith(PNG)
    assert load_context_profile(tmp_path / "out") == p
    assert "| 16 | 9 |" in paths[0].read_text()
    with pytest.raises(CheckpointError, match="--by-context"):
        load_context_profile(tmp_path / "missing")
    (tmp_path / "bad.json").write_text('{"contexts": [16')
    with pytest.raises(CheckpointError, match="not a by-context profile"):
        load_context_profile(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"bits": [1.0]}')
    with pytest.raises(CheckpointError, match="not a by-context profile"):
        load_context_profile(tmp_path / "other.json")


def test_cli_by_context_end_to_end(models, corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["evaluate", models["learned"], "--by-context", "16", "64", "--target-len", "16",
          "--blocks", "3", "--data-dir", str(corpus), "--out-dir", "ctx"])  # fmt: skip
    out = capsys.readouterr().out
    assert "gain of 64" in out and "48 bytes" in out
    p = load_context_profile(tmp_path / "ctx")
    assert p.contexts == (16, 64) and p.blocks == 3
    main(["evaluate", models["learned"], "--by-context", "--target-len", "16",
          "--data-dir", str(corpus)])  # fmt: skip
    folder = tmp_path / "by_context" / models["learned"].strip("/").replace("/", "_")
    default = load_context_profile(folder)
    assert default.contexts == (64, 128)
    assert default.command() == (f"zoo evaluate {models['learned']} --by-context --target-len 16 "
                                 f"--block-spacing {default.block_spacing}")  # fmt: skip
    assert (
        p.command("NAME")
        == "zoo evaluate NAME --by-context 16 64 --target-len 16 --block-spacing 64"
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--by-context", "--stride", "8"], "not with --by-position"),
        (["--by-context", "--windows", "2"], "use --blocks"),
        (["--by-context", "--by-position"], "not with --by-position"),
        (["--blocks", "2"], "go with --by-context"),
    ],
)
def test_cli_conflicts_are_one_line_errors(models, corpus, capsys, extra, message):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", models["learned"], "--data-dir", str(corpus), *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


def test_model_card_shows_the_profile_and_publishes_its_files(registry, corpus, tmp_path):
    name, recipe = "transformer_lm_tiny.pg19mini", "recipes/transformer_lm/pg19mini.yaml"
    run = fake_run(tmp_path / "run")
    metric = Metric("bits_per_byte", 8.0, "pg19mini", "test", None, 547, "32-true", context=128)
    plain = export_run(run, tmp_path / "plain", name=name, recipe=REPO / recipe, metrics=[metric])
    assert "by context" not in (plain / "README.md").read_text()
    assert not (plain / "by_context.json").exists()

    p = bits_by_context(run, contexts=(16, 64), target_len=16, data_dir=str(corpus),
                        progress=False)  # fmt: skip
    save_context_profile(p, run / "ctx")
    folder = registry.shipped_dir / name
    results = _results(tmp_path, metric)
    main(["export", str(run), "--name", name, "--recipe", str(REPO / recipe), "--results",
          str(results), "--out", str(folder), "--by-context", str(run / "ctx")])  # fmt: skip
    card = (folder / "README.md").read_text()
    assert "## Bits per byte by context length" in card
    assert "![bits per byte of the same bytes by context length](by_context.png)" in card
    assert f"| 16 | 9 | {p.bits[0]:.4f} |" in card
    assert f"`zoo evaluate {name} --by-context 16 64 --target-len 16 --block-spacing 64`" in card
    assert load_context_profile(folder) == p
    entry = register(folder, name=name, recipe=recipe, metrics=[metric])
    assert {"by_context.md", "by_context.json", "by_context.png"} <= set(entry.files)
    with pytest.raises(CheckpointError, match="none of .*--by-context --out-dir"):
        export_run(run, tmp_path / "x", name=name, recipe=REPO / recipe, metrics=[metric],
                   by_context=tmp_path / "empty")  # fmt: skip


def _results(tmp_path: Path, metric: Metric) -> Path:
    from zoo.evaluation import save_metric

    save_metric(metric, tmp_path / "results.json")
    return tmp_path / "results.json"
