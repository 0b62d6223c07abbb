"""Publishing beyond byte-level LMs: the registry's metrics per task, an image checkpoint from run to
card to `zoo evaluate --registered` on the real CIFAR-10 copy, and BLEU's required signature."""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from fakes import fake_run

import zoo
from zoo.cli import main
from zoo.commands.listing import markdown_table
from zoo.data import ImageDataModule
from zoo.errors import RegistryError
from zoo.evaluation import evaluate, evaluate_images
from zoo.hub import Metric
from zoo.publishing import export_run, register
from zoo.tasks import ImageLM

REPO = Path(__file__).resolve().parents[2]
RECIPE = "recipes/sparse_transformer/cifar10_strided.yaml"
NAME = "sparse_transformer_cifar10.cifar10"
TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}  # CIFAR-10 shape, tiny width
IMAGES = 4
SLICE = Metric("bits_per_dim", 8.0, "cifar10", "test", IMAGES, IMAGES * 3072, "32-true")


@pytest.fixture
def image_run(tmp_path):
    return fake_run(tmp_path / "run", task=ImageLM, model="sparse_transformer_cifar10",
                    model_config=TINY, dataset="cifar10")  # fmt: skip


def test_bits_per_dim_of_an_image_run_is_the_mean_nll_of_the_sampled_test_images(
    image_run, data_dir
):
    m = evaluate_images(image_run, images=IMAGES, data_dir=str(data_dir), progress=False)
    assert (m.name, m.dataset, m.split, m.windows) == ("bits_per_dim", "cifar10", "test", IMAGES)
    assert m.targets == IMAGES * 3072 and m.context == 3072
    assert m.label == f"cifar10 test ({IMAGES} images (the seed-0 sample, ImageDataModule " \
        f"limit_eval), {IMAGES * 3072:,} sub-pixels)"  # fmt: skip
    # the same images, scored by hand: mean NLL per sub-pixel in nats / ln 2
    dm = ImageDataModule(dataset="cifar10", data_dir=str(data_dir), limit_eval=IMAGES)
    dm.setup("test")
    model = ImageLM.load_from_checkpoint(image_run / "checkpoints" / "best.ckpt").model.eval()
    x, y = next(iter(dm.test_dataloader()))
    with torch.no_grad():
        nll = F.cross_entropy(model(x).logits.flatten(0, 1), y.flatten())
    assert m.value == pytest.approx(nll.item() / math.log(2), abs=1e-4)
    # evaluate() dispatches on the data set
    assert evaluate(image_run, dataset="cifar10", windows=IMAGES, data_dir=str(data_dir),
                    progress=False).value == m.value  # fmt: skip


def test_an_image_checkpoint_publishes_with_its_own_card_and_re_measures(
    image_run, registry, data_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    metrics = [
        evaluate_images(image_run, images=IMAGES, progress=False),
        evaluate_images(image_run, split="valid", images=IMAGES, progress=False),
    ]
    grid = tmp_path / "grid.png"
    grid.write_bytes(b"\x89PNG not really")
    grid.with_name("grid_completions.png").write_bytes(b"\x89PNG completions")
    folder = export_run(image_run, registry.shipped_dir / NAME, name=NAME, recipe=REPO / RECIPE,
                        metrics=metrics, samples=grid)  # fmt: skip
    assert (folder / "samples.png").read_bytes() == grid.read_bytes()
    assert (folder / "samples_completions.png").is_file()
    card = (folder / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["pipeline_tag"] == "unconditional-image-generation"
    assert meta["metrics"] == ["bits_per_dim"]
    splits = [r["dataset"]["split"] for r in meta["model-index"][0]["results"]]
    assert all(s.endswith("(slice: 4 images (the seed-0 sample, ImageDataModule limit_eval))")
               for s in splits), splits  # fmt: skip
    assert "JPEG copy (quality ≈75)" in card and "| bits/dim | cifar10 † | test |" in card
    assert "![samples](samples.png)" in card and "sample_images(model" in card
    assert "2 × 3,072 sub-pixels (one image) per optimizer step" in card
    assert "byte-level" not in card

    entry = register(folder, name=NAME, recipe=RECIPE, metrics=metrics)
    assert entry.task == "image_lm" and entry.headline.name == "bits_per_dim"
    assert set(entry.files) >= {"samples.png", "samples_completions.png"}
    assert isinstance(zoo.from_pretrained(NAME), torch.nn.Module)
    # slices never reach the README's table, which shows whole splits only
    assert f"| `{NAME}` | sparse_transformer_lm | image_lm |" in markdown_table([entry])
    assert markdown_table([entry]).count("–") == 2

    monkeypatch.setenv("COLUMNS", "250")
    main(["evaluate", NAME, "--registered"])  # the data set comes from the registry
    out = capsys.readouterr().out
    assert out.count("bits/dim") == 2 and out.count("+0.0000") == 2


def test_the_registry_schema_knows_each_metric_and_bleu_needs_its_signature(registry):
    bleu = Metric("bleu", 38.5, "multi30k", "test2016", None, 1000, "32-true")
    from zoo.hub.registry import validate

    with pytest.raises(RegistryError, match="signature"):
        validate({"version": 1, "checkpoints": {"x.multi30k": _entry(bleu)}}, registry.path)
    signed = Metric(**(bleu.to_dict() | {"signature": "nrefs:1|tok:13a", "decoding": {"beam": 4}}))
    validate({"version": 1, "checkpoints": {"x.multi30k": _entry(signed)}}, registry.path)
    assert signed.format() == "38.50" and not signed.kind.lower_is_better
    bad = _entry(Metric("accuracy", 0.9, "cifar10", "test", None, 10, "32-true"))
    with pytest.raises(RegistryError, match="metrics.0.name"):
        validate({"version": 1, "checkpoints": {"x.cifar10": bad}}, registry.path)


def _entry(metric: Metric) -> dict:
    sha = "0" * 64
    return {
        "model": "x", "model_type": "transformer", "task": "translation", "parameters": 1,
        "dataset": metric.dataset, "description": "", "recipe": "r.yaml", "config": {},
        "hub": {"repo_id": "a/b", "revision": None},
        "files": {f: {"sha256": sha, "size": 1} for f in ("config.json", "model.safetensors")},
        "metrics": [metric.to_dict()], "training": {},
        "structure": {"pattern": "encoder-decoder", "context": 256, "trained_context": 256,
                      "causal": True},
    }  # fmt: skip


def test_evaluate_images_refuses_a_model_too_short_for_the_images(tmp_path, data_dir):
    from zoo.errors import ConfigError

    model = zoo.create_model("image_transformer_tiny")  # 4x4 images: 48 positions
    model.save_pretrained(tmp_path / "tiny")
    with pytest.raises(ConfigError, match="fewer than one cifar10 image"):
        evaluate_images(tmp_path / "tiny", images=2, data_dir=str(data_dir), progress=False)


def test_golden_logits_are_recorded_at_export_and_verify_reports_drift(image_run, tmp_path):
    from zoo.errors import CheckpointError
    from zoo.golden import golden_input, verify

    folder = export_run(image_run, tmp_path / "out", name=NAME, recipe=REPO / RECIPE,
                        metrics=[SLICE])  # fmt: skip
    golden = json.loads((folder / "golden.json").read_text())
    assert golden["input"]["x"] == [1, 1024] and len(golden["values"]) == 16
    assert verify(folder).identical and verify(folder).ok
    bf16 = verify(folder, dtype="bfloat16")
    assert bf16.ok and not bf16.identical and 0 < bf16.max_drift <= bf16.tolerance
    # a model that computes something else: its weights nudged by 1% noise
    model = zoo.from_pretrained(folder)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-2)
    drifted = verify(model, golden=folder / "golden.json")
    assert not drifted.ok and drifted.max_drift > 1e-3 and "DRIFT" in drifted.summary()
    assert golden_input(model)["x"].shape == (1, 1024)
    (folder / "golden.json").unlink()
    with pytest.raises(CheckpointError, match="never recorded"):
        verify(folder)


def test_zoo_verify_passes_on_the_shipped_copy_and_exits_1_on_drift(image_run, tmp_path, capsys):
    folder = export_run(image_run, tmp_path / "out", name=NAME, recipe=REPO / RECIPE,
                        metrics=[SLICE])  # fmt: skip
    main(["verify", str(folder)])
    assert "ok: bit-identical" in capsys.readouterr().out
    golden = json.loads((folder / "golden.json").read_text())
    golden["values"][0][2] += 0.5  # as if the model now computed another logit there
    (folder / "golden.json").write_text(json.dumps(golden))
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(folder)])
    assert exit_.value.code == 1 and "DRIFT" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(folder), "--dtype", "float8"])
    assert exit_.value.code == 2


def test_data_checksum_follows_the_content_of_every_split():
    from types import SimpleNamespace

    import numpy as np

    from zoo.lineage import data_checksum

    def dm(**splits):
        return SimpleNamespace(splits=splits, hparams=SimpleNamespace(dataset="d"))

    docs = [np.frombuffer(b"abc", np.uint8), np.frombuffer(b"de", np.uint8)]
    base = data_checksum(dm(train=docs, valid=docs[:1]))
    assert base["splits"] == ["train", "valid"] and base["dataset"] == "d"
    assert data_checksum(dm(train=list(docs), valid=docs[:1])) == base  # same content, same sum
    moved = [np.frombuffer(b"ab", np.uint8), np.frombuffer(b"cde", np.uint8)]  # same bytes, split
    assert data_checksum(dm(train=moved, valid=docs[:1]))["sha256"] != base["sha256"]
    assert data_checksum(dm(train=docs, valid=docs[:1]), ["train"])["sha256"] != base["sha256"]
    images = np.zeros((2, 4, 4, 3), np.uint8)
    flipped = images.copy()
    flipped[1, 0, 0, 0] = 1
    assert data_checksum(dm(train=images))["sha256"] != data_checksum(dm(train=flipped))["sha256"]
    assert data_checksum(SimpleNamespace(splits={})) is None
