"""Text in, text out: zoo.translate, a save_pretrained folder that carries its tokenizer (locally and
through the Hub), and the `zoo translate` command."""

import json

import pytest
import torch

import zoo
from zoo.beam_search import beam_search, translate
from zoo.cli import main
from zoo.data.translation import BOS_ID, EOS_ID, train_bpe
from zoo.errors import CheckpointError

TRANSLATORS = ["transformer_tiny", "lstm_attention_tiny"]  # both families take the same flags


@pytest.fixture(params=TRANSLATORS)
def model(tokenizer, request):
    torch.manual_seed(0)
    m = zoo.create_model(request.param, vocab_size=tokenizer.get_vocab_size()).eval()
    m.tokenizer = tokenizer
    return m


SENTENCES = ["ein Hund läuft", "", "eine Frau liest ein Buch im Park", "Mann"]


def test_translate_keeps_the_input_order_and_matches_beam_search(model, tokenizer):
    out = translate(model, SENTENCES, batch_size=2, max_len_b=6)
    assert len(out) == len(SENTENCES) and out[1] == ""  # an empty line stays empty
    for sentence, hyp in zip(SENTENCES, out, strict=True):
        if not sentence:
            continue
        src = torch.tensor([tokenizer.encode(sentence).ids])
        ((best, *_),) = beam_search(model, src, bos_id=BOS_ID, eos_id=EOS_ID, max_len_b=6)
        assert hyp == tokenizer.decode([t for t in best.tokens if t != EOS_ID])
    greedy = translate(model, SENTENCES, decoding="greedy", max_len_b=6)
    assert len(greedy) == len(SENTENCES)
    assert model.training is False


def test_translate_restores_training_mode(model):
    model.train()
    translate(model, ["ein Hund"], max_len_b=3)
    assert model.training


def test_translate_refuses_too_long_sentences_and_a_missing_tokenizer(model, tokenizer):
    long = " ".join(["Hund"] * 80)  # both tiny models: max_seq_len 64
    with pytest.raises(ValueError, match=r"sentence 1 has \d+ tokens .* max_seq_len=64"):
        translate(model, ["ein Hund", long])
    model.tokenizer = None
    with pytest.raises(ValueError, match="no tokenizer"):
        translate(model, ["ein Hund"])
    assert translate(model, ["ein Hund"], tokenizer=tokenizer, max_len_b=3)


def test_save_pretrained_carries_the_tokenizer(model, tokenizer, tmp_path):
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    loaded = zoo.from_pretrained(tmp_path)
    assert loaded.tokenizer.to_str() == tokenizer.to_str()
    assert translate(loaded, SENTENCES, max_len_b=6) == translate(model, SENTENCES, max_len_b=6)


def test_a_damaged_or_foreign_tokenizer_is_refused(model, tmp_path):
    model.save_pretrained(tmp_path)
    good = (tmp_path / "tokenizer.json").read_text()
    (tmp_path / "tokenizer.json").write_text(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="tokenizer.json: its manifest.json records"):
        zoo.from_pretrained(tmp_path)  # the manifest notices first
    (tmp_path / "manifest.json").unlink()  # without one, the loader's own checks still hold
    with pytest.warns(UserWarning, match="unverified"):
        with pytest.raises(CheckpointError, match="not a readable tokenizer"):
            zoo.from_pretrained(tmp_path)
        other = train_bpe(["ganz andere Wörter hier"] * 20, vocab_size=40)
        other.save(str(tmp_path / "tokenizer.json"))
        with pytest.raises(CheckpointError, match="different models"):
            zoo.from_pretrained(tmp_path)


def test_language_models_have_no_tokenizer_file(tmp_path):
    zoo.create_model("transformer_lm_tiny").save_pretrained(tmp_path)
    assert not (tmp_path / "tokenizer.json").exists()


def test_a_pulled_checkpoint_translates_with_no_other_files(model, hub, tmp_path):
    from zoo.publishing import push

    model.save_pretrained(tmp_path / "folder")
    push(tmp_path / "folder", "someone/de-en")
    pulled = zoo.from_pretrained("someone/de-en")
    assert pulled.tokenizer is not None
    assert translate(pulled, SENTENCES, max_len_b=6) == translate(model, SENTENCES, max_len_b=6)


def test_zoo_translate_reads_a_file_or_stdin(model, tmp_path, capsys, monkeypatch):
    import io

    model.save_pretrained(tmp_path / "m")
    source = tmp_path / "source.de"
    source.write_text("\n".join(SENTENCES) + "\n")
    main(["translate", "--checkpoint", str(tmp_path / "m"), "--input", str(source),
          "--output", str(tmp_path / "out.en"), "--max-len-b", "6"])  # fmt: skip
    lines = (tmp_path / "out.en").read_text().split("\n")
    assert lines[:-1] == translate(model, SENTENCES, max_len_b=6) and lines[-1] == ""
    monkeypatch.setattr("sys.stdin", io.StringIO("ein Hund läuft\n"))
    capsys.readouterr()
    main(["translate", "--checkpoint", str(tmp_path / "m"), "--decoding", "greedy",
          "--max-len-b", "6"])  # fmt: skip
    assert capsys.readouterr().out == translate(model, ["ein Hund läuft"], decoding="greedy",
                                                max_len_b=6)[0] + "\n"  # fmt: skip


def test_zoo_translate_and_generate_refuse_the_other_kind_of_model(model, tmp_path, capsys):
    model.save_pretrained(tmp_path / "seq2seq")
    zoo.create_model("transformer_lm_tiny").save_pretrained(tmp_path / "lm")
    with pytest.raises(SystemExit) as e:
        main(["translate", "--checkpoint", str(tmp_path / "lm")])
    assert e.value.code == 2 and "use `zoo generate`" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["generate", "--checkpoint", str(tmp_path / "seq2seq")])
    assert e.value.code == 2 and "use `zoo translate`" in capsys.readouterr().err


def test_registered_checkpoints_load_their_tokenizer_file_when_they_have_one():
    from types import SimpleNamespace

    from zoo.hub.download import load_files

    lm = SimpleNamespace(files={"config.json": {}, "model.safetensors": {}, "README.md": {}})
    mt = SimpleNamespace(files={**lm.files, "tokenizer.json": {}})
    assert load_files(lm) == ("config.json", "model.safetensors")
    assert load_files(mt) == ("config.json", "model.safetensors", "tokenizer.json")


@pytest.mark.parametrize("mapping", ["softmax", "sparsemax", "fusedmax", "csparsemax"])
def test_lstm_attention_weights_are_the_decoder_distributions(tokenizer, mapping):
    from zoo.beam_search import translate_with_attention

    torch.manual_seed(0)
    m = zoo.create_model("lstm_attention_tiny", vocab_size=tokenizer.get_vocab_size(),
                         mapping=mapping).eval()  # fmt: skip
    m.tokenizer = tokenizer
    text, weights, source, output = translate_with_attention(m, "ein Hund läuft", max_len_b=6)
    assert text == translate(m, ["ein Hund läuft"], max_len_b=6)[0]
    assert weights.shape == (len(output), len(source)) and output[-1] == "</s>"
    assert (source[-1] == "<sink>") == (mapping == "csparsemax")
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(output)))


def test_transformer_attention_weights_are_its_cross_attention(tokenizer):
    torch.manual_seed(0)
    model = zoo.create_model("transformer_tiny", vocab_size=tokenizer.get_vocab_size()).eval()
    src = torch.tensor([tokenizer.encode("ein Hund läuft im Park").ids + [0, 0]])
    tgt = torch.tensor([[BOS_ID, 5, 6, 7]])
    w = model.attention_weights(src, tgt)
    assert w.shape == (1, 4, src.shape[1])
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 4))
    assert (w[..., -2:] == 0).all()  # padding gets none
    # by hand: the last layer's queries against its keys, softmax, mean over heads
    attn = model.decoder[-1].cross_attn
    seen = []
    attn.register_forward_hook(lambda _m, a, _o: seen.append(a[0]))
    memory, mask = model.encode(src)
    model.decode(tgt, memory, mask)
    q = attn._heads(attn.q_proj(seen[0]))
    k, _ = attn.project_memory(memory)
    s = (q @ k.transpose(-1, -2) / attn.d_head**0.5).masked_fill(~mask[:, None, None], -torch.inf)
    torch.testing.assert_close(w, s.softmax(-1).mean(1))


def test_zoo_translate_draws_the_attention_map(model, tmp_path, capsys, monkeypatch):
    import io

    model.save_pretrained(tmp_path / "m")
    monkeypatch.setattr("sys.stdin", io.StringIO("\nein Hund läuft\nMann\n"))
    png = tmp_path / "map.png"
    main(["translate", "--checkpoint", str(tmp_path / "m"), "--max-len-b", "6",
          "--attention-map", str(png)])  # fmt: skip
    captured = capsys.readouterr()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "attention map of 'ein Hund läuft' written to" in captured.err
    assert len(captured.out.split("\n")) == 4  # the translations are printed as without the flag
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    with pytest.raises(SystemExit) as e:
        main(["translate", "--checkpoint", str(tmp_path / "m"), "--attention-map", str(png)])
    assert e.value.code == 2 and "needs a non-empty sentence" in capsys.readouterr().err


def test_drawing_checks_its_labels(tmp_path):
    from zoo.drawing import AttentionMap, draw_attention_maps

    with pytest.raises(ValueError, match=r"weights of shape \(2, 3\) do not match 2 output and 2"):
        draw_attention_maps([AttentionMap("x", torch.zeros(2, 3), ["a", "b"], ["c", "d"])],
                            tmp_path / "x.png")  # fmt: skip
    path = draw_attention_maps(
        [AttentionMap("softmax", torch.full((2, 3), 1 / 3), list("abc"), list("de")),
         AttentionMap("sparsemax", torch.eye(2, 3), list("abc"), list("de"))],
        tmp_path / "two.png", title="two panels",
    )  # fmt: skip
    assert path.stat().st_size > 1000


def test_drawing_lays_panels_out_in_rows(tmp_path):
    from PIL import Image

    from zoo.drawing import AttentionMap, draw_attention_maps

    maps = [AttentionMap(f"m{i}", torch.eye(2, 3), list("abc"), list("de")) for i in range(4)]
    wide = Image.open(draw_attention_maps(maps, tmp_path / "row.png")).size
    grid = Image.open(draw_attention_maps(maps, tmp_path / "grid.png", columns=2)).size
    assert wide[0] > wide[1] and grid[0] < wide[0] and grid[1] > wide[1]
    with pytest.raises(ValueError, match="columns must be >= 1"):
        draw_attention_maps(maps, tmp_path / "x.png", columns=0)
