"""experiments/routing_transformer/cluster_balance.py: cluster occupancy of a frozen routing model,
pooled over batches and per batch."""

import pytest
import torch
from fakes import recipe_module

import zoo
from zoo.errors import ZooError

cluster_balance = recipe_module("experiments/routing_transformer/cluster_balance.py")


def test_pooled_and_per_batch_occupancy_of_planted_centroids():
    """Head 0 of the last layer has k equal centroids, so every token goes to cluster 0 (argmax
    takes the first of ties): occupancy k there and 0 elsewhere. Every head's occupancies sum to
    k, and the model is left as it was (eval mode, centroids unchanged, no hooks)."""
    torch.manual_seed(0)
    model = zoo.create_model("routing_transformer_tiny", routing="causal").train()
    layers = cluster_balance.routing_layers(model)
    km = layers[-1][1].kmeans
    k = km.centroids.shape[1]
    km.centroids[0] = km.centroids[0, :1].clone()  # all of head 0's centroids equal
    before = [m.kmeans.centroids.clone() for _, m in layers]
    batches = [torch.randint(0, 256, (2, 24)) for _ in range(3)]
    balance = cluster_balance.measure(model, batches)

    heads = len(balance.heads)
    assert heads == sum(m.n_routing for _, m in layers) and balance.tokens == 3 * 2 * 24
    planted = balance.heads.index((layers[-1][0], 0))
    assert balance.pooled[planted].tolist() == [float(k)] + [0.0] * (k - 1)
    assert torch.allclose(balance.pooled.sum(-1), torch.full((heads,), float(k)))
    assert balance.batch_min == [0.0, 0.0, 0.0]
    assert all(torch.equal(b, m.kmeans.centroids) for b, (_, m) in zip(before, layers, strict=True))
    assert not model.training and not any(m._forward_hooks for _, m in layers)
    report = cluster_balance.table(balance, "tiny")
    assert f"| {layers[-1][0]} | 0 | 0.000 | {k:.2f} | {k - 1} |" in report
    assert "median 0.000" in report


def test_a_model_without_routing_heads_is_a_one_line_error(capsys):
    local = zoo.create_model("routing_transformer_tiny", n_local_heads=4)
    with pytest.raises(ZooError, match="no routing heads"):
        cluster_balance.measure(local, [torch.zeros(1, 8, dtype=torch.long)])
    with pytest.raises(SystemExit, match="^error: .*no_such_model"):
        cluster_balance.main(["--model", "no_such_model"])


def test_replay_updates_copies_of_the_centroids_with_each_rule():
    """Head 0's centroids all equal, so all but one are dead: without revival, head 0 keeps empty
    clusters until the EMA has moved its live centroid off the others; revival splits them off
    at the first update. The model's own centroids do not move."""
    torch.manual_seed(0)
    model = zoo.create_model("routing_transformer_tiny", routing="causal")
    km = cluster_balance.routing_layers(model)[-1][1].kmeans
    km.centroids[0] = km.centroids[0, :1].clone()
    before = km.centroids.clone()
    batches = [torch.randint(0, 256, (4, 32)) for _ in range(4)]
    stay, revive = cluster_balance.replay(model, batches, ["0:farthest", "0.25:two_means"])
    assert torch.equal(km.centroids, before)
    assert (stay.rule, stay.revived, stay.batch_min[:3]) == ("0:farthest", 0, [0.0] * 3)
    assert revive.revived > 0 and revive.batch_min[0] == 0.0  # logged before the revival
    assert min(revive.batch_min[1:]) > 0.25
    report = cluster_balance.replay_table([stay, revive], skip=0.5)  # the last 2 batches
    assert f"| 0:farthest | {stay.batch_min[3] / 2:.3f} | 0.000 | 1.00 | 0.000 | 0 |" in report


def test_replay_by_layer_keeps_each_heads_minimum():
    """``head_min`` holds each head's own per-batch minimum: its smallest over the heads is the
    logged ``batch_min``, and the layer table takes the smallest over that layer's heads only, so
    the layer with the dead head reads 0 while the other layer does not."""
    torch.manual_seed(0)
    model = zoo.create_model("routing_transformer_tiny", routing="causal")
    layers = cluster_balance.routing_layers(model)
    assert len(layers) > 1, "the test needs two routing layers"
    layers[-1][1].kmeans.centroids[0] = layers[-1][1].kmeans.centroids[0, :1].clone()
    batches = [torch.randint(0, 256, (4, 32)) for _ in range(4)]
    (stay,) = cluster_balance.replay(model, batches, ["0:farthest"])
    heads = [(i, h) for i, m in layers for h in range(m.n_routing)]
    assert stay.head_min.shape == (4, len(heads))
    assert stay.batch_min == stay.head_min.amin(-1).tolist()
    report = cluster_balance.replay_layer_table([stay], heads, skip=0.0)
    first = [i for i, (layer, _) in enumerate(heads) if layer == layers[0][0]]
    first_min = sorted(stay.head_min[:, first].amin(-1).tolist())
    assert first_min[0] > 0, "the first layer has no dead centroid"
    assert f"| 0:farthest | {layers[0][0]} | {(first_min[1] + first_min[2]) / 2:.3f} " in report
    assert f"| 0:farthest | {layers[-1][0]} | 0.000 | 0.000 | 1.00 | 0.000 |" in report


@pytest.mark.parametrize("rule", ["0.5", "1.5:farthest", "x:two_means", "0.5:bisect"])
def test_a_bad_revival_rule_is_a_one_line_error(rule):
    with pytest.raises(SystemExit, match=f"^error: bad revival rule '{rule}': write BELOW:SPLIT"):
        cluster_balance.main(["--model", "no_such_model", "--replay", rule])


@pytest.mark.parametrize("bf16", [False, True])
def test_replay_can_call_the_update_as_bf16_mixed_training_does(monkeypatch, bf16):
    """``--bf16``: bf16 queries, and the update under CPU bf16 autocast, as Lightning's
    ``bf16-mixed`` training calls it; without it, fp32 queries and no autocast."""
    seen = []
    update = cluster_balance.SphericalKMeans.update

    def spy(self, q, *args, **kwargs):
        seen.append((q.dtype, torch.is_autocast_enabled("cpu")))
        return update(self, q, *args, **kwargs)

    monkeypatch.setattr(cluster_balance.SphericalKMeans, "update", spy)
    torch.manual_seed(0)
    model = zoo.create_model("routing_transformer_tiny", routing="causal")
    batches = [torch.randint(0, 256, (2, 16)) for _ in range(2)]
    (result,) = cluster_balance.replay(model, batches, ["0.25:farthest"], bf16=bf16)
    want = (torch.bfloat16, True) if bf16 else (torch.float32, False)
    assert seen == [want, want] and len(result.batch_min) == 2


def test_bf16_without_a_replay_is_a_one_line_error():
    with pytest.raises(SystemExit, match="^error: --bf16 changes only the replay: add --replay"):
        cluster_balance.main(["--model", "no_such_model", "--bf16"])
