"""One way to name an attention in every LM family: the Sparse, Routing and Image families' own
fields build registered mechanisms (local, strided, fixed, dense, routing, local_1d, local_2d), and
their ``attention`` takes any registered mechanism or a per-layer list of them
(zoo.models.attention_config)."""

import dataclasses

import pytest
import torch

import zoo
from zoo.attention.mechanisms.patterns import FixedParams, LocalParams, StridedParams
from zoo.attention.routing import RoutingParams, RoutingSpec
from zoo.errors import ConfigError
from zoo.models import SparseTransformerConfig, TransformerLM, get_preset
from zoo.models.routing_transformer import RoutingTransformerConfig

OWN_FAMILY_PRESETS = [
    "sparse_transformer_small",  # fixed, merged
    "sparse_transformer_small_strided",  # strided, multihead
    "sparse_transformer_small_dense",  # causal: the dense mechanism
    "routing_transformer_small",  # top-w routing in every layer
    "routing_transformer_small_top2",  # causal routing with local layers below
    "routing_transformer_small_local",  # all heads local
    "image_transformer_cifar10_2d",  # local_2d on the image's rows
    "image_transformer_cifar10_1d",  # local_1d
]


def _tiny(name: str, **overrides):
    preset = get_preset(name)
    config = preset.model_cls.tiny_config(preset.config.replace(**overrides))
    return preset.model_cls, config


@pytest.mark.parametrize("name", OWN_FAMILY_PRESETS)
def test_a_familys_own_fields_are_the_registered_mechanisms_they_name(name):
    """The same model, built from the family's fields or from ``attention`` naming the
    mechanisms those fields describe: the same parameters and the same outputs."""
    cls, own = _tiny(name)
    assert not own.names_attention
    named = own.replace(attention=own.own_attention())
    assert named.names_attention and named.attention_specs == own.attention_specs
    torch.manual_seed(0)
    a = cls(own).eval()
    b = cls(named).eval()
    b.load_state_dict(a.state_dict())  # strict: the same names and shapes
    ids = torch.randint(0, own.vocab_size, (2, own.max_seq_len))
    torch.testing.assert_close(a(ids).logits, b(ids).logits, rtol=0, atol=0)


def test_each_knob_has_one_default():
    sparse = {f.name: f.default for f in dataclasses.fields(SparseTransformerConfig)}
    assert sparse["window"] == LocalParams.window
    assert sparse["block_size"] == LocalParams.block_size == StridedParams.block_size
    assert (sparse["stride"], sparse["integration"]) == (StridedParams.stride, "merged")
    assert (sparse["c"], sparse["distinct_summaries"]) == (FixedParams.c, True)
    routing = {f.name: f.default for f in dataclasses.fields(RoutingTransformerConfig)}
    spec = {f.name: f.default for f in dataclasses.fields(RoutingSpec)}
    for f in dataclasses.fields(RoutingParams):
        assert routing[f.name] == f.default, f.name
        if f.name not in ("causal_window", "n_local_heads", "window", "n_clusters"):
            assert spec[f.name] == f.default, f.name  # the resolved spec's own defaults


@pytest.mark.parametrize(
    "name",
    ["sparse_transformer_small", "routing_transformer_small_top2", "image_transformer_cifar10_2d"],
)
def test_a_per_layer_list_in_a_family_that_builds_its_own(name, tmp_path):
    """MoBA below and dense on top in a Sparse or Routing model: causal, saved and loaded."""
    cls, config = _tiny(name, attention=["local", "moba", "moba", {"name": "dense"}])
    assert config.n_layers == 2  # the tiny size keeps the first entry and the last
    assert config.structure()["pattern"] == "local+dense"
    model = cls(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 40))
    changed = ids.clone()
    changed[0, 30:] = (changed[0, 30:] + 1) % config.vocab_size
    torch.testing.assert_close(model(ids).logits[:, :30], model(changed).logits[:, :30])
    model.save_pretrained(tmp_path)
    loaded = zoo.from_pretrained(tmp_path)
    assert loaded.config.attention == config.attention
    assert loaded.config.names_attention  # never read back as the family's own fields
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_explicit_dense_in_such_a_family_is_saved_as_a_mapping():
    config = get_preset("sparse_transformer_small").config.replace(attention="dense")
    assert not config.names_attention and config.pattern == "fixed"  # the family default
    named = get_preset("sparse_transformer_small").config.replace(attention={"name": "dense"})
    assert named.attention == {"name": "dense"} and named.structure()["pattern"] == "dense"
    assert type(named).from_dict(named.to_dict()) == named


def test_the_image_familys_own_values_and_a_named_local_2d():
    config = get_preset("image_transformer_cifar10_2d").config
    assert not config.names_attention and config.structure()["pattern"] == "local_2d"
    named = config.replace(attention={"name": "local_2d", "memory_height": 8})
    assert named.names_attention and named.attention_specs[0].params.width is None
    assert named.attention["memory_height"] == 8 and named.memory_height == 4  # fields unused
    bare = config.replace(attention="local_1d")  # a bare own value: the family's fields
    assert not bare.names_attention and bare.pattern().name.startswith("local_1d(query_block=256")
    with pytest.raises(ConfigError, match="local_2d: give width"):
        zoo.create_model("transformer_lm_tiny", attention="local_2d")


def test_a_named_attention_beside_a_changed_family_field_is_a_one_line_error():
    with pytest.raises(ConfigError, match="so c, pattern would have no effect") as err:
        zoo.create_model("sparse_transformer_small", attention="moba", pattern="strided", c=16)
    assert "\n" not in str(err.value)
    # the preset's own fields give way when attention alone is named
    assert (
        zoo.create_model("routing_transformer_small_top2", attention="moba").config.n_local_heads
        == 4
    )


def test_routing_is_a_mechanism_any_lm_can_use():
    config = TransformerLM.tiny_config(
        get_preset("transformer_lm_small_moba").config.replace(
            attention=["local"] * 3 + [{"name": "routing", "routing": "causal", "shift_keys": True}]
        )
    )
    model = TransformerLM(config)
    layer = model.blocks[1].attention
    assert type(layer).__name__ == "RoutingSelfAttention" and layer.spec.shift_keys
    assert layer.spec.causal_window == config.max_seq_len // layer.spec.n_clusters
    assert config.structure()["pattern"] == "local+routing"
    assert config.structure()["causal"] is True
    topw = config.replace(attention="routing")
    assert topw.structure()["causal"] is False  # top-w looks at the whole sequence
    longer = TransformerLM(config).context_config(2 * config.max_seq_len)
    assert longer.attention_specs[1].params.causal_window == layer.spec.causal_window  # pinned


@pytest.mark.parametrize(
    ("attention", "match"),
    [
        ({"name": "routing", "n_local_heads": 9}, "exceeds the model's n_heads"),
        ({"name": "routing", "routing": "topw", "shift_keys": True}, "shift_keys=true needs"),
        ({"name": "fixed", "stride": 8, "c": 16}, "1 <= c <= stride"),
        ({"name": "strided", "integration": "stacked"}, "'stacked' is not one of"),
        ({"name": "local", "window": 0}, "window must be a positive integer"),
    ],
)
def test_bad_mechanism_parameters_are_config_errors(attention, match):
    with pytest.raises(ConfigError, match=match):
        zoo.create_model("transformer_lm_tiny", attention=attention)
