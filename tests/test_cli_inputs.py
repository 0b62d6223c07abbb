"""What the `zoo` command does with the inputs users get wrong (issue 19): settings are never
dropped silently, and bad input is a one-line error with exit status 2."""

from pathlib import Path

import pytest
import yaml
from lightning import LightningDataModule, LightningModule

from zoo.cli import ZooCLI

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes/transformer_lm/pg19mini_v1.yaml"


def trainer_of(args: list[str]):
    cli = ZooCLI(
        LightningModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
        args=args, auto_configure_optimizers=False, run=False,
    )  # fmt: skip
    return cli.trainer


@pytest.mark.parametrize(
    "written, expected", [("1", 1), ("3", 3), ("1.0", 1.0), ("0.5", 0.5), ("0", 0)]
)
def test_integer_batch_limits_stay_integers(written, expected):
    """`--trainer.limit_val_batches 1` is one batch, not 100% (an int that became 1.0)."""
    trainer = trainer_of(["--config", str(RECIPE), "--trainer.limit_val_batches", written])
    assert trainer.limit_val_batches == expected
    assert type(trainer.limit_val_batches) is type(expected)


def test_integer_batch_limits_from_a_config_file_stay_integers(tmp_path):
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["trainer"]["limit_val_batches"] = 1
    recipe["trainer"]["limit_train_batches"] = 1.0
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    trainer = trainer_of(["--config", str(path)])
    assert trainer.limit_val_batches == 1 and type(trainer.limit_val_batches) is int
    assert trainer.limit_train_batches == 1.0 and type(trainer.limit_train_batches) is float


def test_init_from_a_checkpoint_of_another_architecture_is_an_error(capsys):
    """The routing recipe with a dense checkpoint used to train the dense model silently."""
    from zoo.cli import main

    routing = str(REPO / "recipes/routing_transformer/pg19mini_v1.yaml")
    with pytest.raises(SystemExit) as e:
        main(["fit", "--config", routing, "--model.init_args.init_from",
              "transformer_lm_small.pg19mini", "--trainer.max_steps", "0"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "transformer_lm_small.pg19mini is a TransformerLM" in err
    assert "routing_transformer_small_causal (RoutingTransformerLM)" in err
    assert "--model.init_args.model null" in err


def test_init_from_with_the_checkpoints_own_model_or_none():
    from zoo.errors import ConfigError
    from zoo.tasks import CausalLM

    name = "routing_transformer_small.pg19mini"  # causal routing, rotary positions
    rotary = {"position": "rotary"}
    assert CausalLM(model="routing_transformer_small_causal", model_config=rotary, init_from=name)
    assert (
        CausalLM(model=None, init_from=name, model_config={"dropout": 0.2}).model.config.dropout
        == 0.2
    )
    with pytest.raises(ConfigError, match=r"routing: 'topw' \(checkpoint: 'causal'\)"):
        CausalLM(model="routing_transformer_small", model_config=rotary, init_from=name)
