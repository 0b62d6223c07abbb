"""experiments/long_context/ablate.py: every run of both suites names a recipe and a model that exist and
parses as a `zoo fit` config, the test split's position buckets split at 256 into byte-weighted means,
and runs of one variant with several seeds get a mean and half-range row."""

import json

import pytest
import yaml
from fakes import REPO, recipe_module

from zoo.models.registry import get_preset

ablate = recipe_module("experiments/long_context/ablate.py")


@pytest.mark.parametrize(
    "suite,name", [(s, n) for s, variants in ablate.SUITES.items() for n in variants]
)
def test_every_run_names_an_existing_recipe_and_model(suite, name):
    variant = ablate.SUITES[suite][name]
    recipe = yaml.safe_load((REPO / (variant.recipe or ablate.RECIPE)).read_text())
    model = recipe["model"]["init_args"]["model"]
    extra = dict(zip(variant.extra[::2], variant.extra[1::2], strict=True))
    model = extra.get("--model.init_args.model", model)
    get_preset(model)  # KeyError for a renamed preset
    overrides = json.loads(extra.get("--model.init_args.model_config", "{}"))
    if suite == "equal_budget":
        assert overrides.get("position") == "rotary", "every equal-budget run has the fixed recipe"
    fields = get_preset(model).config.__dataclass_fields__
    assert set(overrides) <= set(fields), (
        f"{name}: unknown config keys {set(overrides) - set(fields)}"
    )


def test_equal_budget_runs_train_on_the_same_bytes_per_step():
    for name, variant in ablate.EQUAL_BUDGET.items():
        recipe = yaml.safe_load((REPO / variant.recipe).read_text())
        extra = dict(zip(variant.extra[::2], variant.extra[1::2], strict=True))
        batch = int(
            extra.get("--data.init_args.batch_size", recipe["data"]["init_args"]["batch_size"])
        )
        model = extra.get("--model.init_args.model", recipe["model"]["init_args"]["model"])
        overrides = json.loads(extra.get("--model.init_args.model_config", "{}"))
        context = overrides.get("max_seq_len", get_preset(model).config.max_seq_len)
        window = int(extra.get("--data.init_args.seq_len", context))  # shorter training windows
        assert window <= context and batch * window == 8192, name


def test_split_at_weights_buckets_by_their_bytes():
    profile = {
        "edges": [0, 64, 256, 512, 768],
        "bits": [3.0, 2.0, 1.0, None],
        "counts": [10, 30, 20, 0],
    }
    first, past = ablate._split_at(profile, 256)
    assert first == pytest.approx((3.0 * 10 + 2.0 * 30) / 40)
    assert past == pytest.approx(1.0)
    assert ablate._split_at({"edges": [0, 256], "bits": [2.5], "counts": [7]}, 256) == (2.5, None)


def test_table_adds_a_mean_row_for_variants_with_several_seeds():
    runs = [
        {"name": "local", "seed": s, "what": "w", "train_bpb": None, "val_bpb": v, "test_bpb": t,
         "steps": 400, "train_bytes": 8192 * 400, "wall_s": 100.0}
        for s, v, t in ((0, 2.0, 2.1), (1, 2.2, 2.3))
    ]  # fmt: skip
    text = ablate.table(runs, "equal_budget")
    assert "| local | 2 | 2.100 ± 0.100 | 2.200 ± 0.100 |" in text
    assert text.count("| local | ") == 3
    assert "| — |" in text  # no train log: a dash, not a crash


def test_an_unknown_run_name_is_a_one_line_error():
    with pytest.raises(SystemExit, match="unknown run 'dense'"):
        ablate._job("dense", 0, ablate.EQUAL_BUDGET)
    assert ablate._job("local:1", 0, ablate.EQUAL_BUDGET) == ("local", 1)
