"""The copy probe (`zoo evaluate SOURCE --probe copy`): a copy oracle gains nearly the whole control
at every distance; cut to its last 256 positions it gains nothing past them; the control is one
pass per trial and the repeat differs from it only at the first copy; the result is determined by
the seed; bad input is a one-line error; files and the CLI."""

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fakes import word_salad
from torch import nn

import zoo
from zoo.cli import main
from zoo.errors import CheckpointError, ConfigError
from zoo.models.outputs import CausalLMOutput
from zoo.probes import (
    CopyProbe,
    CopyProbes,
    copy_inputs,
    copy_probe,
    default_distances,
    load_copy_probe,
    save_copy_probe,
    t_critical,
)

N = 2048  # the oracle's context
PNG = b"\x89PNG\r\n\x1a\n"


class CopyOracle(nn.Module):
    """A byte LM that copies: at position ``t`` it gives logit 10 (probability 0.989) to the byte
    that followed the most recent earlier occurrence of ``x[t - 3 .. t]``, and uniform logits when
    there is none. With ``reach`` it sees only its last ``reach`` positions: the occurrence and the
    byte after it must lie in ``x[t - reach + 1 .. t]``. Records its inputs."""

    def __init__(self, max_seq_len: int = N, reach: int | None = None, order: int = 4) -> None:
        super().__init__()
        self.config = SimpleNamespace(max_seq_len=max_seq_len, vocab_size=256)
        self.reach, self.order = reach, order
        self.inputs: list[torch.Tensor] = []

    def forward(self, idx: torch.Tensor) -> CausalLMOutput:  # (B, T) -> logits (B, T, 256)
        self.inputs += list(idx.cpu())
        B, T = idx.shape
        o = self.order
        gram = torch.full((B, T), -1, dtype=torch.int64)  # x[t - 3 .. t] as one number
        gram[:, o - 1 :] = sum(idx[:, o - 1 - i : T - i] << (8 * i) for i in range(o))
        t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
        seen = (s < t) & (s >= o - 1)  # an earlier gram, and the byte after it is at most t
        if self.reach is not None:
            seen &= s - o + 1 > t - self.reach
        logits = torch.zeros(B, T, 256)
        for b in range(B):
            match = seen & (gram[b][:, None] == gram[b][None, :]) & (gram[b][:, None] >= 0)
            last = torch.where(match, s, -1).amax(1)  # (T,) the most recent, -1: none
            found = (last >= 0).nonzero().flatten()
            logits[b, found, idx[b, last[found] + 1]] = 10.0
        return CausalLMOutput(logits=logits)


@pytest.fixture(scope="module")
def salad(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "salad.txt"
    path.write_bytes(word_salad(12_000, seed=3))
    return path


def test_default_distances_and_the_t_critical_value():
    assert default_distances(4096, 32) == (32, 64, 128, 256, 512, 1024, 2048)
    assert default_distances(256, 32) == (32, 64, 128)
    assert default_distances(256, 8) == (16, 32, 64, 128)
    assert default_distances(64, 40) == ()
    # two-sided 95% critical values of Student's t (tables)
    table = {1: 12.7062, 2: 4.3027, 4: 2.7764, 9: 2.2622, 31: 2.0395, 10_000: 1.9602}
    assert {df: round(t_critical(df), 4) for df in table} == table


def test_a_copy_oracle_gains_nearly_the_whole_control_at_every_distance(salad):
    p = copy_probe(CopyOracle(), text_file=salad, trials=8, progress=False)
    assert p.distances == (32, 64, 128, 256, 512, 1024)
    assert p.control == pytest.approx(8.0, abs=0.3)  # uniform over 256 bytes
    assert all(r < 0.1 for r in p.repeat)  # logit 10 on the right byte: 0.017 bits
    assert all(lo > 7 for lo in p.gain_low)
    assert [round(g, 4) for g in p.gain] == [round(p.control - r, 4) for r in p.repeat]


def test_an_oracle_cut_to_256_positions_gains_nothing_past_them(salad):
    p = copy_probe(CopyOracle(reach=256), text_file=salad, trials=8, progress=False)
    for d, gain, lo, hi in zip(p.distances, p.gain, p.gain_low, p.gain_high, strict=True):
        if d > 256:
            assert abs(gain) < 0.05 and abs(lo) < 0.05 and abs(hi) < 0.05, d
        elif d <= 256 - p.span:
            assert gain > 7 and lo > 7, d
    assert {d for d in p.distances if d > 256} == {512, 1024}


def test_the_control_is_one_pass_per_trial_and_the_repeat_differs_only_at_the_first_copy(salad):
    """Every input the model sees, grouped by trial: one control (the window's text, then the span
    of lowercase letters at its end) and one repeat per distance, equal to the control except for
    the span at ``q - d``; the bits of each are its own forward pass's, scored after the cue."""
    oracle = CopyOracle(max_seq_len=512)
    m, k, distances = 24, 6, (24, 100, 300)
    p = copy_probe(oracle, text_file=salad, span=m, cue=k, trials=5, distances=distances,
                   batch_size=3, progress=False)  # fmt: skip
    text = torch.tensor(list(salad.read_bytes()))
    q = 512 - m
    assert len(oracle.inputs) == 5 * (1 + len(distances))
    for t, (doc, start) in enumerate(p.windows):
        rows = oracle.inputs[t * 4 : (t + 1) * 4]  # the trial's control, then its repeats
        control, span = rows[0], rows[0][q:]
        assert doc == 0 and torch.equal(control[:q], text[start : start + q])
        assert ((span >= ord("a")) & (span <= ord("z"))).all()
        for d, repeat in zip(distances, rows[1:], strict=True):
            differ = (repeat != control).nonzero().flatten()
            assert differ.min() >= q - d and differ.max() < q - d + m
            assert torch.equal(repeat[q - d : q - d + m], span)
            assert torch.equal(repeat, copy_inputs(text[start : start + 512], span, d))
        for value, row in zip((p.trial_control[t], *(r[t] for r in p.trial_repeat)), rows,
                              strict=True):  # fmt: skip
            logits = CopyOracle(max_seq_len=512)(row[None]).logits[0, q + k - 1 : -1]
            nats = F.cross_entropy(logits, row[q + k :]).item()
            assert value == pytest.approx(nats / math.log(2), abs=1e-5)
    # other distances: the same control, the same repeat at the distance both measured
    q2 = copy_probe(CopyOracle(max_seq_len=512), text_file=salad, span=m, cue=k, trials=5,
                    distances=(100,), progress=False)  # fmt: skip
    assert q2.trial_control == p.trial_control and q2.control == p.control
    assert q2.trial_repeat[0] == p.trial_repeat[1]


def test_the_result_is_determined_by_the_seed_and_the_interval_is_a_t_interval(salad):
    model = zoo.create_model("transformer_lm_tiny")
    kwargs = dict(text_file=salad, trials=4, progress=False)
    a, b = copy_probe(model, **kwargs), copy_probe(model, batch_size=3, **kwargs)
    assert a.windows == b.windows
    for row_a, row_b in zip(a.trial_repeat, b.trial_repeat, strict=True):  # other batches
        assert row_a == pytest.approx(row_b, abs=1e-5)
    assert copy_probe(model, **kwargs) == a
    for i, row in enumerate(a.trial_repeat):  # the 95% t-interval of the paired gains
        gains = torch.tensor(a.trial_control, dtype=torch.float64) - torch.tensor(row)
        mean, half = gains.mean().item(), t_critical(3) * gains.std().item() / 2
        assert half > 1e-3 and a.gain[i] == pytest.approx(mean, abs=1e-4)
        interval = (a.gain_low[i], a.gain_high[i])
        assert interval == pytest.approx((mean - half, mean + half), abs=1e-4)
    other = copy_probe(model, seed=1, **kwargs)
    assert other.windows != a.windows and other.trial_control != a.trial_control


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ("image_transformer_tiny", {}, "image_transformer_lm"),
        ("transformer_tiny", {}, "transformer_seq2seq"),
        ("routing_transformer_tiny", {"routing": "topw"}, "looks ahead"),
    ],
)
def test_models_other_than_byte_level_causal_lms_are_refused(salad, preset, overrides, message):
    with pytest.raises(ConfigError, match=message):
        copy_probe(zoo.create_model(preset, **overrides), text_file=salad, progress=False)


def test_files_are_written_and_read_back(salad, tmp_path):
    p = copy_probe(CopyOracle(max_seq_len=256), text_file=salad, trials=3, progress=False)
    paths = save_copy_probe(p, tmp_path / "out")
    assert [f.name for f in paths] == ["copy_probe.md", "copy_probe.json", "copy_probe.png"]
    assert paths[2].read_bytes().startswith(PNG)
    assert load_copy_probe(tmp_path / "out") == p == CopyProbe.from_json(p.to_json())
    table = paths[0].read_text()
    assert f"| 32 | {p.repeat[0]:.4f} | {p.control:.4f} | {p.gain[0]:+.4f} |" in table
    assert p.command() == f"zoo evaluate CopyOracle --probe copy --text-file {salad} --trials 3"
    with pytest.raises(CheckpointError, match="--probe copy"):
        load_copy_probe(tmp_path / "missing")
    (tmp_path / "bad.json").write_text('{"distances": [16')
    with pytest.raises(CheckpointError, match="not a copy probe"):
        load_copy_probe(tmp_path / "bad.json")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """A save_pretrained folder of transformer_lm_tiny (context 128)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("models") / "tiny"
    zoo.create_model("transformer_lm_tiny").save_pretrained(folder)
    return str(folder)


def test_cli_copy_probe_end_to_end(tiny, data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["evaluate", tiny, "--probe", "copy", "--trials", "2", "--name", "tiny"])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the title to the terminal
    assert "copy probe on" in out and "95% interval (t)" in out and "wrote copy_probe/" in out
    p = load_copy_probe(tmp_path / "copy_probe" / tiny.strip("/").replace("/", "_"))
    assert (p.source, p.text, p.max_seq_len) == ("tiny", "pg19mini test", 128)
    assert p.distances == (32, 64) and p.trials == 2
    assert p.command() == "zoo evaluate tiny --probe copy --trials 2"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--distances", "64", "100"], "distance 100 is past the model's context of 128 bytes"),
        (["--distances", "16"], "distance 16 is shorter than the span (32 bytes)"),
        (["--span", "128"], "span=128 does not fit the model's context of 128 bytes"),
        (["--cue", "32"], "shorter than the span (32 bytes)"),
        (["--trials", "1"], "needs at least 2"),
        (["--text-file", "SHORT"], "holds 100 bytes, fewer than one window"),
        (["--by-position"], "not with --by-position"),
        (["--span-kind", "letters", "emoji"], "unknown span kind 'emoji'"),
    ],
)
def test_cli_bad_input_is_a_one_line_error(tiny, tmp_path, capsys, extra, message):
    short = tmp_path / "short.txt"
    short.write_bytes(b"x" * 100)
    extra = [str(short) if a == "SHORT" else a for a in extra]
    with pytest.raises(SystemExit) as e:
        main(["evaluate", tiny, "--probe", "copy", *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
    assert err.count("\n") == 1 or "usage:" in err  # argparse's errors come after its usage line


def test_cli_probe_flags_need_probe_and_image_models_are_refused(tiny, tmp_path, capsys):
    for flags in (["--span", "8"], ["--span-kind", "digits"]):
        with pytest.raises(SystemExit) as e:
            main(["evaluate", tiny, *flags])
        assert e.value.code == 2 and "go with --probe" in capsys.readouterr().err
    zoo.create_model("image_transformer_tiny").save_pretrained(tmp_path / "image")
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(tmp_path / "image"), "--probe", "copy"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("zoo evaluate: error: ") and err.count("\n") == 1
    assert "byte-level causal language models" in err


# --- span kinds (issue 79): what the span is made of ----------------------------------------------
ALPHABETS = {  # byte values each kind may draw, and how many distinct ones 4 x 32 bytes must show
    "letters": (set(range(ord("a"), ord("z") + 1)), 20),
    "uppercase": (set(range(ord("A"), ord("Z") + 1)), 20),
    "digits": (set(range(ord("0"), ord("9") + 1)), 10),
    "printable": (set(range(0x20, 0x7F)), 60),
    "bytes": (set(range(1, 256)), 100),
}


def unique_words(n: int, prefix: str = "w") -> bytes:
    """``n`` bytes of words that occur once each (``w00000 w00001 ...``): a span of 7 bytes or
    more occurs once in them, so where it came from can be found."""
    return b" ".join(f"{prefix}{i:05d}".encode() for i in range(n // 7 + 1))[:n]


def controls(oracle: CopyOracle, kinds: int, trials: int, distances: int) -> list[list]:
    """The control inputs the oracle saw, per kind: every trial's first row."""
    per_kind = trials * (1 + distances)
    rows = oracle.inputs
    return [rows[k * per_kind : (k + 1) * per_kind : 1 + distances] for k in range(kinds)]


def test_each_span_kind_draws_spans_of_its_alphabet_on_the_same_windows(salad):
    kinds = [*ALPHABETS, "text"]
    oracle = CopyOracle(max_seq_len=512)
    p = copy_probe(oracle, text_file=salad, trials=4, distances=(64,), span_kind=kinds,
                   progress=False)  # fmt: skip
    assert isinstance(p, CopyProbes) and p.span_kinds == tuple(kinds)
    assert [k.span_kind for k in p.probes] == kinds and len({k.windows for k in p.probes}) == 1
    rows = controls(oracle, len(kinds), 4, 1)
    q = 512 - 32
    text = torch.tensor(list(salad.read_bytes()))
    for kind, kind_rows in zip(kinds, rows, strict=True):
        for (_, start), row in zip(p.windows, kind_rows, strict=True):
            assert torch.equal(row[:q], text[start : start + q])  # the same window for every kind
        spans = torch.stack([row[q:] for row in kind_rows])
        seen = set(spans.flatten().tolist())
        if kind == "text":  # the word salad's own bytes
            assert seen <= set(salad.read_bytes())
            assert all(bytes(s.tolist()) in salad.read_bytes() for s in spans)
        else:
            alphabet, at_least = ALPHABETS[kind]
            assert seen <= alphabet and len(seen) >= at_least, kind
    # a kind's spans do not depend on the other kinds measured with it
    alone = copy_probe(CopyOracle(max_seq_len=512), text_file=salad, trials=4, distances=(64,),
                       span_kind="digits", progress=False)  # fmt: skip
    assert isinstance(alone, CopyProbe) and alone == p["digits"]


def test_letters_are_drawn_as_before_the_kinds_existed(salad):
    """Windows and spans of seed 0 as the probe drew them before span kinds (values from that
    code), so the registered copy_gain metrics re-measure bit for bit."""
    oracle = CopyOracle(max_seq_len=512)
    p = copy_probe(oracle, text_file=salad, trials=5, distances=(64,), progress=False)
    assert p.span_kind == "letters"
    assert p.windows == ((0, 9772), (0, 7318), (0, 5872), (0, 3099), (0, 3536))
    (spans,) = controls(oracle, 1, 5, 1)
    assert bytes(spans[0][-32:].tolist()) == b"bbaevqxnpzsqooyhvrakwoatswecwaoc"
    assert bytes(spans[4][-32:].tolist()) == b"ftybjqcnqtyklmyfmblyqjzpyalvtkmk"
    again = copy_probe(CopyOracle(max_seq_len=512), text_file=salad, trials=5, distances=(64,),
                       span_kind=["letters", "bytes"], progress=False)  # fmt: skip
    assert again["letters"] == p


def test_text_spans_come_from_far_outside_the_window_of_one_file(tmp_path):
    path = tmp_path / "unique.txt"
    path.write_bytes(unique_words(20_000))
    data = path.read_bytes()
    oracle = CopyOracle(max_seq_len=512)
    p = copy_probe(oracle, text_file=path, trials=8, distances=(64,), span_kind="text",
                   progress=False)  # fmt: skip
    (rows,) = controls(oracle, 1, 8, 1)
    for (_, begin), row in zip(p.windows, rows, strict=True):
        span = bytes(row[-32:].tolist())
        at = data.find(span)
        assert at >= 0 and data.count(span) == 1
        assert at + 32 <= begin - 512 or at >= begin + 1024  # a window away (there is room)
        assert at == 0 or data[at - 1 : at] == b" "  # a word start
    short = tmp_path / "short.txt"
    short.write_bytes(unique_words(512 + 20))
    with pytest.raises(ConfigError, match="a text span of 32 bytes from outside a window"):
        copy_probe(CopyOracle(max_seq_len=512), text_file=short, trials=2, distances=(64,),
                   span_kind="text", progress=False)  # fmt: skip


def test_text_spans_come_from_another_document_of_the_split(tmp_path):
    from zoo.data.byte_corpora import PG19MINI_TEST

    (tmp_path / "pg19mini").mkdir()
    for prefix, ebook in zip("abc", PG19MINI_TEST, strict=True):
        (tmp_path / "pg19mini" / f"{ebook}.txt").write_bytes(unique_words(3000, prefix))
    oracle = CopyOracle(max_seq_len=256)
    p = copy_probe(oracle, data_dir=str(tmp_path), trials=12, distances=(64,), span_kind="text",
                   progress=False)  # fmt: skip
    (rows,) = controls(oracle, 1, 12, 1)
    docs = set()
    for row in rows:
        window, span = bytes(row[:-32].tolist()), bytes(row[-32:].tolist())
        doc = next(c for c in window if c in b"abc")  # the window's document
        assert span[0] in b"abc" and span[0] != doc  # another's, from a word start
        docs.add(doc)
    assert len(docs) >= 2 and p.text == "pg19mini test"


def test_several_kinds_side_by_side_in_the_files_the_table_and_the_plot(salad, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    from rich.console import Console

    import zoo.drawing
    from zoo.probes import copy_probe_rich_table, gain_metric

    drawn = []
    save = zoo.drawing._save
    monkeypatch.setattr(
        zoo.drawing, "_save", lambda fig, path: drawn.append(fig) or save(fig, path)
    )
    kinds = ("letters", "digits", "text")
    p = copy_probe(CopyOracle(max_seq_len=256), text_file=salad, trials=3, span_kind=kinds,
                   progress=False)  # fmt: skip
    paths = save_copy_probe(p, tmp_path / "out")
    assert load_copy_probe(tmp_path / "out") == p == CopyProbes.from_json(p.to_json())
    table = paths[0].read_text()
    assert (
        "| distance d | letters repeat | letters gain | letters 95% interval | digits repeat |"
        in table
    )
    d, t = p["digits"], p["text"]
    assert f"| digits | random digits | 3.32 | {d.control:.4f} |" in table
    assert "| text | natural text" in table and f"| — | {t.control:.4f} |" in table
    row = next(line for line in table.splitlines() if line.startswith("| 32 |"))
    assert f"| {d.repeat[0]:.4f} | {d.gain[0]:+.4f} | [{d.gain_low[0]:+.4f}, " in row
    assert row.count("|") == 2 + 3 * 3
    (fig,) = drawn  # a line per kind in each panel
    bits, gain = fig.axes
    assert [c.get_label() for c in gain.containers] == list(kinds)
    assert len(bits.get_lines()) == 2 * 3  # repeat and control per kind
    console = Console(record=True, width=200)
    console.print(copy_probe_rich_table(p))
    out = console.export_text()
    assert "span kinds letters, digits, text" in out and "control (no first copy): letters" in out
    assert f"digits {d.control:.4f}" in out
    assert p.command() == (f"zoo evaluate CopyOracle --probe copy --text-file {salad} --trials 3 "
                           "--span-kind letters digits text")  # fmt: skip
    # the registered copy_gain is the letters' alone (as if measured on a split)
    split = {"text_file": None, "dataset": "pg19mini", "split": "test"}
    on_split = CopyProbes(tuple(dataclasses.replace(k, **split) for k in p.probes))
    assert gain_metric(on_split, 64) == gain_metric(on_split["letters"], 64)
    assert gain_metric(on_split, 64).value == p["letters"].gain[1]
    with pytest.raises(ConfigError, match="copy_gain is registered on spans of random lowercase"):
        gain_metric(on_split["digits"], 64)


def test_a_file_written_before_span_kinds_loads_as_letters(salad, tmp_path):
    import json

    p = copy_probe(CopyOracle(max_seq_len=256), text_file=salad, trials=2, progress=False)
    old = json.loads(p.to_json())
    del old["span_kind"]
    (tmp_path / "copy_probe.json").write_text(json.dumps(old))
    assert load_copy_probe(tmp_path) == p and load_copy_probe(tmp_path).span_kind == "letters"
    assert "--span-kind" not in p.command()
    u = copy_probe(CopyOracle(max_seq_len=256), text_file=salad, trials=2, span_kind="uppercase",
                   progress=False)  # fmt: skip
    assert u.command().endswith("--trials 2 --span-kind uppercase")
    assert (
        "a span of 32 random uppercase letters" in save_copy_probe(u, tmp_path / "u")[0].read_text()
    )


@pytest.mark.parametrize("kind, message", [
    ("emoji", "unknown span kind 'emoji': the kinds are letters, uppercase, digits, printable"),
    ([], "span_kind: give at least one of letters"),
])  # fmt: skip
def test_an_unknown_span_kind_is_a_one_line_error(salad, kind, message):
    with pytest.raises(ConfigError) as e:
        copy_probe(CopyOracle(max_seq_len=256), text_file=salad, span_kind=kind, progress=False)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_cli_several_span_kinds(tiny, data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["evaluate", tiny, "--probe", "copy", "--trials", "2", "--span-kind", "letters",
          "digits", "--name", "tiny", "--out-dir", "out"])  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())
    assert "span kinds letters, digits" in out and "wrote out/copy_probe.md" in out
    p = load_copy_probe(tmp_path / "out")
    assert isinstance(p, CopyProbes) and p.span_kinds == ("letters", "digits")
    assert p.source == "tiny" and p.distances == (32, 64)
    assert p.command() == "zoo evaluate tiny --probe copy --trials 2 --span-kind letters digits"
