import json

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


REQUIRED_STRUCTURE = {"pattern", "context", "causal"}


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_preset_describes_its_attention_structure(name):
    config = zoo.models.registry.get_preset(name).config
    structure = config.structure()
    assert REQUIRED_STRUCTURE <= set(structure) and structure["pattern"] != "unknown"
    assert structure["context"] == config.max_seq_len
    assert json.loads(json.dumps(structure)) == structure  # plain data, as the registry stores it


def test_structure_says_what_looks_ahead_and_what_each_pattern_keeps():
    def structure(name, **overrides):
        return zoo.models.registry.get_preset(name).config.replace(**overrides).structure()

    assert structure("routing_transformer_small")["causal"] is False  # top-w looks ahead
    assert structure("routing_transformer_small", routing="causal")["causal"] is True
    assert structure("routing_transformer_small", routing="random")["causal"] is True
    local = structure("routing_transformer_small_local")  # no routing heads: local attention
    assert (local["pattern"], local["window"], local["causal"]) == ("local", 128, True)
    assert structure("routing_transformer_small_dense")["pattern"] == "dense"
    assert structure("routing_transformer_small", n_routing_layers=0)["pattern"] == "local"
    fixed = structure("sparse_transformer_small")
    assert (fixed["pattern"], fixed["stride"], fixed["c"]) == ("fixed", 128, 32)
    assert "c" not in structure("sparse_transformer_small_strided")
    assert structure("image_transformer_cifar10_1d")["query_block"] == 256
    assert structure("transformer_lm_small_sparsemax")["mechanism"] == "sparsemax"


def test_checkpoint_filters_on_structure(monkeypatch):
    from zoo.hub.registry import context_filter, list_pretrained

    keep = context_filter(">=4096")
    assert keep(4096) and keep(8192) and not keep(256) and not keep(None)
    assert context_filter("4,096")(4096) and not context_filter("<256")(256)
    with pytest.raises(ConfigError, match="not a length or a comparison"):
        context_filter("long")
    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)  # the repository's registry
    long = list_pretrained(context=">=8192")
    assert long and all(e.structure["context"] >= 8192 for e in long)
    assert all(e.structure["context"] < 8192 for e in list_pretrained(context="<8192"))
    dense = list_pretrained(attention="dense")
    assert "transformer_lm_small.pg19mini" in {e.name for e in dense}
    assert all(e.structure["pattern"] == "dense" for e in dense)
    assert all(not e.structure["causal"] for e in list_pretrained(causal=False))
    assert {e.name for e in list_pretrained(causal=True)} | {
        e.name for e in list_pretrained(causal=False)
    } == {e.name for e in list_pretrained()}
    # the retired checkpoints only when asked for, as `zoo list --all`
    every = list_pretrained(include_retired=True)
    retired = {e.name for e in every if e.retired is not None}
    assert "sparse_transformer_small.pg19mini" in retired
    assert {e.name for e in list_pretrained()} == {e.name for e in every} - retired
