import pytest

import zoo
from zoo.errors import ConfigError, UnknownModelError


def test_list_models_sorted_and_filterable():
    names = zoo.list_models()
    assert names == sorted(names)
    assert zoo.list_models("transformer_lm_*") == [
        n for n in names if n.startswith("transformer_lm_")
    ]


def test_create_model_applies_overrides():
    model = zoo.create_model("transformer_lm_tiny", max_seq_len=64, n_layers=3)
    assert model.config.max_seq_len == 64 and len(model.blocks) == 3


def test_unknown_model_suggests_close_names():
    with pytest.raises(UnknownModelError, match="Did you mean 'transformer_lm_small'"):
        zoo.create_model("transformer_lm_smal")


def test_names_are_exact():
    with pytest.raises(UnknownModelError):
        zoo.create_model("Transformer_LM_Small")


def test_unknown_config_key_is_an_error():
    with pytest.raises(ConfigError, match="n_layer.*Did you mean 'n_layers'"):
        zoo.create_model("transformer_lm_tiny", n_layer=3)
