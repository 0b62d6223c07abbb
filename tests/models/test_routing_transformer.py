"""The Routing Transformer: layer layout, the top-w leak and causal routing, decoding, logging."""

import pytest
import torch

import zoo
from zoo.attention import RoutingSelfAttention
from zoo.attention.routing import causal_routing_stats
from zoo.errors import ConfigError
from zoo.models import RoutingTransformerConfig, RoutingTransformerLM
from zoo.models.routing_transformer import future_dependence

SMALL = dict(
    vocab_size=32, max_seq_len=64, d_model=32, n_layers=3, n_heads=4, d_ff=64, dropout=0.0,
    n_local_heads=2, window=8, n_clusters=4,
)  # fmt: skip


def model_with(**overrides) -> RoutingTransformerLM:
    torch.manual_seed(0)
    return RoutingTransformerLM(RoutingTransformerConfig(**(SMALL | overrides)))


def test_routing_heads_only_in_the_top_layers():
    model = model_with(n_routing_layers=1)
    layers = [b.attention for b in model.blocks]
    assert all(isinstance(a, RoutingSelfAttention) for a in layers)
    assert [a.n_routing for a in layers] == [0, 0, 2]
    assert [a.kmeans is not None for a in layers] == [False, False, True]
    assert "blocks.2.attention.kmeans.centroids" in model.state_dict()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(n_local_heads=5), "n_local_heads"),
        (dict(n_routing_layers=4), "n_routing_layers"),
        (dict(routing="causal", shared_qk=False), "shared_qk"),
        (dict(routing="greedy"), "routing"),
        (dict(n_clusters=0), "n_clusters"),
        (dict(routing_score_scale=-1.0), "routing_score_scale"),
        (dict(routing_score_scale=1.0, max_relative_position=4), "routing_score_scale"),
        (dict(revive_below=1.0), "revive_below"),
        (dict(revive_split="bisect"), "revive_split"),
        (dict(routing_layer_norm=False), "routing_layer_norm"),
        (dict(shift_keys=True), "shift_keys"),
        (dict(shift_keys=True, routing="causal", max_relative_position=4), "shift_keys"),
    ],
)
def test_config_errors_name_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RoutingTransformerConfig(**(SMALL | overrides))


def test_every_layer_option_has_one_name_the_config_and_the_layer_share():
    """Each :class:`RoutingSpec` knob is a config field of the same name (issue 54: one name per
    knob), except ``rotary``, which the config says as ``position``; the layers carry the spec
    the config built, and the centroids carry its k-means options under the same names."""
    from dataclasses import fields

    from zoo.attention import RoutingSpec

    knobs = {f.name for f in fields(RoutingSpec)}
    assert knobs - set(RoutingTransformerConfig.field_names()) == {"rotary"}
    options = dict(ema_decay=0.99, normalize_centroids=False, routing_score_scale=2.0)
    config = RoutingTransformerConfig(**(SMALL | options | dict(position="rotary")))
    model = RoutingTransformerLM(config)
    for i, block in enumerate(model.blocks):
        spec = block.attention.spec
        assert spec == config.routing_spec(i) and spec.rotary
        assert {k: getattr(spec, k) for k in knobs - {"rotary", "causal_window"}} == {
            k: getattr(config, k) for k in knobs - {"rotary", "causal_window"}
        }
        km = block.attention.kmeans
        assert (km.ema_decay, km.normalize_centroids) == (0.99, False)
    with pytest.raises(TypeError, match="decay"):
        RoutingSelfAttention(d_model=32, n_heads=4, n_local_heads=2, window=8, n_clusters=4,
                             decay=0.9)  # the layer's old name for ema_decay  # fmt: skip
    with pytest.raises(TypeError, match="not both"):
        RoutingSelfAttention(config.routing_spec(0), window=4)


def test_every_shipped_routing_config_builds_its_layers_from_the_same_names():
    """The shipped checkpoints' config.json files load and give the layers the spec their keys
    say (their keys are the config's field names: nothing to rename)."""
    import json
    from pathlib import Path

    shipped = sorted(Path(__file__).resolve().parents[2].glob("checkpoints/routing_*/config.json"))
    assert len(shipped) >= 3
    for path in shipped:
        config = RoutingTransformerConfig.from_dict(json.loads(path.read_text())["config"])
        spec = config.routing_spec(config.n_layers - 1)
        assert (spec.ema_decay, spec.routing_score_scale) == (
            config.ema_decay,
            config.routing_score_scale,
        ), path


def test_without_routing_layer_norm_the_heads_attend_with_raw_projections():
    """The ablation changes what routing attention sees (raw q = k), not what the centroids
    learn from (still the LayerNorm'd vectors), and stays strictly causal."""
    from zoo.attention.kmeans import unit_layer_norm

    plain = model_with(routing="causal", n_routing_layers=1)
    raw = model_with(routing="causal", n_routing_layers=1, routing_layer_norm=False)
    raw.load_state_dict(plain.state_dict())
    x = torch.randint(0, 32, (2, 40))
    attn = raw.blocks[-1].attention
    h = torch.randn(2, 40, 32)
    q_raw, q_plain = attn.project(h)[3], plain.blocks[-1].attention.project(h)[3]
    torch.testing.assert_close(unit_layer_norm(q_raw), q_plain)  # the same vectors, not normed
    assert not torch.allclose(q_raw, q_plain)
    assert not torch.allclose(plain(x).logits, raw(x).logits)
    raw.train()(x)  # a training step's centroid update sees unit vectors
    torch.testing.assert_close(attn.kmeans.centroids.norm(dim=-1), torch.ones(2, 4))
    moved = future_dependence(raw.eval(), x, changes=[10, 30])
    assert all(r["max_logprob_change"] == 0.0 for r in moved)


def test_the_revival_rule_reaches_the_centroids():
    model = model_with(n_routing_layers=1, revive_below=0.5, revive_split="two_means")
    km = model.blocks[-1].attention.kmeans
    assert (km.revive_below, km.revive_split) == (0.5, "two_means")
    km = model_with(revive_below=0.25, revive_split="farthest").blocks[-1].attention.kmeans
    assert (km.revive_below, km.revive_split) == (0.25, "farthest")


def test_the_default_revival_bisects_and_saved_configs_keep_the_rule_they_trained_with():
    """A new model revives below half a share by bisection (experiments/long_context/log.md §5s).
    A config.json saved before a key existed loads with what that model was trained with: no
    ``revive_split`` means the farthest-member split, no ``revive_below`` means no revival and
    random centroids (the published routing_transformer_small.pg19mini's config has no
    ``revive_split``). Keys the file names are kept."""
    assert (RoutingTransformerConfig().revive_below, RoutingTransformerConfig().revive_split) == (
        0.5,
        "two_means",
    )
    saved = RoutingTransformerConfig(**SMALL).to_dict()
    del saved["revive_split"]
    assert RoutingTransformerConfig.from_dict(saved).revive_split == "farthest"
    for key in ("revive_below", "centroid_init"):
        del saved[key]
    old = RoutingTransformerConfig.from_dict(saved)
    assert (old.revive_below, old.centroid_init) == (0.0, "random")
    new = RoutingTransformerConfig(**SMALL)
    assert RoutingTransformerConfig.from_dict(new.to_dict()) == new


def test_the_centroid_defaults_come_from_one_place():
    """The kernel, the layer and the model family take the five centroid options' defaults from
    :class:`CentroidOptions`: built with defaults, each holds ``CentroidOptions()``."""
    from zoo.attention import RoutingSpec, SphericalKMeans
    from zoo.attention.kmeans import CENTROID_DEFAULTS, CentroidOptions

    defaults = CentroidOptions()
    assert defaults == CENTROID_DEFAULTS
    assert (defaults.ema_decay, defaults.normalize_centroids, defaults.centroid_init) == (
        0.999, True, "kmeans",
    )  # fmt: skip
    assert (defaults.revive_below, defaults.revive_split) == (0.5, "two_means")
    spec = RoutingSpec(d_model=32, n_heads=4, n_local_heads=2, window=8, n_clusters=4)
    built = [SphericalKMeans(2, 4, 8), spec, RoutingSelfAttention(spec).kmeans,
             RoutingTransformerConfig(), model_with().blocks[-1].attention.kmeans]  # fmt: skip
    for each in built:
        assert CentroidOptions.of(each) == defaults, type(each).__name__
    # saved configs without the keys still load with what they were trained with
    assert RoutingTransformerConfig.saved_defaults == {
        "centroid_init": "random", "revive_below": 0.0, "revive_split": "farthest",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (dict(ema_decay=1.0), r"^ema_decay must be in \[0, 1\), got 1.0$"),
        (dict(ema_decay=-0.1), r"^ema_decay must be in \[0, 1\), got -0.1$"),
        (dict(revive_below=1.5), r"^revive_below must be in \[0, 1\) \(0: never revive\), got 1.5$"),
        (dict(centroid_init="zeros"), r"^centroid_init='zeros' is not one of \('kmeans', 'random'\)$"),
        (dict(revive_split="bisect"), r"^revive_split='bisect' is not one of "),
        (dict(normalize_centroids="yes"), r"^normalize_centroids='yes' must be true or false$"),
    ],
)  # fmt: skip
def test_a_bad_centroid_option_is_one_config_error_line_wherever_it_is_given(bad, message):
    """The options are checked in one place (CentroidOptions), so the kernel, the layer's spec
    and the model config refuse a bad value with the same one-line ConfigError."""
    from zoo.attention import RoutingSpec, SphericalKMeans
    from zoo.attention.kmeans import CentroidOptions

    spec = dict(d_model=32, n_heads=4, n_local_heads=2, window=8, n_clusters=4)
    for build in (
        lambda: CentroidOptions(**bad),
        lambda: SphericalKMeans(2, 4, 8, **bad),
        lambda: RoutingSpec(**spec, **bad),
        lambda: RoutingTransformerConfig(**(SMALL | bad)),
    ):
        with pytest.raises(ConfigError, match=message) as error:
            build()
        assert "\n" not in str(error.value)


def past_logit_shift(model, T=64):
    """Largest change of past log-probabilities when one later token changes, over a few t."""
    idx = torch.randint(0, 32, (2, T), generator=torch.Generator().manual_seed(0))
    rows = future_dependence(model, idx, [T // 4, T // 2, T - 1])
    return max(r["max_logprob_change"] for r in rows)


def test_top_w_selection_leaks_from_the_future_and_causal_routing_does_not():
    """The documented subtlety: balanced top-w selection runs over the whole sequence, so a later
    token can change which earlier tokens share a cluster. Causal routing cannot."""
    with torch.no_grad():
        assert past_logit_shift(model_with().eval()) > 1e-3
        assert past_logit_shift(model_with(routing="causal").eval()) == 0.0
        assert past_logit_shift(model_with(n_local_heads=4).eval()) == 0.0  # local only


def test_cached_decoding_routes_causally():
    """With a cache, every routing mode decodes as causal routing does over the whole sequence."""
    topw = model_with().eval()
    causal = model_with(routing="causal").eval()
    causal.load_state_dict(topw.state_dict())
    idx = torch.randint(0, 32, (2, 40))
    cache = topw.init_cache(2)
    steps = [topw(idx[:, :7], past_key_values=cache).logits] + [
        topw(idx[:, t : t + 1], past_key_values=cache).logits for t in range(7, 40)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), causal(idx).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("option", [dict(routing_score_scale=1.0), dict(shift_keys=True)])
def test_cached_decoding_keeps_the_routing_options(option):
    """A prompt, then one token at a time: the same logits as the whole sequence under the
    option (scores q·k, shifted keys), which differ from the default causal model's."""
    model = model_with(routing="causal", **option).eval()
    idx = torch.randint(0, 32, (2, 40))
    cache = model.init_cache(2)
    steps = [model(idx[:, :7], past_key_values=cache).logits] + [
        model(idx[:, t : t + 1], past_key_values=cache).logits for t in range(7, 40)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), model(idx).logits, rtol=1e-5, atol=1e-5)
    default = model_with(routing="causal").eval()
    default.load_state_dict(model.state_dict())
    assert not torch.allclose(default(idx).logits, model(idx).logits, atol=1e-3)
    assert past_logit_shift(model) == 0.0


def test_a_prompt_fills_the_cache_without_a_full_mask(monkeypatch):
    """A prompt into an empty cache takes the whole-sequence path (O(T window) memory): only the
    single-token steps after it build a (T, S) mask, and they still match the uncached model."""
    import zoo.attention.routing as routing

    model = model_with(routing="causal").eval()
    masks, masked = [], routing.masked_attention

    def spy(q, k, v, allowed, **kwargs):
        masks.append(tuple(allowed.shape[2:]))
        return masked(q, k, v, allowed, **kwargs)

    monkeypatch.setattr(routing, "masked_attention", spy)
    idx = torch.randint(0, 32, (2, 40))
    cache = model.init_cache(2)
    with torch.no_grad():
        steps = [model(idx[:, :36], past_key_values=cache).logits] + [
            model(idx[:, t : t + 1], past_key_values=cache).logits for t in (36, 37)
        ]
        torch.testing.assert_close(
            torch.cat(steps, 1), model(idx[:, :38]).logits, rtol=1e-5, atol=1e-5
        )
    assert set(masks) == {(1, 37), (1, 38)}  # 3 layers x 2 steps, none of them (36, 36)


def test_relative_positions_alone_make_a_working_model():
    model = model_with(position="none", max_relative_position=16, routing="causal").eval()
    assert not hasattr(model, "pos_emb")
    idx = torch.randint(0, 32, (1, 30))
    cache = model.init_cache(1)
    steps = [model(idx[:, :10], past_key_values=cache).logits] + [
        model(idx[:, t : t + 1], past_key_values=cache).logits for t in range(10, 30)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), model(idx).logits, rtol=1e-5, atol=1e-5)


def test_an_untrained_model_generates():
    model = zoo.create_model("routing_transformer_tiny").eval()
    out = zoo.generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=20)
    assert out.shape == (1, 23)


def test_padding_mask_reaches_the_centroids():
    model = model_with()
    idx = torch.randint(0, 32, (2, 16))
    pad = torch.zeros(2, 16, dtype=torch.bool)
    pad[1, 8:] = True
    km = model.blocks[-1].attention.kmeans
    init = km.centroids.clone()
    model(idx, padding_mask=pad)
    with_mask = km.centroids.clone()
    km.centroids.copy_(init)
    model(idx)
    assert not torch.allclose(km.centroids, with_mask)


@pytest.mark.parametrize("routing", ["topw", "causal"])
def test_occupancy_is_logged_in_training(tmp_path, routing):
    from lightning.pytorch import Trainer
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader, TensorDataset

    from zoo.tasks import CausalLM

    task = CausalLM("routing_transformer_tiny", model_config={"routing": routing}, warmup_steps=1)
    tokens = torch.randint(0, 256, (6, 65))
    data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=2)
    trainer = Trainer(
        max_steps=3, logger=CSVLogger(tmp_path), log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(task, train_dataloaders=data)
    logged = trainer.callback_metrics
    assert 0 <= logged["train/routing/occupancy_min"] <= 1 <= logged["train/routing/occupancy_max"]
    assert 0 < logged["train/routing/far_share"] < 1  # windows of 64 > tiny's local window
    assert 0 <= logged["train/routing/empty_share"] < 1
    layers = [logged[f"train/routing/layer{i}/occupancy_min"] for i in range(2)]  # tiny: 2 layers
    assert min(layers) == logged["train/routing/occupancy_min"]
    if routing == "causal":  # how evenly the heads spread over their cluster members
        assert 0 < logged["train/routing/uniformity"] <= 1
    else:
        assert "train/routing/uniformity" not in logged


def test_far_share_counts_attention_beyond_the_local_window():
    import zoo

    torch.manual_seed(0)
    idx = torch.randint(0, 256, (2, 64))
    shares = {}
    for window in (4, 64):
        model = zoo.create_model("routing_transformer_tiny", window=window).train()
        model(idx)
        layer = next(m for m in model.modules() if getattr(m, "far_share", None))
        shares[window] = float(layer.far_share())
    assert shares[64] == 0.0  # every routed key is inside a 64-token window
    assert 0.05 < shares[4] < 1.0  # routed pairs of 64 tokens are mostly more than 4 apart


def test_far_share_under_causal_routing_follows_the_members_attended():
    import zoo

    torch.manual_seed(0)
    idx = torch.randint(0, 256, (2, 64))

    def layer(**config):
        model = zoo.create_model("routing_transformer_tiny", routing="causal", **config).train()
        model(idx)
        return next(m for m in model.modules() if getattr(m, "far_share", None))

    def share(**config) -> float:
        return float(layer(**config).far_share())

    assert share(window=64) == 0.0  # every key is inside a 64-token window
    assert share(window=4, causal_window=1) == 0.0  # each query sees only itself
    # one cluster holding everything: plain causal attention over the last 64 tokens (shared
    # q = k), and a 1-token window leaves out only the query itself
    one = layer(window=1, n_clusters=1, causal_window=64)
    q = one._last_routing[0].float()
    s = (q @ q.transpose(-1, -2)) * q.shape[-1] ** -0.5
    p = torch.softmax(s.masked_fill(torch.ones(64, 64).triu(1).bool(), float("-inf")), -1)
    whole = float(one.far_share())
    assert whole == pytest.approx(1 - p.diagonal(dim1=-2, dim2=-1).mean().item(), abs=1e-5)
    assert 0 < whole < 1
    assert share(window=4, n_clusters=1, causal_window=64) < whole
    # uniformity: exp(entropy) / members, over queries with at least 2 members (t >= 1 here)
    stats = causal_routing_stats(*one._last_routing, 1, 64)
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)  # (B, h, T)
    by_hand = (entropy.exp() / torch.arange(1, 65))[..., 1:].mean((0, 2))
    torch.testing.assert_close(stats["uniformity"], by_hand, rtol=1e-5, atol=1e-6)
    assert (stats["uniformity"] < 1).all()
    q0 = torch.zeros_like(one._last_routing[0])  # equal scores: uniform attention
    torch.testing.assert_close(
        causal_routing_stats(q0, one._last_routing[1], 1, 64)["uniformity"], torch.ones(2)
    )


@pytest.mark.parametrize("routing", ["causal", "topw"])
def test_far_share_is_fp32_under_bf16_autocast(routing):
    # training_logs runs inside bf16-mixed training steps: the shares must not round to bf16
    import zoo

    torch.manual_seed(0)
    model = zoo.create_model("routing_transformer_tiny", routing=routing, window=4).train()
    model(torch.randint(0, 256, (2, 64)))
    layer = next(m for m in model.modules() if getattr(m, "far_share", None))
    plain = layer.far_share()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = layer.far_share()
    assert mixed.dtype == torch.float32
    assert float(mixed) == pytest.approx(float(plain), abs=1e-6)
