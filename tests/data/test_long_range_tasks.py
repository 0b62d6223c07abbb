"""The long-range tasks (zoo/data/long_range*.py): batches, what is scored, the planted copies and
their distances, determinism, a copy oracle at 100% and a guesser at chance, bad input, `zoo fit`."""

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fakes import word_salad
from torch import nn

from zoo.cli import main
from zoo.data import (
    LongRangeTaskDataModule,
    long_range_tasks,
    task_accuracy_by_distance,
    task_hits,
)
from zoo.data.byte_corpora import PG19MINI_TEST, PG19MINI_TRAIN, PG19MINI_VALID
from zoo.data.long_range import FreshOrder
from zoo.data.long_range_tasks import KEYS, LETTERS, VALUES
from zoo.errors import ConfigError
from zoo.models.outputs import CausalLMOutput
from zoo.tasks import CausalLM

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "experiments" / "long_range" / "mqar_routing.yaml")
MQAR = dict(task="mqar", seq_len=1024, n_pairs=16, min_distance=16, n_eval=64, batch_size=4)
COPY = dict(task="copy", seq_len=1024, n_pairs=4, span=32, cue=8, n_eval=64, batch_size=4)


class LongestMatchOracle(nn.Module):
    """A byte LM that copies: at position ``t`` it gives logit 10 to the byte after the earlier
    position ``s`` whose bytes up to ``s`` share the longest suffix with ``x[.. t]`` (the most
    recent on ties), and zeros where no byte matches. With ``reach`` only ``t - reach < s``."""

    def __init__(self, max_seq_len: int = 1024, reach: int | None = None) -> None:
        super().__init__()
        self.config = SimpleNamespace(max_seq_len=max_seq_len, vocab_size=256)
        self.reach = reach

    def forward(self, idx: torch.Tensor) -> CausalLMOutput:  # (B, T) -> logits (B, T, 256)
        B, T = idx.shape
        logits = torch.zeros(B, T, 256)
        run = torch.zeros(B, T, dtype=torch.int64)  # run[:, s]: common suffix of x[..t], x[..s]
        s = torch.arange(T)
        for t in range(T):
            shifted = torch.cat([torch.zeros(B, 1, dtype=torch.int64), run[:, :-1]], 1)
            run = (idx == idx[:, t : t + 1]) * (shifted + 1) * (s < t)
            if self.reach is not None:
                run = run * (s > t - self.reach)
            best = (run * (T + 1) + s).argmax(1)  # (B,) the longest, then the most recent
            found = run.gather(1, best[:, None])[:, 0] > 0
            b = found.nonzero().flatten()
            logits[b, t, idx[b, best[b] + 1]] = 10.0
        return CausalLMOutput(logits=logits)


class Guesser(nn.Module):
    """Knows the scored bytes' alphabet, not the pairs: a uniformly random byte of ``alphabet``."""

    def __init__(self, alphabet: np.ndarray, max_seq_len: int = 1024) -> None:
        super().__init__()
        self.config = SimpleNamespace(max_seq_len=max_seq_len, vocab_size=256)
        self.alphabet, self.generator = torch.from_numpy(alphabet).long(), torch.Generator()
        self.generator.manual_seed(0)

    def forward(self, idx: torch.Tensor) -> CausalLMOutput:
        logits = torch.full((*idx.shape, 256), -1e9)
        noise = torch.rand(*idx.shape, len(self.alphabet), generator=self.generator)
        logits[..., self.alphabet] = noise
        return CausalLMOutput(logits=logits)


@pytest.fixture(scope="module")
def salad_books(tmp_path_factory) -> Path:
    """A data directory whose 60 pg19mini books are 6,000-byte word salads."""
    root = tmp_path_factory.mktemp("data")
    (root / "pg19mini").mkdir()
    for seed, ebook in enumerate(PG19MINI_TRAIN + PG19MINI_VALID + PG19MINI_TEST):
        (root / "pg19mini" / f"{ebook}.txt").write_bytes(word_salad(6000, seed))
    return root


def intervals_disjoint(e, width: int) -> bool:
    starts = np.sort(np.concatenate([e.first, e.second]))
    return bool(np.all(np.diff(starts) >= width))


@pytest.mark.parametrize("settings", [MQAR, COPY], ids=["mqar", "copy"])
def test_batches_are_int64_windows_of_seq_len(settings):
    dm = LongRangeTaskDataModule(**settings)
    dm.setup("fit")
    for loader, size in ((dm.train_dataloader(), 4), (dm.val_dataloader(), 4)):
        x, y = next(iter(loader))
        assert x.shape == y.shape == (size, 1024) and x.dtype == y.dtype == torch.int64
        assert x.min() >= 0 and x.max() < 256
        assert torch.equal(x[:, 1:][y[:, :-1] != -100], y[:, :-1][y[:, :-1] != -100])
    assert len(dm.val_dataloader().dataset) == 64


def test_mqar_scores_exactly_the_value_bytes_after_each_query():
    data = LongRangeTaskDataModule(**MQAR).examples("valid")
    for i in range(8):
        e = data.example(i)
        x, y = e.x.numpy(), e.y.numpy()
        assert e.scored.shape == (16, 2) and (y != -100).sum() == 32
        assert set(np.flatnonzero(y != -100)) == set(e.scored.ravel())
        for p, q in zip(e.first, e.second, strict=True):
            key, value = x[p : p + 2], x[p + 2 : p + 4]
            assert np.isin(key, KEYS).all() and np.isin(value, VALUES).all()
            assert (x[q : q + 4] == x[p : p + 4]).all()
            assert (y[q + 1 : q + 3] == value).all()  # targets of the query's last key byte, ...
        keys = {bytes(x[p : p + 2]) for p in e.first}
        assert len(keys) == 16  # distinct: a key's two occurrences are its pair and its query
        items = np.concatenate([np.arange(a, a + 4) for a in np.r_[e.first, e.second]])
        filler = np.delete(x, items)
        assert np.isin(filler, LETTERS).all()  # nothing else looks like a key or a value


def test_copy_spans_are_equal_at_the_requested_distances_and_only_after_the_cue_scored():
    dm = LongRangeTaskDataModule(**{**COPY, "min_distance": 100, "max_distance": 600})
    data, distances = dm.examples("train"), []
    for i in range(50):
        e = data.example(i)
        x, y = e.x.numpy(), e.y.numpy()
        assert intervals_disjoint(e, 32)
        for p, q in zip(e.first, e.second, strict=True):
            assert (x[p : p + 32] == x[q : q + 32]).all()
            scored = np.flatnonzero(y[q - 1 : q + 31] != -100)
            assert scored.tolist() == list(range(8, 32))  # the cue's 8 bytes are not
        assert (y != -100).sum() == 4 * 24
        distances += e.distance.tolist()
    d = np.array(distances)
    assert d.min() >= 100 and d.max() <= 600
    assert (d < 200).sum() > 40 and (d >= 400).sum() > 40  # log-uniform: every bucket filled


def test_mqar_distances_are_log_uniform_and_the_items_never_overlap():
    data = LongRangeTaskDataModule(**MQAR).examples("train")
    examples = [data.example(i) for i in range(40)]
    assert all(intervals_disjoint(e, 4) for e in examples)
    d = np.concatenate([e.distance for e in examples])
    assert d.min() >= 16 and d.max() <= 1020
    counts = np.bincount(np.log2(d).astype(int))[4:]  # buckets 16 .. 512
    assert len(counts) == 6 and counts.min() > 0.7 * counts.mean()


def test_distance_multiple_draws_only_multiples_and_every_one_of_them():
    settings = dict(COPY, min_distance=100, max_distance=700, distance_multiple=128)
    data = LongRangeTaskDataModule(**settings).examples("train")
    examples = [data.example(i) for i in range(60)]
    assert all(intervals_disjoint(e, 32) for e in examples)
    d = np.concatenate([e.distance for e in examples])
    assert set(d.tolist()) == {128, 256, 384, 512, 640}  # 100 and 700 round inwards
    plain = LongRangeTaskDataModule(**dict(COPY, min_distance=100, max_distance=700))
    assert (
        np.concatenate([plain.examples("train").example(i).distance for i in range(20)]) % 128
    ).any()


def test_a_crowded_sequence_falls_back_to_multiples_that_fit(monkeypatch):
    monkeypatch.setattr(long_range_tasks, "_log_uniform", lambda rng, lo, hi: hi)  # never fits
    rng = np.random.default_rng(0)
    for _ in range(20):
        first, second = long_range_tasks.place(rng, 300, 3, 32, 32, 256, multiple=32)
        d = second - first
        assert d[0] == 256 and (d % 32 == 0).all() and (d[1:] < 256).all()
        spans = np.sort(np.concatenate([first, second]))
        assert (np.diff(spans) >= 32).all()


@pytest.mark.parametrize("task, n_pairs", [("mqar", 64), ("copy", 16)])
def test_8192_bytes_with_many_items(task, n_pairs):
    dm = LongRangeTaskDataModule(task=task, seq_len=8192, n_pairs=n_pairs, min_distance=64)
    e = dm.examples("valid").example(0)
    width = 4 if task == "mqar" else 32
    assert e.x.shape == (8192,) and len(e.first) == n_pairs and intervals_disjoint(e, width)
    assert e.distance.min() >= 64 and e.distance.max() <= 8192 - width


def test_examples_are_determined_by_the_seed_and_the_evaluation_sets_by_the_settings():
    a, b = LongRangeTaskDataModule(**MQAR), LongRangeTaskDataModule(**MQAR)
    other = LongRangeTaskDataModule(**MQAR, seed=1)
    for split in ("train", "valid", "test"):
        assert torch.equal(a.examples(split)[3][0], b.examples(split)[3][0])
    assert not torch.equal(a.examples("train")[3][0], other.examples("train")[3][0])
    assert torch.equal(a.examples("valid")[3][0], other.examples("valid")[3][0])
    assert not torch.equal(a.examples("valid")[3][0], a.examples("test")[3][0])
    order = FreshOrder(10, start=4)  # a resumed run; every epoch draws new examples
    assert list(order) == [4, 5, 6, 7, 8, 9]
    order.set_epoch(1)
    assert list(order) == list(range(10, 20))


@pytest.mark.parametrize("settings", [MQAR, COPY], ids=["mqar", "copy"])
def test_a_copy_oracle_is_always_right_and_a_guesser_is_at_chance(settings):
    dm = LongRangeTaskDataModule(**settings)
    oracle = task_accuracy_by_distance(LongestMatchOracle(), dm, "test", batch_size=16)
    assert sum(oracle.items) == 64 * settings["n_pairs"]
    assert set(oracle.byte_accuracy) == set(oracle.item_accuracy) == {1.0}
    alphabet = VALUES if settings["task"] == "mqar" else LETTERS
    guess = task_accuracy_by_distance(Guesser(alphabet), dm, "test", batch_size=16)
    scored = sum(guess.items) * (2 if settings["task"] == "mqar" else 24)
    right = sum(a * n for a, n in zip(guess.byte_accuracy, guess.items, strict=True)) / sum(
        guess.items
    )
    sigma = (guess.chance * (1 - guess.chance) / scored) ** 0.5
    assert guess.chance == 1 / len(alphabet) and abs(right - guess.chance) < 4 * sigma
    assert max(guess.item_accuracy) < 0.1


def test_an_oracle_cut_to_64_positions_is_right_below_64_and_wrong_beyond():
    dm = LongRangeTaskDataModule(**MQAR)
    r = task_accuracy_by_distance(LongestMatchOracle(reach=64), dm, "valid", batch_size=16)
    assert r.lower == (16, 32, 64, 128, 256, 512)
    assert r.byte_accuracy[:2] == (1.0, 1.0) and max(r.byte_accuracy[2:]) < r.chance
    assert "| 64–127 |" in r.table() and "chance 0.1000" in r.table()


def test_task_hits_gives_every_items_distance_and_its_bytes_right():
    dm = LongRangeTaskDataModule(**MQAR)
    d, right, total = task_hits(LongestMatchOracle(reach=64), dm, "valid", batch_size=16)
    assert d.shape == right.shape == total.shape == (64 * 16,) and (total == 2).all()
    assert (right[d < 64] == 2).all() and right[d >= 64].sum() < 0.1 * total[d >= 64].sum()
    assert sorted(d.tolist()) == sorted(
        np.concatenate([e.distance for e in map(dm.examples("valid").example, range(64))]).tolist()
    )


def test_pg19_repeats_plants_spans_in_the_training_books_and_scores_every_byte(salad_books):
    dm = LongRangeTaskDataModule(task="pg19_repeats", seq_len=1024, n_pairs=2, rate=0.5,
                                 data_dir=str(salad_books), n_eval=8, batch_size=2)  # fmt: skip
    dm.setup("fit")
    books = np.concatenate(dm.splits["train"]).tobytes()
    data = dm.examples("train")
    examples = [data.example(i) for i in range(40)]
    planted = [e for e in examples if len(e.first)]
    assert 10 < len(planted) < 30  # rate 0.5
    for e in examples:
        x = e.x.numpy()
        assert (e.y != -100).all()  # language modelling: every byte scored
        if not len(e.first):
            assert x.astype(np.uint8).tobytes() in books  # a window of the training books as it is
        for p, q in zip(e.first, e.second, strict=True):
            assert (x[p : p + 32] == x[q : q + 32]).all() and np.isin(x[p : p + 32], LETTERS).all()
    x, y = next(iter(dm.val_dataloader()))  # validation: pg19mini's own windows
    assert x.shape == (2, 1024) and (y[0] != -100).all()
    assert all(len(data.example(i).first) == 2 for i in range(8) for data in [dm.examples("valid")])
    r = task_accuracy_by_distance(LongestMatchOracle(), dm, "valid")
    assert sum(r.items) == 16 and set(r.byte_accuracy) == {1.0}


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(task="mqar2"), "unknown task 'mqar2'"),
        (dict(max_distance=1021), "max_distance=1021 + the item's 4 bytes is past seq_len=1024"),
        (dict(task="copy", min_distance=16), "min_distance=16 is shorter than an item (32 bytes)"),
        (dict(task="copy", n_pairs=8), "n_pairs=8 items of 32 bytes at min_distance=32 do not"),
        (dict(key_len=1, n_pairs=27), "n_pairs=27 distinct keys of 1 letters do not exist"),
        (dict(task="copy", cue=32), "cue=32 leaves nothing of span=32"),
        (dict(min_distance=500, max_distance=400), "max_distance=400 is below min_distance=500"),
        (dict(task="pg19_repeats", rate=1.5), "rate must be in [0, 1]"),
        (dict(n_pairs=0), "n_pairs must be a positive integer"),
        (
            dict(min_distance=300, max_distance=380, distance_multiple=128),
            "no multiple of distance_multiple=128 lies in [300, 380]",
        ),
        (dict(distance_multiple=0), "distance_multiple must be a positive integer"),
    ],
)
def test_bad_settings_are_a_one_line_error_at_construction(settings, message):
    with pytest.raises(ConfigError) as e:
        LongRangeTaskDataModule(**{"seq_len": 1024, **settings})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_settings_checked_against_the_models_context_at_setup():
    dm = LongRangeTaskDataModule(task="copy", n_pairs=4, min_distance=300)  # seq_len: the model's
    with pytest.raises(ConfigError, match="do not surely fit in seq_len=512"):
        dm.resolve(LongestMatchOracle(max_seq_len=512))
    with pytest.raises(ConfigError, match=r"seq_len=1024 is past the model's context \(max_seq"):
        LongRangeTaskDataModule(**COPY).resolve(LongestMatchOracle(max_seq_len=512))
    dm = LongRangeTaskDataModule(task="mqar", n_pairs=4)
    assert dm.resolve(CausalLM("transformer_lm_tiny")).seq_len == 128  # a LightningModule too


def test_zoo_fit_trains_on_the_recipe_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the recipe writes under ./runs
    main(["fit", "--config", RECIPE, "--trainer.max_steps=2", "--trainer.val_check_interval=2",
          "--trainer.limit_val_batches=1", "--trainer.log_every_n_steps=1",
          "--model.init_args.model=routing_transformer_tiny",
          '--model.init_args.model_config={"routing": "causal", "max_seq_len": 256}',
          "--data.init_args.seq_len=256", "--data.init_args.n_pairs=4",
          "--data.init_args.n_eval=4", "--data.init_args.batch_size=2",
          "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"])  # fmt: skip
    run = tmp_path / "runs" / "long_context" / "mqar_routing"
    (metrics,) = run.glob("logs/version_*/metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    val = [float(r["val/bpb"]) for r in rows if r.get("val/bpb")]
    assert len(val) == 1 and 6.0 < val[0] < 9.0  # untrained: about 8 bits per value byte
    ckpt = run / "checkpoints" / "best.ckpt"  # the call experiments/long_context/log.md §8 shows
    model = CausalLM.load_from_checkpoint(ckpt).model
    r = task_accuracy_by_distance(model, LongRangeTaskDataModule.load_from_checkpoint(ckpt), "test")
    assert r.seq_len == 256 and sum(r.items) == 16 and r.causal
    with pytest.raises(SystemExit) as e:
        main(["fit", "--config", RECIPE, "--data.init_args.max_distance=2000"])
    assert e.value.code == 2 and "max_distance <= 1022" in capsys.readouterr().err


# --- pg19_copies: the copying curriculum (issue 79) ------------------------------------------------
COPIES = dict(task="pg19_copies", seq_len=1024, n_pairs=4, max_span=128, rate=0.5, n_eval=8,
              batch_size=2)  # fmt: skip


def window_start(x: np.ndarray, modified: np.ndarray, books: bytes) -> int | None:
    """Where in ``books`` the window ``x`` was cut from, found by its longest run of unmodified
    bytes (``None`` if that run is short or not unique)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[1], modified.astype(int), [1]])))
    runs = edges.reshape(-1, 2)  # [start, end) of the unmodified runs
    a, b = max(runs, key=lambda r: r[1] - r[0])
    piece = x[a:b].astype(np.uint8).tobytes()
    if b - a < 48 or books.count(piece) != 1:
        return None
    return books.find(piece) - a


def test_pg19_copies_repeat_the_windows_text_at_the_drawn_distances_and_lengths(salad_books):
    dm = LongRangeTaskDataModule(**COPIES, data_dir=str(salad_books))
    dm.setup("fit")
    books = np.concatenate(dm.splits["train"])
    data = dm.examples("train")
    examples = [data.example(i) for i in range(60)]
    assert 15 < sum(len(e.first) > 0 for e in examples) < 45  # rate 0.5
    kinds, lengths, checked = [], [], 0
    for e in examples:
        x = e.x.numpy()
        assert (e.y != -100).all() and torch.equal(e.y[:-1], e.x[1:])  # every byte scored
        assert len(e.first) == len(e.second) == len(e.length) == len(e.kind) <= 4
        modified = np.zeros(1024, dtype=bool)
        for p, q, n, kind in zip(e.first, e.second, e.length, e.kind, strict=True):
            assert 8 <= n <= 128 and n <= q - p <= 1024 - n  # never overlapping its repeat
            assert (x[p : p + n] == x[q : q + n]).all()  # a copy
            if kind != "text":
                assert np.isin(x[p : p + n], long_range_tasks.RANDOM_KINDS[kind]).all()
                modified[p : p + n] = True
            modified[q : q + n] = True
            assert (e.scored[list(e.second).index(q)] == q + np.arange(4, 8) - 1).all()
        starts = sorted((s, n) for p, q, n in zip(e.first, e.second, e.length, strict=True)
                        for s in (p, q))  # fmt: skip
        assert all(a + n <= b for (a, n), (b, _) in zip(starts[:-1], starts[1:], strict=True))
        kinds += e.kind
        lengths += e.length.tolist()
        start = window_start(x, modified, books.tobytes())
        if start is not None:  # the rest is the book's text as it was, the sources included
            checked += 1
            assert (x[~modified] == books[start : start + 1024][~modified]).all()
    assert checked >= 40
    assert set(kinds) <= {"text", "letters", "printable"}  # the probe's other kinds held out
    assert 0.6 < kinds.count("text") / len(kinds) < 0.9  # random_share 0.25
    assert min(lengths) < 12 and max(lengths) > 90  # log-uniform over 8..128: median near 32
    assert 0.3 < np.mean(np.array(lengths) < 32) < 0.7
    x, y = next(iter(dm.val_dataloader()))  # validation: pg19mini's own windows
    assert x.shape == (2, 1024) and torch.equal(x[0, 1:], y[0, :-1])
    d, right, total = task_hits(LongestMatchOracle(), dm, "valid")
    assert len(d) == sum(len(dm.examples("valid").example(i).first) for i in range(8))
    assert (total == 4).all() and right.sum() > 0.5 * total.sum()


def test_pg19_copies_settings_distances_and_determinism(salad_books):
    dm = LongRangeTaskDataModule(**{**COPIES, "min_distance": 300, "rate": 1.0, "min_span": 16,
                                    "random_share": 1.0, "random_kinds": ["digits"]},
                                 data_dir=str(salad_books))  # fmt: skip
    data = dm.examples("train")
    for e in map(data.example, range(20)):
        assert len(e.first) >= 3 and set(e.kind) == {"digits"}
        assert (e.distance >= np.maximum(300, e.length)).all() and (e.length >= 16).all()
        assert e.scored.shape == (len(e.first), 8)  # 16 - a cue of min(8, 16 // 2)
    again = LongRangeTaskDataModule(**COPIES, data_dir=str(salad_books))
    other = LongRangeTaskDataModule(**COPIES, data_dir=str(salad_books), seed=1)
    a, b, c = (m.examples("train").example(7) for m in (again, again, other))
    assert torch.equal(a.x, b.x) and (a.first == b.first).all() and a.kind == b.kind
    assert not torch.equal(a.x, c.x)
    valid = [m.examples("valid").example(3).x for m in (again, other)]
    assert torch.equal(*valid)  # the evaluation sets do not depend on the seed


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(max_span=4), "max_span=4 is below min_span=8"),
        (dict(random_share=1.5), "random_share must be in [0, 1], got 1.5"),
        (dict(random_kinds=["letters", "emoji"]), "random_kinds must be some of letters, "),
        (dict(random_kinds=[]), "(none given, random_share > 0)"),
        (dict(min_span=0), "min_span must be a positive integer"),
        (dict(max_span=600), "a copy of max_span=600 bytes repeated at least 600 bytes later"),
        (dict(max_distance=1000), "max_distance=1000 + the item's 256 bytes is past seq_len"),
    ],
)
def test_pg19_copies_bad_settings_are_a_one_line_error(settings, message):
    with pytest.raises(ConfigError) as e:
        LongRangeTaskDataModule(**{"task": "pg19_copies", "seq_len": 1024, **settings})
    assert message in str(e.value) and "\n" not in str(e.value)
