"""Routing attention: the k-means centroids (EMA, padding, DDP) and the layer's cluster selection."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from zoo.attention import RoutingSelfAttention, SphericalKMeans

# the centroid options SphericalKMeans defaulted to before CentroidOptions: random unit vectors
# kept, no revival; tests of the EMA update itself pass them
EMA_ONLY = dict(centroid_init="random", revive_below=0.0, revive_split="farthest")


def kmeans_with(centroids, ema_decay, normalize_centroids=False):
    km = SphericalKMeans(
        1, centroids.shape[0], centroids.shape[1], ema_decay, normalize_centroids, **EMA_ONLY
    )
    km.centroids.copy_(centroids)
    return km


def test_ema_update_by_hand():
    """mu <- decay mu + (1 - decay)/2 (sum of queries + sum of keys), per argmax centroid."""
    km = kmeans_with(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ema_decay=0.9)
    q = torch.tensor([[2.0, 1.0], [1.0, 3.0], [3.0, 0.0]]).view(1, 1, 3, 2)  # -> 0, 1, 0
    k = torch.tensor([[0.0, 2.0], [4.0, 1.0], [1.0, 1.0]]).view(1, 1, 3, 2)  # -> 1, 0, 0 (tie)
    km.update(q, k)
    # centroid 0: 0.9 [1, 0] + 0.05 ([2, 1] + [3, 0]) + 0.05 ([4, 1] + [1, 1])
    # centroid 1: 0.9 [0, 1] + 0.05 [1, 3] + 0.05 [0, 2]
    want = torch.tensor([[0.9 + 0.05 * 5 + 0.05 * 5, 0.05 * 1 + 0.05 * 2], [0.05, 0.9 + 0.25]])
    torch.testing.assert_close(km.centroids[0], want)
    # shared keys (k = None) count every query twice: (1 - decay) * sum of queries
    km = kmeans_with(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ema_decay=0.9)
    km.update(q)
    want = torch.tensor([[0.9 + 0.1 * 5, 0.1 * 1], [0.1 * 1, 0.9 + 0.1 * 3]])
    torch.testing.assert_close(km.centroids[0], want)
    torch.testing.assert_close(km.occupancy, torch.tensor([[4 / 3, 2 / 3]]))
    # renormalised (the default): the same step, then unit rows
    km = kmeans_with(
        torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ema_decay=0.9, normalize_centroids=True
    )
    km.update(q)
    torch.testing.assert_close(km.centroids[0], F.normalize(want, dim=-1))


def test_update_ignores_padded_tokens_exactly():
    torch.manual_seed(0)
    x = torch.randn(2, 2, 6, 4)
    padding = torch.tensor([[False] * 6, [False, False, False, True, True, True]])
    padded = SphericalKMeans(2, 3, 4, **EMA_ONLY)
    init = padded.centroids.clone()
    padded.update(x, padding_mask=padding)
    unpadded = SphericalKMeans(2, 3, 4, **EMA_ONLY)
    unpadded.centroids.copy_(init)
    unpadded.update(torch.cat([x[0], x[1, :, :3]], 1)[None])  # the real tokens only
    torch.testing.assert_close(padded.centroids, unpadded.centroids)
    moved = SphericalKMeans(2, 3, 4, **EMA_ONLY)
    moved.centroids.copy_(init)
    moved.update(x)  # padding included: a different result
    assert not torch.allclose(moved.centroids, padded.centroids)


@pytest.mark.parametrize("seed", range(3))
def test_kmeans_recovers_planted_clusters(seed):
    """Online updates on points around 4 planted directions: every centroid that wins points
    wins them from one planted cluster, and every planted cluster is claimed."""
    torch.manual_seed(seed)
    D, n_planted = 16, 4
    directions = torch.linalg.qr(torch.randn(D, D))[0][:n_planted]  # orthonormal
    km = SphericalKMeans(1, 8, D, ema_decay=0.9, **EMA_ONLY)  # from random unit vectors
    for _ in range(60):
        labels = torch.randint(0, n_planted, (512,))
        x = F.layer_norm(directions[labels] + 0.15 * torch.randn(512, D), (D,))
        km.update(x.view(1, 1, 512, D))
    labels = torch.randint(0, n_planted, (2000,))
    x = F.layer_norm(directions[labels] + 0.15 * torch.randn(2000, D), (D,))
    assigned = km.assign(x.view(1, 1, -1, D)).flatten()
    claimed = set()
    for c in assigned.unique():
        members = labels[assigned == c]
        purity = members.bincount(minlength=n_planted).max() / len(members)
        assert purity > 0.98, f"centroid {c} mixes planted clusters (purity {purity:.2f})"
        claimed.add(int(members.mode().values))
    assert claimed == set(range(n_planted))


def layer(**overrides):
    torch.manual_seed(0)
    kwargs = dict(d_model=32, n_heads=4, n_local_heads=2, window=8, n_clusters=4) | overrides
    return RoutingSelfAttention(**kwargs)


def test_every_cluster_holds_exactly_w_distinct_tokens_in_time_order():
    attn = layer()
    T = 30
    q = F.layer_norm(torch.randn(3, 2, T, 8), (8,))
    q_idx, k_idx = attn.select(q, q)
    w = -(-T // 4)
    assert k_idx is None and q_idx.shape == (3, 2, 4, w)
    assert (q_idx[..., 1:] > q_idx[..., :-1]).all()  # sorted and distinct
    assert q_idx.min() >= 0 and q_idx.max() < T
    # the top w: no position left out scores higher against the centroid than one taken
    scores = attn.kmeans.scores(q)
    taken = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, q_idx, True)
    worst_taken = scores.masked_fill(~taken, float("inf")).amin(-1)
    best_left = scores.masked_fill(taken, float("-inf")).amax(-1)
    assert (worst_taken >= best_left).all()


def test_random_routing_picks_other_tokens():
    attn = layer(routing="random")
    q = F.layer_norm(torch.randn(1, 2, 64, 8), (8,))
    top = layer().select(q, q)[0]
    torch.manual_seed(1)
    a = attn.select(q, q)[0]
    torch.manual_seed(2)
    b = attn.select(q, q)[0]
    assert a.shape == top.shape and not torch.equal(a, b) and not torch.equal(a, top)


def test_centroids_move_in_training_only():
    attn = layer()
    x = torch.randn(2, 16, 32)
    before = attn.kmeans.centroids.clone()
    attn.eval()
    attn(x)
    assert torch.equal(attn.kmeans.centroids, before)
    attn.train()
    attn(x)
    assert not torch.equal(attn.kmeans.centroids, before)


@pytest.mark.parametrize("shift_keys", [False, True])
def test_causal_routing_is_strictly_causal(shift_keys):
    attn = layer(routing="causal", causal_window=3, shift_keys=shift_keys).eval()
    x = torch.randn(1, 24, 32)
    base = attn(x)
    for t in (0, 7, 23):
        changed = x.clone()
        changed[0, t] += 1.0
        torch.testing.assert_close(attn(changed)[:, :t], base[:, :t], rtol=0, atol=0)


def _ddp_worker(rank: int, world: int, store: str, x: torch.Tensor, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    km = SphericalKMeans(2, 3, 4, **EMA_ONLY)
    km.update(x.chunk(world)[rank])
    torch.save(km.centroids, f"{out}.{rank}")
    dist.destroy_process_group()


def test_ddp_all_reduces_centroid_statistics(tmp_path):
    """Two processes with half the batch each end with identical centroids, equal to one process
    updating on the whole batch."""
    torch.manual_seed(5)
    x = torch.randn(4, 2, 10, 4)
    out = str(tmp_path / "centroids")
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "store"), x, out), nprocs=2)
    got = [torch.load(f"{out}.{r}") for r in range(2)]
    torch.manual_seed(0)
    single = SphericalKMeans(2, 3, 4, **EMA_ONLY)
    single.update(x)
    torch.testing.assert_close(got[0], got[1], rtol=0, atol=0)
    torch.testing.assert_close(got[0], single.centroids)
    torch.manual_seed(0)
    alone = SphericalKMeans(2, 3, 4, **EMA_ONLY)
    alone.update(x.chunk(2)[0])  # what rank 0 would keep without the all-reduce
    assert not torch.allclose(alone.centroids, got[0])


@pytest.mark.parametrize("routing", ["topw", "causal", "random"])
def test_relative_positions_reach_every_routing_mode(routing):
    attn = layer(routing=routing, max_relative_position=6)
    attn(torch.randn(2, 20, 32)).sum().backward()
    assert attn.relative.keys.weight.grad.abs().sum() > 0


def test_centroid_math_stays_fp32_under_autocast():
    torch.manual_seed(0)
    x = torch.randn(2, 2, 50, 8) * 3
    plain, mixed = SphericalKMeans(2, 4, 8, **EMA_ONLY), SphericalKMeans(2, 4, 8, **EMA_ONLY)
    mixed.centroids.copy_(plain.centroids)
    plain.update(x)
    with torch.autocast("cpu", torch.bfloat16):
        mixed.update(x)
        scores = mixed.scores(x)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(mixed.centroids, plain.centroids, rtol=1e-6, atol=1e-6)


def test_a_training_step_routes_with_the_centroids_it_started_with():
    """Algorithm 1 routes with the current centroids and updates them afterwards."""
    attn = layer(n_local_heads=0)
    x = torch.randn(1, 32, 32)
    before = attn.kmeans.centroids.clone()
    train_out = attn.train()(x)
    after = attn.kmeans.centroids.clone()
    attn.kmeans.centroids.copy_(before)
    torch.testing.assert_close(train_out, attn.eval()(x))
    assert not torch.equal(after, before)


def planted(n_planted, D, n, seed=0, noise=0.15):
    g = torch.Generator().manual_seed(seed)
    directions = torch.linalg.qr(torch.randn(D, D, generator=g))[0][:n_planted]
    labels = torch.randint(0, n_planted, (n,), generator=g)
    x = F.layer_norm(directions[labels] + noise * torch.randn(n, D, generator=g), (D,))
    return x.view(1, 1, n, D), labels


def test_kmeans_init_fits_the_first_batch_then_never_again():
    """A fresh module fits its centroids to the first training batch: every planted cluster gets
    a centroid right away (random unit vectors in 16-d leave most of them with no members)."""
    both, both_labels = planted(8, 16, 4096)
    x, labels, later = both[:, :, :2048], both_labels[:2048], both[:, :, 2048:]
    km = SphericalKMeans(1, 8, 16, ema_decay=0.999, centroid_init="kmeans", revive_below=0.0)
    km.update(x)
    assigned = km.assign(x).flatten()
    assert km.occupancy.min() > 0.5  # 8 planted clusters of ~1/8 each, one centroid each
    for c in assigned.unique():
        assert labels[assigned == c].unique().numel() == 1  # pure
    fitted = km.centroids.clone()
    km.update(later)  # later updates are EMA steps, not refits
    assert torch.allclose(km.centroids, fitted, atol=0.05)
    random = SphericalKMeans(1, 8, 16, ema_decay=0.999, **EMA_ONLY)
    torch.manual_seed(0)
    random.update(x)
    assert random.occupancy.min() < 0.5


def test_loaded_centroids_are_not_refitted():
    trained = SphericalKMeans(1, 4, 8, **EMA_ONLY)
    fresh = SphericalKMeans(1, 4, 8, centroid_init="kmeans", revive_below=0.0)
    assert fresh.needs_init
    fresh.load_state_dict(trained.state_dict())
    assert not fresh.needs_init
    fresh.update(torch.randn(1, 1, 64, 8))
    assert fresh.revived == 0


@pytest.mark.parametrize("split", ["farthest", "two_means"])
def test_kmeans_init_and_revival_stay_fp32_under_autocast(split):
    """bf16-mixed training calls ``update`` under autocast: the k-means init and the revival
    splits must still compute in fp32 and move the centroids exactly as without it (they ran
    their matrix products in bf16 before, and moved different centroids)."""
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(2, 2, 1024, 16, generator=g)  # the init spreads 16 centroids over it
    blobs = 3 * torch.randn(1, 2, 4, 16, generator=g)  # later batches: 4 blobs per head
    later = [
        blobs.repeat_interleave(256, 2) + torch.randn(2, 2, 1024, 16, generator=g) for _ in range(2)
    ]

    def fresh():
        torch.manual_seed(1)
        return SphericalKMeans(
            2, 16, 16, centroid_init="kmeans", revive_below=0.5, revive_split=split
        )

    plain, mixed = fresh(), fresh()
    for xs in [spread, *later]:
        plain.update(xs)
        with torch.autocast("cpu", torch.bfloat16):
            mixed.update(xs)
    assert plain.revived > 0, "the test needs revival splits"
    assert mixed.revived == plain.revived
    torch.testing.assert_close(mixed.centroids, plain.centroids, rtol=0, atol=1e-6)


def test_dead_centroids_are_revived_by_splitting_the_largest_cluster():
    """Two centroids own the data and two are orthogonal to it: with revive_below each takes half
    of the largest cluster, and after a few updates every cluster holds > 1/4 of its share."""
    D = 8
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(1, 1, 1024, D)
    x[..., :4] = torch.rand(1, 1, 1024, 4, generator=g)  # first 4 dims, positive
    x = F.normalize(x, dim=-1)
    live = torch.eye(D)[:2]
    dead = torch.eye(D)[6:]  # orthogonal to every token: nobody's nearest centroid
    km = kmeans_with(torch.cat([live, dead]), ema_decay=0.9, normalize_centroids=True)
    km.revive_below = 0.25
    km.update(x)
    assert km.revived == 2
    for _ in range(3):
        km.update(x)
    assert km.occupancy.min() > 0.25
    stuck = kmeans_with(torch.cat([live, dead]), ema_decay=0.9, normalize_centroids=True)
    for _ in range(3):
        stuck.update(x)
    assert stuck.occupancy[0, 2:].max() == 0  # without revival they stay dead


def bisect_by_definition(m, a, b, iters):
    """Bisecting k-means spelled out: the members' principal axis (by power iteration in fp64,
    from ``a - b``) splits them by sign, then Lloyd steps of spherical 2-means."""
    centred = (m - m.mean(0)).double()
    axis = (a - b).double()
    for _ in range(5000):  # converges where the top two eigenvalues differ by 1%
        axis = F.normalize(centred.T @ (centred @ axis), dim=-1)
    side = centred @ axis > 0
    if side.any() and not side.all():
        a, b = F.normalize(m[side].sum(0), dim=-1), F.normalize(m[~side].sum(0), dim=-1)
    for _ in range(iters):
        side = m @ a > m @ b
        if side.all() or not side.any():
            break
        a, b = F.normalize(m[side].sum(0), dim=-1), F.normalize(m[~side].sum(0), dim=-1)
    return a, b


def revive_by_definition(km, x):
    """The revival rule spelled out: after every split, recompute the largest cluster's members
    over all tokens (the spec :meth:`SphericalKMeans._revive` keeps as member lists). Under
    ``"two_means"`` the two centroids then take Lloyd steps of spherical 2-means over those
    members, and each keeps the share of them it holds."""
    v = F.normalize(x.float(), dim=-1).transpose(0, 1).reshape(x.shape[1], -1, x.shape[-1])
    mu, occupancy = km.centroids.clone(), km.occupancy.clone()
    scores = torch.einsum("hkd,hnd->hnk", mu, v)
    assign, splits = scores.argmax(-1), []
    for h, c in (occupancy < km.revive_below).nonzero().tolist():
        big = int(occupancy[h].argmax())
        members = assign[h] == big
        if big == c or not members.any():
            continue
        far = torch.where(members, scores[h, :, big], torch.inf).argmin()
        step = 0.5 * (v[h, far] - mu[h, big])
        a, b = F.normalize(mu[h, big] + step, dim=-1), F.normalize(mu[h, big] - step, dim=-1)
        m = v[h, members]  # the members in token order
        if km.revive_split == "two_means":
            a, b = bisect_by_definition(m, a, b, km.split_iters)
        mu[h, c], mu[h, big] = a, b
        moved = members.clone()
        moved[members] = m @ a > m @ b
        if km.revive_split == "two_means":
            share = moved.sum() / members.sum()
            occupancy[h, c], occupancy[h, big] = (
                occupancy[h, big] * share,
                occupancy[h, big] * (1 - share),
            )
        else:
            occupancy[h, c] = occupancy[h, big] = occupancy[h, big] / 2
        assign[h, moved] = c
        splits.append((h, big))
    return mu, splits


@pytest.mark.parametrize("split", ["farthest", "two_means"])
@pytest.mark.parametrize("seed", range(4))
def test_revival_follows_the_rule_through_repeated_splits(seed, split):
    """Many small centroids per head, so clusters made by one split are split again: the member
    lists kept between splits give the centroids of the rule recomputed over all tokens."""
    torch.manual_seed(seed)  # the other centroids' random init
    g = torch.Generator().manual_seed(seed)
    H, k, D = 3, 12, 8
    centers = 3 * torch.randn(1, H, 1, D, generator=g)
    x = torch.randn(2, H, 512, D, generator=g) + centers
    km = SphericalKMeans(H, k, D, revive_below=0.5, revive_split=split)
    km.centroids[:, -1] = F.normalize(centers[0, :, 0], dim=-1)  # the last centroid owns most
    km.occupancy = torch.rand(H, k, generator=g) * 0.6
    km.occupancy[:, -1] = 8.0  # halved by each split, it stays the largest for a while; ties
    # with the centroid just revived go to the lower index, which splits a new cluster again
    want, splits = revive_by_definition(km, x)
    km._revive(x, None)
    assert km.revived == len(splits)
    assert len(splits) > len(set(splits)), "some cluster should be split twice"
    assert torch.allclose(km.centroids, want, atol=1e-6)


def test_revive_and_init_are_checked():
    with pytest.raises(ValueError, match="revive_below must be in"):
        SphericalKMeans(1, 4, 8, revive_below=1.5)
    with pytest.raises(ValueError, match=r"revive_split='bisect' is not one of \('farthest', "):
        SphericalKMeans(1, 4, 8, revive_split="bisect")


def test_a_two_means_split_divides_two_groups_that_the_farthest_member_does_not():
    """The largest cluster holds two equal groups of tokens and one token far from both. The
    farthest-member rule moves the revived centroid towards that one token, and nobody else comes
    with it; 2-means from there gives each centroid one group and records the shares."""
    D = 8
    g = torch.Generator().manual_seed(0)
    groups = torch.zeros(1, 1, 1001, D)
    groups[0, 0, :500, :2] = torch.tensor([1.0, 0.5])
    groups[0, 0, 500:1000, :2] = torch.tensor([1.0, -0.5])
    groups[..., :1000, 2:4] += 0.05 * torch.randn(1, 1, 1000, 2, generator=g)
    groups[0, 0, 1000] = torch.tensor([0.3, 0.0, 0.0, 0.0, 1.0, 0, 0, 0])  # the far token
    x = F.normalize(groups, dim=-1)
    centroids = torch.stack([torch.eye(D)[0], -torch.eye(D)[0]])  # the second: nobody's nearest
    for split, revived_share in (("farthest", 1 / 1001), ("two_means", 0.5)):
        km = SphericalKMeans(
            1, 2, D, ema_decay=0.9, centroid_init="random", revive_below=0.25, revive_split=split
        )
        km.centroids.copy_(centroids)
        km.update(x)
        assert km.revived == 1
        share = (km.assign(x)[0, 0] == 1).float().mean()
        assert share == pytest.approx(revived_share, abs=0.01), split


def test_a_two_means_split_survives_an_eigensolver_failure(monkeypatch):
    """LAPACK's eigh can fail to converge on the covariance of near-identical members (it stopped
    a training run whose layer-0 routing queries depend on the byte alone). The split then starts
    its Lloyd steps from the two centroids, and still separates two groups."""
    from zoo.attention import kmeans

    def fail(*args, **kwargs):
        raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")

    monkeypatch.setattr(kmeans.torch.linalg, "eigh", fail)
    x = F.normalize(torch.tensor([[1.0, 0.3, 0.0]] * 5 + [[1.0, -0.3, 0.0]] * 3), dim=-1)
    a, b = F.normalize(torch.tensor([1.0, 0.1, 0.0]), dim=0), torch.tensor([1.0, -0.1, 0.0])
    a, b = kmeans.two_means(x, a, F.normalize(b, dim=0), iters=3)
    torch.testing.assert_close(a, x[0])
    torch.testing.assert_close(b, x[-1])


def test_init_and_revival_skip_padding_with_separate_keys():
    """Padding never seeds or revives a centroid: far-away padded vectors leave the fit alone."""
    torch.manual_seed(0)
    real = F.layer_norm(torch.randn(1, 1, 64, 8), (8,))
    junk = 100 * torch.ones(1, 1, 64, 8)  # would become a centroid if it counted
    x = torch.cat([real, junk], 2)
    padding = torch.cat([torch.zeros(1, 64), torch.ones(1, 64)], 1).bool()
    km = SphericalKMeans(1, 4, 8, centroid_init="kmeans", revive_below=0.5, revive_split="farthest")
    km.update(x, x.clone(), padding_mask=padding)
    junk_dir = F.normalize(junk[0, 0, 0], dim=-1)
    assert (km.centroids[0] @ junk_dir).max() < 0.99


@pytest.mark.parametrize("routing", ["causal", "topw"])
def test_score_scale_multiplies_the_routed_scores(routing):
    """routing_score_scale=1.0 is Algorithm 1 line 22 as written: A = Q'K'^T on LayerNorm'd vectors. One
    cluster holding every token and no local heads make the routing heads plain causal attention,
    so the layer must equal softmax(scale q·q) v computed by hand."""
    kwargs = dict(n_local_heads=0, n_clusters=1, routing=routing, causal_window=64)
    for scale in (None, 1.0, 0.3):
        attn = layer(routing_score_scale=scale, **kwargs).eval()
        x = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(1))
        _, _, _, q, _, v = attn.project(x)  # (B, 4, T, 8), q LayerNorm'd
        s = (q @ q.transpose(-1, -2)) * (8**-0.5 if scale is None else scale)
        p = torch.softmax(s.masked_fill(torch.ones(24, 24).triu(1).bool(), float("-inf")), -1)
        expected = attn.out_proj((p @ v).transpose(1, 2).reshape(2, 24, 32))
        torch.testing.assert_close(attn(x), expected, rtol=1e-5, atol=1e-5)


def test_score_scale_leaves_clusters_and_centroid_updates_alone():
    x = torch.randn(2, 32, 32, generator=torch.Generator().manual_seed(2))
    plain = layer(routing="causal", **EMA_ONLY)  # EMA steps only: a loaded sharp is never refit
    sharp = layer(routing="causal", routing_score_scale=4.0, **EMA_ONLY)
    sharp.load_state_dict(plain.state_dict())
    assert not torch.allclose(plain.eval()(x), sharp.eval()(x))  # the scale does act
    plain.train()(x)
    sharp.train()(x)
    torch.testing.assert_close(sharp.kmeans.centroids, plain.kmeans.centroids, rtol=0, atol=1e-6)


def test_score_scale_is_checked():
    with pytest.raises(ValueError, match="routing_score_scale"):
        layer(routing_score_scale=0.0)
    with pytest.raises(ValueError, match="routing_score_scale"):
        layer(routing_score_scale=1.0, max_relative_position=4)


@pytest.mark.parametrize("exclude_self", [False, True])
def test_causal_routing_stats_match_dense_attention_over_the_last_members(exclude_self):
    """Blocks of causal_window sorted positions, a ragged last block, several clusters: the
    same far share and uniformity as attention written out over original positions (with
    ``exclude_self``, shifted keys' members strictly before the query)."""
    from zoo.attention.routing import causal_routing_stats

    B, h, T, D, C, window = 2, 2, 53, 8, 6, 5  # 53 = 8 blocks of 6 + a ragged 5
    g = torch.Generator().manual_seed(3)
    q = F.layer_norm(torch.randn(B, h, T, D, generator=g), (D,)) * 1.7
    clusters = torch.randint(0, 3, (B, h, T), generator=g)
    t = torch.arange(T)
    same = clusters[..., :, None] == clusters[..., None, :]  # (B, h, T, T)
    causal = t[:, None] > t[None, :] if exclude_self else t[:, None] >= t[None, :]
    # members of the query's cluster in [key, query]: the key is among the last C members
    later = (same & causal).flip(-1).cumsum(-1).flip(-1)
    allowed = same & causal & (later <= C)
    s = (q @ q.transpose(-1, -2)) * D**-0.5
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    far = (p * ((t[:, None] - t[None, :]) >= window)).sum(-1).mean(-1).mean(0)
    members = allowed.sum(-1)
    ratio = (-(p * p.clamp_min(1e-30).log()).sum(-1)).exp() / members.clamp_min(1)
    uniformity = torch.stack(
        [torch.stack([ratio[b, i][members[b, i] >= 2].mean() for i in range(h)]) for b in range(B)]
    ).mean(0)
    stats = causal_routing_stats(q, clusters, window, C, exclude_self=exclude_self)
    torch.testing.assert_close(stats["far_share"], far, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats["uniformity"], uniformity, rtol=1e-5, atol=1e-6)


def test_shifted_keys_attend_to_the_members_before_and_read_the_next_value():
    """``shift_keys``: query t sees the last C members of its cluster strictly before it, j < t,
    and reads v_{j+1}: attention written out over original positions, empty rows zero."""
    attn = layer(routing="causal", causal_window=3, shift_keys=True).eval()
    x = torch.randn(2, 29, 32)
    _, _, _, q, _, v = attn.project(x)
    clusters = attn.kmeans.assign(q)
    got, _ = attn._route(q, q, v)
    t = torch.arange(29)
    same = (clusters[..., :, None] == clusters[..., None, :]) & (t[:, None] > t[None, :])
    later = same.flip(-1).cumsum(-1).flip(-1)  # members in [j, t): j among the last C
    allowed = same & (later <= 3)
    s = (q @ q.transpose(-1, -2)) * q.shape[-1] ** -0.5
    p = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    want = p @ F.pad(v[:, :, 1:], (0, 0, 0, 1))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (~allowed.any(-1)).any()  # some queries had no earlier member: zeros, not NaN


def test_shifted_keys_make_one_layer_copy_what_followed_the_earlier_occurrence():
    """A sequence written twice: with shifted keys a query in the second copy finds its first
    occurrence at j and reads the value of j + 1, the next token; unshifted, it reads its own."""
    torch.manual_seed(0)
    kwargs = dict(d_model=16, n_heads=1, n_local_heads=0, window=4, n_clusters=1,
                  routing="causal", causal_window=32, routing_score_scale=20.0)  # fmt: skip
    shifted = RoutingSelfAttention(**kwargs, shift_keys=True).eval()
    plain = RoutingSelfAttention(**kwargs).eval()
    plain.load_state_dict(shifted.state_dict())
    x = torch.randn(1, 10, 16).repeat(1, 2, 1)  # x_{t+10} = x_t
    for attn, offset in ((shifted, -9), (plain, 0)):
        _, _, _, q, _, v = attn.project(x)
        y, _ = attn._route(*attn.scaled(q, q), v)  # scores 20 q·k: one key takes the mass
        t = torch.arange(10, 19)
        torch.testing.assert_close(y[0, 0, t], v[0, 0, t + offset], rtol=0, atol=1e-3)


def test_shifted_keys_need_causal_routing_without_relative_positions():
    for bad in (dict(routing="topw"), dict(routing="causal", max_relative_position=4)):
        with pytest.raises(ValueError, match="shift_keys"):
            layer(shift_keys=True, **bad)
