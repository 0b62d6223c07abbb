"""Attention score functions ``s_j = σ(h_j, q)`` (the lecture on neural attention; SPEC §5).

- :class:`AdditiveScore`: ``v^T tanh(W1 h_j + W2 q)`` (Bahdanau et al. 2015, "concat" in Luong);
- :class:`DotScore`: ``h_j^T q`` (Luong et al. 2015);
- :class:`BilinearScore`: ``h_j^T W q`` (Luong et al. 2015, "general");
- :class:`ScaledDotScore`: ``h_j^T W q / sqrt(d)`` (Vaswani et al. 2017's scaling, with Luong's
  bilinear form: the Transformer's ``q k^T / sqrt(d_k)`` after its projections).

Every score module maps keys ``h`` ``(B, S, d_key)`` and queries ``q`` ``(B, T, d_query)`` to
scores ``(B, T, S)`` in the dtype of the inputs. ``prepare(h)`` does the key-side work once per
source (a decoder scoring one query per step calls ``score(prepare(h), q)``); ``forward(h, q)`` is
both. Masking (``-inf``) and the mapping to probabilities happen after scoring
(:mod:`zoo.attention.mappings`).

:data:`SCORES` maps the config names (``"additive"``, ``"dot"``, ``"bilinear"``,
``"scaled_dot"``) to the classes; :func:`build_score` builds one.
"""

from __future__ import annotations

import math
from typing import Literal

from torch import Tensor, nn

from zoo.errors import ConfigError

__all__ = [
    "SCORES",
    "AdditiveScore",
    "BilinearScore",
    "DotScore",
    "ScaledDotScore",
    "ScoreName",
    "build_score",
]

ScoreName = Literal["additive", "dot", "bilinear", "scaled_dot"]


class _Score(nn.Module):
    def prepare(self, keys: Tensor) -> Tensor:
        """Key-side work, once per source: ``(B, S, d_key)`` -> what :meth:`score` takes."""
        return keys

    def score(self, prepared: Tensor, queries: Tensor) -> Tensor:
        """``(B, T, d_query)`` queries against prepared keys -> ``(B, T, S)``."""
        raise NotImplementedError

    def forward(self, keys: Tensor, queries: Tensor) -> Tensor:
        return self.score(self.prepare(keys), queries)


class AdditiveScore(_Score):
    """Bahdanau et al. 2015 (eq. 6 and appendix A.1.2): ``v^T tanh(W1 h_j + W2 q)``.

    Args:
        d_key: the width of ``h``.
        d_query: the width of ``q``.
        d_attention: the hidden width of the scoring MLP (Bahdanau: n' = 1000).
    """

    def __init__(self, d_key: int, d_query: int, d_attention: int) -> None:
        super().__init__()
        self.key_proj = nn.Linear(d_key, d_attention, bias=False)  # W1 (U_a in Bahdanau)
        self.query_proj = nn.Linear(d_query, d_attention, bias=True)  # W2 (W_a), with the bias
        self.v = nn.Linear(d_attention, 1, bias=False)  # v_a

    def prepare(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # (B, S, A)

    def score(self, prepared: Tensor, queries: Tensor) -> Tensor:
        hidden = (prepared[:, None] + self.query_proj(queries)[:, :, None]).tanh()  # (B, T, S, A)
        return self.v(hidden).squeeze(-1)


class DotScore(_Score):
    """Luong et al. 2015 (eq. 8, "dot"): ``h_j^T q``; ``d_key`` must equal ``d_query``."""

    def __init__(self, d_key: int, d_query: int, d_attention: int | None = None) -> None:
        super().__init__()
        if d_key != d_query:
            raise ConfigError(
                f"dot scores need keys and queries of one width, got {d_key} and {d_query}: "
                "use score 'bilinear' or 'additive'"
            )

    def score(self, prepared: Tensor, queries: Tensor) -> Tensor:
        return queries @ prepared.transpose(1, 2)


class BilinearScore(_Score):
    """Luong et al. 2015 (eq. 8, "general"): ``h_j^T W q``."""

    def __init__(self, d_key: int, d_query: int, d_attention: int | None = None) -> None:
        super().__init__()
        self.weight = nn.Linear(d_key, d_query, bias=False)  # h^T W as a map of the keys

    def prepare(self, keys: Tensor) -> Tensor:
        return self.weight(keys)  # (B, S, d_query): W^T h_j

    def score(self, prepared: Tensor, queries: Tensor) -> Tensor:
        return queries @ prepared.transpose(1, 2)


class ScaledDotScore(BilinearScore):
    """``h_j^T W q / sqrt(d_query)``: the bilinear score with Vaswani et al. 2017's scaling (§3.2.1),
    which keeps the scores' variance near 1 as the width grows."""

    def score(self, prepared: Tensor, queries: Tensor) -> Tensor:
        return super().score(prepared, queries) / math.sqrt(queries.shape[-1])


SCORES: dict[str, type[_Score]] = {
    "additive": AdditiveScore,
    "dot": DotScore,
    "bilinear": BilinearScore,
    "scaled_dot": ScaledDotScore,
}


def build_score(name: str, d_key: int, d_query: int, d_attention: int) -> _Score:
    """The score module ``name`` (a key of :data:`SCORES`). Raises ConfigError for other names."""
    if name not in SCORES:
        raise ConfigError(f"unknown score {name!r}: choose one of {', '.join(SCORES)}")
    return SCORES[name](d_key, d_query, d_attention)
