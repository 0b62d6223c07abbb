"""Gradient checkpointing (``model.gradient_checkpointing_enable()``) for every registered model at a
tiny size: the same loss, gradients and buffers as without it, each layer run a second time in
backward (and only then), fewer activations kept for backward; the Routing Transformer's
centroids moved once per step; the Sparse Transformer's retired ``checkpoint_attention`` key."""

import json
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
from tests.models.test_models import tiny_model
from zoo.errors import ConfigError
from zoo.models import SparseTransformerConfig, SparseTransformerLM
from zoo.models.registry import get_preset

REPO = Path(__file__).resolve().parents[2]
PRESETS = zoo.list_models()
SEQ2SEQ = [n for n in PRESETS if getattr(get_preset(n).model_cls, "is_encoder_decoder", False)]
# the encoder-decoders' sizes, taken from their family's *_tiny preset
SIZES = ("vocab_size", "max_seq_len", "d_model", "n_heads", "d_ff", "n_encoder_layers",
         "n_decoder_layers", "d_embedding", "d_hidden", "d_attention")  # fmt: skip


def tiny(name: str, dropout: float = 0.1) -> nn.Module:
    """Preset ``name`` at its family's tiny size with ``dropout`` (the masks must repeat)."""
    preset = get_preset(name)
    if name in SEQ2SEQ:
        small = next(get_preset(n) for n in SEQ2SEQ
                     if n.endswith("_tiny") and get_preset(n).model_cls is preset.model_cls)  # fmt: skip
        fields = preset.config.field_names()
        config = preset.config.replace(
            **{k: getattr(small.config, k) for k in SIZES if k in fields}, dropout=dropout
        )
        torch.manual_seed(0)
        return preset.model_cls(config)
    model = tiny_model(name)
    config = model.config.replace(dropout=dropout)
    torch.manual_seed(0)
    fresh = type(model)(config)
    fresh.load_state_dict(model.state_dict())  # tiny_model's non-zero output weights
    return fresh


def inputs(model: nn.Module, T: int = 24, seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    if getattr(model, "is_encoder_decoder", False):  # token ids from 1: 0 is padding
        return torch.randint(1, V, (2, 11), generator=g), torch.randint(1, V, (2, 9), generator=g)
    return (torch.randint(0, V, (2, min(T, model.config.max_seq_len)), generator=g),)


def logits(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out


def loss_of(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    out = logits(model(*batch))
    target = torch.roll(batch[-1], -1, 1)  # any fixed target will do
    return F.cross_entropy(out.flatten(0, 1).float(), target.flatten())


def layers(model: nn.Module) -> list[nn.Module]:
    """The modules a family checkpoints: its blocks, encoder and decoder layers, or (LSTM) the
    decoder, called once per target step."""
    if hasattr(model, "blocks"):
        return list(model.blocks)
    if isinstance(model.decoder, nn.ModuleList):
        return [*model.encoder, *model.decoder]
    return [model.decoder]


def one_step(model: nn.Module, checkpointing: bool, seed: int = 0) -> dict:
    """One training step (forward, backward) from the RNG state ``seed``: the loss, every
    gradient, the buffers after it and how often each layer ran."""
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    calls = [0] * len(layers(model))
    hooks = [
        layer.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
        for i, layer in enumerate(layers(model))
    ]
    model.train().zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = loss_of(model, inputs(model))
    loss.backward()
    for hook in hooks:
        hook.remove()
    return {
        "loss": loss.detach(),
        "grads": {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        "buffers": {n: b.clone() for n, b in model.named_buffers()},
        "calls": calls,
    }


def assert_same(got: dict, want: dict) -> None:
    """fp32, the same operations on the same inputs: equal to rounding (here bit for bit)."""
    close = dict(rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(got["loss"], want["loss"], **close)
    assert got["grads"].keys() == want["grads"].keys() and got["grads"]
    for key in ("grads", "buffers"):
        for name in want[key]:
            torch.testing.assert_close(got[key][name], want[key][name], **close, msg=name)


@pytest.mark.parametrize("name", PRESETS)
def test_checkpointing_gives_the_same_step_and_runs_each_layer_again(name):
    """Dropout 0.1: the recomputation must draw the same masks. Each layer runs twice as often
    (forward, then again in backward): without that the equality would prove nothing."""
    model = tiny(name)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    plain = one_step(model, checkpointing=False)
    model.load_state_dict(state)  # the buffers (routing centroids) as before the first step
    recomputed = one_step(model, checkpointing=True)
    assert_same(recomputed, plain)
    assert recomputed["calls"] == [2 * c for c in plain["calls"]] and min(plain["calls"]) > 0


def first_layer_calls(model: nn.Module, training: bool, grad: bool) -> int:
    """How often the first checkpointed layer runs over one forward (and backward, with grad)."""
    calls = []
    hook = layers(model)[0].register_forward_pre_hook(lambda *_: calls.append(1))
    model.train(training)
    with torch.set_grad_enabled(grad):
        loss = loss_of(model, inputs(model))
    if grad:
        loss.backward()
    hook.remove()
    return len(calls)


@pytest.mark.parametrize("name", ["transformer_lm_tiny", "transformer_tiny", "lstm_attention_tiny"])
def test_recomputation_only_in_training_with_gradients(name):
    model = tiny(name)
    once = first_layer_calls(model, training=True, grad=True)
    model.gradient_checkpointing_enable()
    assert first_layer_calls(model, training=True, grad=True) == 2 * once
    assert first_layer_calls(model, training=False, grad=True) == once  # eval
    assert first_layer_calls(model, training=True, grad=False) == once  # no_grad
    model.gradient_checkpointing_disable()
    assert first_layer_calls(model, training=True, grad=True) == once


def test_enable_disable_round_trip_and_transformers_names():
    model = tiny("transformer_lm_tiny", dropout=0.0)
    assert model.supports_gradient_checkpointing
    assert not model.is_gradient_checkpointing and not model.gradient_checkpointing
    batch = inputs(model)
    before = logits(model.eval()(*batch))
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing and model.gradient_checkpointing
    torch.testing.assert_close(logits(model(*batch)), before, rtol=0, atol=0)
    model.gradient_checkpointing_disable()
    assert not model.is_gradient_checkpointing
    model.gradient_checkpointing_enable({"use_reentrant": False, "preserve_rng_state": True})
    assert model.is_gradient_checkpointing
    assert model.gradient_checkpointing_kwargs == {
        "use_reentrant": False,
        "preserve_rng_state": True,
    }
    assert not type(model)(model.config).is_gradient_checkpointing  # a state of one model


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"use_reentrant": True}, "use_reentrant=True"), ({"offload": True}, "unknown key"),
     ({"debug": True}, "unknown key")],
)  # fmt: skip
def test_unsupported_checkpoint_options_are_one_line_config_errors(kwargs, message):
    model = tiny("transformer_lm_tiny")
    with pytest.raises(ConfigError, match=message) as info:
        model.gradient_checkpointing_enable(kwargs)
    assert "\n" not in str(info.value) and "preserve_rng_state" in str(info.value)
    assert not model.is_gradient_checkpointing


def test_a_context_fn_is_entered_in_forward_and_recomputation():
    model = tiny("transformer_lm_tiny")
    entered = []

    class Count(nullcontext):
        def __init__(self, what):
            self.what = what

        def __enter__(self):
            entered.append(self.what)

    model.gradient_checkpointing_enable({"context_fn": lambda: (Count("fwd"), Count("re"))})
    loss_of(model.train(), inputs(model)).backward()
    n = model.config.n_layers
    assert sorted(entered) == ["fwd"] * n + ["re"] * n


def saved_activation_bytes(model: nn.Module) -> int:
    """Bytes of the distinct tensors autograd keeps for backward over one training step's forward,
    parameters left out (a checkpointed block keeps only its inputs)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()  # held until backward: no reuse
        return t

    torch.manual_seed(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_of(model.train(), inputs(model, T=48))
    loss.backward()
    return sum(kept.values())


# one preset of each family (model class)
FAMILIES = sorted({get_preset(n).model_cls.__name__: n for n in PRESETS}.values())


@pytest.mark.parametrize("name", FAMILIES)
def test_checkpointing_keeps_fewer_activations(name):
    model = tiny(name)
    model.gradient_checkpointing_disable()
    plain = saved_activation_bytes(model)
    model.gradient_checkpointing_enable()
    recomputed = saved_activation_bytes(model)
    # measured at this size: 14-20% (Transformers: each block keeps its input), 26% (the LSTM:
    # each decoder step keeps its inputs and outputs)
    assert recomputed < 0.4 * plain, (recomputed, plain)


def routing_model(**overrides) -> nn.Module:
    config = get_preset("routing_transformer_small").config.replace(
        vocab_size=32, max_seq_len=48, d_model=32, n_layers=2, n_heads=4, n_local_heads=2,
        d_ff=64, window=6, n_clusters=4, dropout=0.1, **overrides,
    )  # fmt: skip
    torch.manual_seed(0)
    return zoo.models.RoutingTransformerLM(config)


@pytest.mark.parametrize("routing", ["topw", "causal", "random"])
def test_routing_centroids_move_once_per_step_under_checkpointing(routing):
    """Two optimizer steps, k-means initialisation and revival on: the recomputation in backward
    must neither update the centroids again nor route with the updated ones."""
    runs = []
    for checkpointing in (False, True):
        model = routing_model(routing=routing, centroid_init="kmeans", revive_below=0.9)
        start = {n: b.clone() for n, b in model.named_buffers()}
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        steps = []
        for seed in (0, 1):
            steps.append(one_step(model, checkpointing, seed))
            optimizer.step()
        kmeans = [b.attention.kmeans for b in model.blocks if b.attention.kmeans is not None]
        stats = [b.attention.routing_stats() for b in model.blocks]
        runs.append((steps, [k.revived for k in kmeans], stats))
    (plain, revived, stats), (recomputed, revived_ckpt, stats_ckpt) = runs
    for got, want in zip(recomputed, plain, strict=True):
        assert_same(got, want)
    assert any(not torch.equal(plain[0]["buffers"][n], b) for n, b in start.items())  # it moved
    assert revived_ckpt == revived
    torch.testing.assert_close(stats_ckpt, stats, rtol=0, atol=0)


# --- the Sparse Transformer's checkpoint_attention, retired --------------------------------------
def test_checkpoint_attention_is_no_longer_a_field():
    assert "checkpoint_attention" not in SparseTransformerConfig.field_names()
    with pytest.raises(ConfigError, match="checkpoint_attention"):
        SparseTransformerConfig().replace(checkpoint_attention=True)
    assert not SparseTransformerLM(
        get_preset("sparse_transformer_tiny").config
    ).gradient_checkpointing


@pytest.mark.parametrize("value", [True, False])
def test_a_saved_checkpoint_attention_loads_and_sets_gradient_checkpointing(value):
    saved = get_preset("sparse_transformer_tiny").config.to_dict() | {"checkpoint_attention": value}
    config = SparseTransformerConfig.from_dict(saved)
    assert config == get_preset("sparse_transformer_tiny").config
    assert "checkpoint_attention" not in config.to_dict()  # never saved again
    assert config.retired == {"checkpoint_attention": value}
    assert config.replace(dropout=0.2).retired == config.retired
    assert SparseTransformerLM(config).is_gradient_checkpointing is value


def test_a_wrongly_typed_checkpoint_attention_is_a_config_error():
    saved = get_preset("sparse_transformer_tiny").config.to_dict() | {"checkpoint_attention": "yes"}
    with pytest.raises(ConfigError, match="checkpoint_attention"):
        SparseTransformerConfig.from_dict(saved)


def test_every_shipped_sparse_config_json_still_loads():
    folders = sorted((REPO / "checkpoints").glob("sparse_transformer_*/config.json"))
    assert folders
    for path in folders:
        meta = json.loads(path.read_text())
        assert "checkpoint_attention" in meta["config"]  # saved while it was a field
        config = SparseTransformerConfig.from_dict(meta["config"])
        with torch.device("meta"):
            assert not SparseTransformerLM(config).is_gradient_checkpointing


# --- the recipe flag ------------------------------------------------------------------------------
def test_the_tasks_take_a_gradient_checkpointing_flag():
    from zoo.tasks import CausalLM, Translation

    assert not CausalLM("transformer_lm_tiny").model.is_gradient_checkpointing
    assert CausalLM(
        "transformer_lm_tiny", gradient_checkpointing=True
    ).model.is_gradient_checkpointing
    task = Translation("transformer_tiny", gradient_checkpointing=True, val_bleu=False)
    assert task.model.is_gradient_checkpointing


@pytest.mark.parametrize(
    "recipe", ["recipes/transformer_lm/pg19mini.yaml", "recipes/lstm_attention/multi30k_de_en.yaml"]
)
def test_the_recipe_flag_parses_on_the_command_line(recipe, capsys):
    import yaml

    from zoo.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(REPO / recipe), "--model.gradient_checkpointing", "true",
              "--print_config"])  # fmt: skip
    assert exit_info.value.code in (0, None)
    assert yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["gradient_checkpointing"]
