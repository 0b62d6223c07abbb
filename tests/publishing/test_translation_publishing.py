"""Publishing a translation model: BLEU measured on a corpus split with its signature and decoding,
an averaged run exported with its tokenizer and its run's training facts, and `zoo translate NAME`
decoding as the registered test BLEU was measured."""

import json

import lightning
import pytest
import torch
from published import REPO

import zoo
from zoo.beam_search import PAPER_DECODING
from zoo.cli import main
from zoo.data.translation import load_pairs
from zoo.errors import CheckpointError, ConfigError
from zoo.evaluation import evaluate, evaluate_translation
from zoo.hub import Metric, load_registry
from zoo.publishing import export_run, register
from zoo.tasks import Translation

NAME = "transformer_tiny.multi30k"
RECIPE = "recipes/transformer/transformer_small.multi30k.yaml"


@pytest.fixture
def averaged_run(tmp_path, tokenizer):
    """A run as recipes/transformer/multi30k_de_en.sh leaves it: periodic weights-only checkpoints,
    last.ckpt (with the TrainingSummary) and checkpoints/averaged2.ckpt (`zoo average`)."""
    torch.manual_seed(0)
    module = Translation(model="transformer_tiny",
                         model_config={"vocab_size": tokenizer.get_vocab_size(),
                                       "max_seq_len": 256})  # fmt: skip
    module.tokenizer = tokenizer
    hp = dict(module.hparams) | {"_class_path": "zoo.tasks.Translation"}
    data = {"dataset": "multi30k", "source_lang": "de", "target_lang": "en", "vocab_size": 64,
            "max_tokens": 4096, "seed": 0}  # fmt: skip
    ckpts = tmp_path / "run" / "checkpoints"
    (ckpts / "every100").mkdir(parents=True)
    base = {"state_dict": module.state_dict(), "hyper_parameters": hp, "epoch": 0,
            "datamodule_hyper_parameters": data, "tokenizer": tokenizer.to_str(),
            "pytorch-lightning_version": lightning.__version__}  # fmt: skip
    for step in (100, 200):
        torch.save(base | {"global_step": step}, ckpts / "every100" / f"step{step:05d}.ckpt")
    summary = {"tokens": 80_000, "wall_time": 20.0, "hardware": ["test CPU (2 threads)"],
               "precision": "bf16-mixed", "git_commits": ["1" * 40], "data": None}  # fmt: skip
    torch.save(base | {"global_step": 200, "callbacks": {"TrainingSummary": summary}},
               ckpts / "last.ckpt")  # fmt: skip
    main(
        ["average", str(ckpts / "every100"), "--last", "2", "--out", str(ckpts / "averaged2.ckpt")]
    )
    return ckpts / "averaged2.ckpt"


def _echo_references(monkeypatch, split: str, data_dir) -> list[list[str]]:
    """Make zoo.translate return each source sentence's reference from ``split``: a perfect model.
    Returns the list its calls' sentences are appended to."""
    pairs = dict(load_pairs("multi30k", split, "de", "en", data_dir=str(data_dir)))
    calls: list[list[str]] = []

    def perfect(model, sentences, **settings):
        calls.append(list(sentences))
        perfect.settings = settings
        return [pairs[s] for s in sentences]

    monkeypatch.setattr("zoo.beam_search.translate", perfect)
    return calls, perfect


@pytest.mark.parametrize("split, corpus_split", [("test", "test_2016_flickr"), ("valid", "val")])
def test_bleu_scores_the_first_sentences_of_the_split_with_its_signature(
    averaged_run, data_dir, monkeypatch, split, corpus_split
):
    calls, perfect = _echo_references(monkeypatch, corpus_split, data_dir)
    m = evaluate(averaged_run, dataset="multi30k", split=split, windows=8, data_dir=str(data_dir),
                 progress=False)  # fmt: skip
    sources = [
        s for s, _ in load_pairs("multi30k", corpus_split, "de", "en", data_dir=str(data_dir))
    ]
    assert calls == [sources[:8]]
    assert m.name == "bleu" and m.value == 100.0 and (m.windows, m.targets) == (8, 8)
    assert m.split == split and m.precision == "32-true" and m.context is None
    assert m.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert m.decoding == PAPER_DECODING | {"checkpoint": "average of 2 (steps 100, 200)"}
    assert perfect.settings["alpha"] == 0.6 and perfect.settings["decoding"] == "beam"


def test_bleu_of_real_translations_is_sacrebleus(averaged_run, data_dir):
    """Not echoed: the tiny model's own greedy output, scored as sacrebleu scores it."""
    import sacrebleu

    from zoo.beam_search import translate

    m = evaluate_translation(averaged_run, sentences=4, decoding={"search": "greedy"},
                             data_dir=str(data_dir), progress=False)  # fmt: skip
    pairs = load_pairs("multi30k", "test_2016_flickr", "de", "en", data_dir=str(data_dir))[:4]
    model = Translation.load_from_checkpoint(averaged_run).model.eval()
    hyps = translate(model, [s for s, _ in pairs], decoding="greedy")
    expected = sacrebleu.metrics.BLEU().corpus_score(hyps, [[t for _, t in pairs]]).score
    assert m.value == round(expected, 4)
    assert m.decoding["search"] == "greedy" and "alpha" not in m.decoding


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"decoding": {"beam": 4}}, "decoding settings ['beam'] are not understood"),
        ({"decoding": {"search": "sampling"}}, "'sampling' are not understood"),
        ({"precision": "bf16-mixed"}, "measure BLEU in fp32"),
        ({"first_bytes": 100}, "give --windows N"),
        ({"split": "train"}, "split must be 'valid' or 'test'"),
    ],
)
def test_bad_translation_settings_are_one_line_errors(averaged_run, data_dir, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        evaluate(averaged_run, dataset="multi30k", windows=2, data_dir=str(data_dir),
                 progress=False, **kwargs)  # fmt: skip


def test_a_translation_checkpoint_is_not_measured_in_bits_per_byte(averaged_run):
    with pytest.raises(CheckpointError, match="is a checkpoint of Translation, not CausalLM: "
                       "measure it on a parallel corpus"):  # fmt: skip
        evaluate(averaged_run, dataset="pg19mini", windows=1, progress=False)


def test_an_averaged_run_publishes_with_its_tokenizer_and_translates_by_name(
    averaged_run, registry, monkeypatch, capsys, tmp_path
):
    bleu = Metric("bleu", 1.5, "multi30k", "test", None, 1000, "32-true",
                  signature="nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                  decoding={"search": "beam", "beam_size": 4, "alpha": 2.0, "max_len_a": 1.0,
                            "max_len_b": 50, "checkpoint": "average of 2 (steps 100, 200)"})  # fmt: skip
    from zoo.drawing import AttentionMap
    from zoo.support import AttentionProfile, save_attention_profile

    profile = AttentionProfile(source="runs/x", mapping="softmax", dataset="multi30k",
                               split="test", sentences=1000, support=12.0, source_tokens=12.0,
                               line=22, sentence="ein Hund", reference="a dog",
                               translation="a dog", beam_size=4, alpha=2.0)  # fmt: skip
    drawn = AttentionMap("softmax", torch.full((3, 2), 0.5), ["ein", "Hund"], ["a", "dog", "</s>"])
    save_attention_profile(profile, drawn, tmp_path / "attention")
    folder = export_run(averaged_run, registry.shipped_dir / NAME, name=NAME,
                        recipe=REPO / RECIPE, metrics=[bleu],
                        attention=tmp_path / "attention")  # fmt: skip
    entry = register(folder, name=NAME, recipe=RECIPE, metrics=[bleu])
    assert entry.task == "translation" and "tokenizer.json" in entry.files
    assert {"attention.md", "attention.json", "attention.png"} <= set(entry.files)
    assert "## Attention over the source" in (folder / "README.md").read_text()
    assert f"`zoo evaluate {NAME} --attention --dataset multi30k --split test --line 22`" in (
        folder / "README.md").read_text()  # the card names the checkpoint, not the run
    facts = json.loads((folder / "training.json").read_text())
    assert facts["averaged_from"] == {"global_steps": [100, 200]}
    assert facts["tokens"] == 80_000 and facts["optimizer_steps"] == 200  # from last.ckpt
    assert facts["data"]["source_lang"] == "de" and facts["optimization"]["label_smoothing"] == 0.1
    card = (folder / "README.md").read_text()
    assert "pipeline_tag: translation" in card and "alpha 2.0" in card
    assert "beam_size=4, alpha=2.0))" in card and "- de\n- en" in card
    model = zoo.from_pretrained(NAME)
    assert (
        model.tokenizer.to_str()
        == Translation.load_from_checkpoint(averaged_run).tokenizer.to_str()
    )

    seen = {}

    def fake(model, sentences, **settings):
        seen.update(settings)
        return ["a dog"] * len(sentences)

    monkeypatch.setattr("zoo.beam_search.translate", fake)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("ein Hund\n"))
    main(["translate", "--checkpoint", NAME])
    assert capsys.readouterr().out == "a dog\n"
    assert (seen["decoding"], seen["beam_size"], seen["alpha"]) == ("beam", 4, 2.0)
    main(["translate", "--checkpoint", NAME, "--alpha", "0.6", "--decoding", "greedy"])
    assert (seen["decoding"], seen["alpha"]) == ("greedy", 0.6)
    assert load_registry().get(NAME).headline.decoding["alpha"] == 2.0


def test_a_translation_data_module_checksums_its_sentence_pairs(data_dir, tmp_path):
    """The same sum at fit time (TrainingSummary) as the shipped model's, recomputed at export;
    a changed sentence changes it."""
    from zoo.data import TranslationDataModule
    from zoo.lineage import data_checksum

    shipped = json.loads(
        (REPO / "checkpoints/transformer_small.multi30k/training.json").read_text()
    )
    recorded = shipped["lineage"]["data"]
    fresh = data_checksum(TranslationDataModule(dataset="multi30k", data_dir=str(data_dir)))
    assert fresh == {k: v for k, v in recorded.items() if k != "recorded"}
    for split in ("train", "val"):
        for lang in ("de", "en"):
            pairs = load_pairs("multi30k", split, "de", "en", data_dir=str(data_dir))
            lines = [de if lang == "de" else en for de, en in pairs]
            if split == "val" and lang == "en":
                lines[7] += "!"
            (tmp_path / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    edited = TranslationDataModule(dataset="text_files", path=str(tmp_path))
    assert data_checksum(edited)["sha256"] != fresh["sha256"]
