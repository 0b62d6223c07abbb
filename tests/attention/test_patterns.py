"""The pattern catalogue against the set definitions of SPEC §2 (Child et al. 2019, §4.3)."""

import itertools

import pytest
import torch

from zoo.attention.patterns import (
    PATTERNS,
    causal,
    fixed,
    get_pattern,
    local,
    local_2d,
    strided,
)
from zoo.drawing import draw_pattern
from zoo.errors import ConfigError


def brute(n, member):
    """Element mask from a predicate on Python ints: the SPEC sets, written out literally."""
    return torch.tensor([[member(i, j) for j in range(n)] for i in range(n)], dtype=torch.bool)


def spec_strided(l, component):
    a1 = lambda i, j: max(0, i - l) <= j <= i  # noqa: E731
    a2 = lambda i, j: j <= i and (i - j) % l == 0  # noqa: E731
    return {1: a1, 2: a2, None: lambda i, j: a1(i, j) or a2(i, j)}[component]


def spec_fixed(l, c, component, head=None):
    sub = 0 if head is None else head % (l // c)
    summary = set(range(l - c * (sub + 1), l - c * sub))
    a1 = lambda i, j: j <= i and j // l == i // l  # noqa: E731
    a2 = lambda i, j: j <= i and j % l in summary  # noqa: E731
    return {1: a1, 2: a2, None: lambda i, j: a1(i, j) or a2(i, j)}[component]


# n not a multiple of the stride or of the block size, and smaller than one stride
SIZES = [(37, 8), (64, 8), (50, 16), (12, 16), (33, 5)]


@pytest.mark.parametrize(("n", "l"), SIZES)
@pytest.mark.parametrize("component", [1, 2, None])
def test_strided_mask_is_the_spec_set(n, l, component):
    assert torch.equal(strided(l, component).mask(n), brute(n, spec_strided(l, component)))


@pytest.mark.parametrize(("n", "l"), SIZES)
@pytest.mark.parametrize("c", [1, 2, 4])
@pytest.mark.parametrize("component", [1, 2, None])
def test_fixed_mask_is_the_spec_set(n, l, c, component):
    if c > l:
        pytest.skip("c > stride is rejected (tested below)")
    assert torch.equal(fixed(l, c, component).mask(n), brute(n, spec_fixed(l, c, component)))


@pytest.mark.parametrize(("n", "l", "c"), [(40, 8, 2), (37, 16, 4), (64, 8, 4)])
@pytest.mark.parametrize("component", [2, None])
def test_fixed_distinct_summaries_give_each_head_its_own_sub_block(n, l, c, component):
    heads = 5  # more heads than sub-blocks (l/c): they wrap around
    masks = fixed(l, c, component, distinct_summaries=True).mask(n, n_heads=heads)
    assert masks.shape == (heads, n, n)
    for h in range(heads):
        assert torch.equal(masks[h], brute(n, spec_fixed(l, c, component, head=h)))
    assert torch.equal(masks[0], fixed(l, c, component).mask(n))  # head 0 = the shared pattern
    assert not torch.equal(masks[0], masks[1])


@pytest.mark.parametrize("n", [1, 9, 30])
def test_causal_and_local(n):
    assert torch.equal(causal().mask(n), brute(n, lambda i, j: j <= i))
    for w in (1, 3, 40):
        assert torch.equal(local(w).mask(n), brute(n, lambda i, j, w=w: i - w < j <= i))
        strict = local(w, exclude_self=True).mask(n)
        assert torch.equal(strict, brute(n, lambda i, j, w=w: i - w <= j < i))


PATTERN_CASES = [
    ("causal", {}),
    ("local", {"window": 5}),
    ("strided", {"stride": 8}),
    ("strided", {"stride": 6, "component": 2}),
    ("fixed", {"stride": 8, "c": 2}),
    ("fixed", {"stride": 8, "c": 2, "distinct_summaries": True}),
    ("local_1d", {"query_block": 6, "memory": 4}),
    (
        "local_2d",
        {"width": 9, "query_height": 2, "query_width": 3, "memory_height": 1, "memory_width": 2},
    ),  # fmt: skip
]


@pytest.mark.parametrize(("name", "params"), PATTERN_CASES)
@pytest.mark.parametrize(("n", "block"), [(40, 4), (37, 8), (50, 16), (7, 4)])
def test_layout_marks_exactly_the_blocks_with_an_element(name, params, n, block):
    pattern = get_pattern(name, **params)
    heads = 3 if pattern.per_head else None
    mask, layout = pattern.mask(n, heads), pattern.layout(n, block, heads)
    nb = -(-n // block)
    assert layout.shape[-2:] == (nb, nb)
    for I, J in itertools.product(range(nb), repeat=2):
        tile = mask[..., I * block : (I + 1) * block, J * block : (J + 1) * block]
        assert torch.equal(layout[..., I, J], tile.any(-1).any(-1)), (I, J)


def test_every_pattern_is_causal():
    for name, params in PATTERN_CASES:
        pattern = get_pattern(name, **params)
        mask = pattern.mask(45, 4 if pattern.per_head else None)
        assert not mask.triu(1).any(), name
        assert mask.diagonal(dim1=-2, dim2=-1).all(), f"{name}: a position must see itself"


def reaches(*layers):
    """Boolean connectivity after the given attention layers (first layer first); the residual
    stream carries each position forward, so every layer also connects i to itself."""
    n = layers[0].shape[-1]
    eye = torch.eye(n, dtype=torch.bool)
    r = eye.clone()
    for m in layers:
        r = ((m | eye).float() @ r.float()) > 0
    return r


@pytest.mark.parametrize(("n", "l"), [(64, 8), (61, 8), (100, 10), (48, 6)])
def test_factorized_patterns_connect_every_pair_within_two_steps(n, l):
    """The paper's validity criterion (§4.2): every position reaches every earlier one within p=2
    steps of attention, in each integration (merged, either interleaving order, multi-head)."""
    target = causal().mask(n)
    cases = {
        "strided": (strided(l, 1).mask(n), strided(l, 2).mask(n)),
        "fixed": (fixed(l, 1, 1).mask(n), fixed(l, 1, 2).mask(n)),
        "fixed c=2": (fixed(l, 2, 1).mask(n), fixed(l, 2, 2).mask(n)),
    }
    for name, (a1, a2) in cases.items():
        merged = a1 | a2  # also multi-head: a layer's heads together see A1 u A2
        assert torch.equal(reaches(merged, merged), target), name
        assert torch.equal(reaches(a1, a2), target), f"{name}: A1 then A2"
        # the order matters for fixed: summaries must gather their block (A1) before other blocks
        # read them (A2); so interleaving starts with A1 (layer r uses A^(r mod 2 + 1))
        assert torch.equal(reaches(a2, a1), target) == name.startswith("strided"), name
        assert not torch.equal(reaches(a1), target), f"{name}: one step must not suffice"
        assert not torch.equal(reaches(a1, a1), target), f"{name}: A1 alone is not valid"


def test_distinct_summaries_are_valid_together_not_alone():
    n, l, c, heads = 64, 8, 2, 4
    per_head = fixed(l, c, distinct_summaries=True).mask(n, heads)  # merged, per head
    layer = per_head.any(0)
    assert torch.equal(reaches(layer, layer), causal().mask(n))
    # a head whose summary sub-block is not the last cells cannot pass on later cells of a block
    assert not torch.equal(reaches(per_head[1], per_head[1]), causal().mask(n))


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("strides", {"stride": 4}, "Did you mean 'strided'"),
        ("strided", {"stride": 0}, "stride must be positive"),
        ("fixed", {"stride": 8, "c": 9}, "1 <= c <= stride"),
        ("fixed", {"stride": 8, "c": 3, "distinct_summaries": True}, "dividing stride"),
        ("fixed", {"stride": 8}, "missing 1 required positional argument: 'c'"),
        ("strided", {"stride": 8, "component": 3}, "component must be 1, 2 or None"),
        ("local", {"window": 4, "stride": 2}, "unexpected keyword argument 'stride'"),
    ],
)
def test_bad_pattern_requests_raise_config_errors(name, params, match):
    with pytest.raises(ConfigError, match=match):
        get_pattern(name, **params)


def test_per_head_pattern_needs_the_head_count():
    with pytest.raises(ValueError, match="pass n_heads"):
        fixed(8, 2, distinct_summaries=True).mask(16)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_draws_to_png(name, tmp_path):
    params = {
        "causal": {},
        "local": {"window": 6},
        "strided": {"stride": 8},
        "local_1d": {"query_block": 8, "memory": 8},
        "local_2d": {"width": 12, "query_height": 2, "query_width": 3, "memory_height": 1,
                     "memory_width": 3},
    }.get(name, {"stride": 8, "c": 2})  # fmt: skip
    path = draw_pattern(name, tmp_path / f"{name}.png", n=48, block_size=4, **params)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 5000


def spec_local_1d(lq, lm):
    """Image Transformer 1-D local: i's query block starts at b = floor(i/lq) lq; the memory is
    the lm positions before b, and the block up to i."""
    return lambda i, j: (i // lq) * lq - lm <= j <= i


def spec_local_2d(width, hq, wq, hm, wm):
    """Image Transformer 2-D local on a grid `width` wide: the query block of (r, c) spans rows
    R..R+hq-1, columns C..C+wq-1; the memory adds hm rows above and wm columns on each side;
    only earlier positions (raster order) are visible."""

    def member(i, j):
        (r, c), (rj, cj) = divmod(i, width), divmod(j, width)
        R, C = r - r % hq, c - c % wq
        return j <= i and R - hm <= rj <= R + hq - 1 and C - wm <= cj <= C + wq - 1 + wm

    return member


@pytest.mark.parametrize(("n", "lq", "lm"), [(40, 8, 8), (37, 6, 4), (20, 5, 0), (30, 4, 12)])
def test_local_1d_is_the_image_transformers_set(n, lq, lm):
    assert torch.equal(get_pattern("local_1d", query_block=lq, memory=lm).mask(n),
                       brute(n, spec_local_1d(lq, lm)))  # fmt: skip


@pytest.mark.parametrize(
    ("n", "width", "hq", "wq", "hm", "wm"),
    [(96, 12, 2, 3, 1, 3), (81, 9, 3, 3, 2, 0), (60, 12, 4, 6, 0, 6), (50, 7, 2, 2, 3, 1)],
)
def test_local_2d_is_the_image_transformers_set(n, width, hq, wq, hm, wm):
    pattern = get_pattern("local_2d", width=width, query_height=hq, query_width=wq,
                          memory_height=hm, memory_width=wm)  # fmt: skip
    assert torch.equal(pattern.mask(n), brute(n, spec_local_2d(width, hq, wq, hm, wm)))


def test_local_2d_by_hand_on_a_6_wide_grid():
    # query blocks 2x2, memory one row above and one column each side; query at row 3, col 3
    pattern = local_2d(6, 2, 2, 1, 1)
    row = pattern.mask(36)[3 * 6 + 3]
    seen = {divmod(int(j), 6) for j in row.nonzero()}
    # block rows 2-3, cols 2-3; memory rows 1-3, cols 1-4; later than (3, 3) is hidden
    expected = {(r, c) for r in (1, 2) for c in (1, 2, 3, 4)} | {(3, 1), (3, 2), (3, 3)}
    assert seen == expected
