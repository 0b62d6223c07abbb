"""Decoding an encoder-decoder model: greedy search and beam search with a length penalty, batched,
with the decoder's key/value cache; :func:`translate` for text in, text out.

As in the Transformer paper (§6.1): beam size 4, length penalty ``alpha = 0.6`` in the GNMT form
``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al. 2016), maximum output length = source length + 50,
and early stopping: a sentence is finished once ``beam_size`` hypotheses have ended with EOS (fairseq's
rule). A hypothesis' score is the sum of its token log-probabilities (natural log, EOS included)
divided by ``lp(|Y|)``, ``|Y|`` counting EOS. At the last allowed step only EOS may be chosen, so every
hypothesis ends with EOS. PAD and BOS are never generated. :func:`translate` and `zoo translate`
default to a published checkpoint's registered decoding instead, when the model is one
(:func:`decoding_settings`).

Works with any model that has ``encode(src) -> (memory, src_mask)``, ``init_cache(memory, src_mask)``
returning a cache with ``reorder(index, *, same_source)``, and
``decode(tokens, cache=cache) -> logits`` (:class:`zoo.models.TransformerSeq2Seq`,
:class:`zoo.models.LSTMSeq2Seq`); :func:`translate` also needs its ``tokenizer``.

Shape legend: B batch, K beam size, S source positions, V vocabulary.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Literal

import torch
from rich.console import Console
from rich.progress import Progress
from tokenizers import Tokenizer
from torch import Tensor, nn

from zoo.errors import ConfigError, SequenceTooLongError
from zoo.memory import check_decoding_memory

__all__ = [
    "PAPER_DECODING",
    "Hypothesis",
    "beam_search",
    "check_decoding",
    "decoding_settings",
    "default_decoding",
    "greedy_search",
    "length_penalty",
    "translate",
    "translate_ids",
    "translate_with_attention",
]


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's ``((5 + length) / 6) ** alpha``; ``alpha = 0`` turns it off."""
    return ((5 + length) / 6) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    """A finished output: ``tokens`` (without BOS, with the final EOS), the summed log-probability
    in nats, and ``score`` = log-probability / length penalty."""

    tokens: tuple[int, ...]
    log_prob: float
    score: float


def _max_lengths(src: Tensor, pad_id: int, max_len_a: float, max_len_b: int, limit: int) -> Tensor:
    """Per sentence: ``a * (source tokens) + b`` output tokens, at most ``limit``; ``(B,)`` int64.
    Clamped before the cast to integers, so a huge ``a`` or ``b`` means ``limit``, not overflow."""
    src_len = (src != pad_id).sum(-1).double()
    return (max_len_a * src_len + min(max_len_b, limit)).clamp(1, limit).long()


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[list[Hypothesis]]:
    """Beam search for every source sentence of ``src`` ``(B, S)`` int64 (PAD-padded).

    Returns, per sentence, its ``beam_size`` finished hypotheses, best first. The output length is
    at most ``max_len_a * source_length + max_len_b`` tokens (EOS included), and at most what the
    model's positions allow.

    Raises:
        ConfigError: a setting out of range (:func:`check_decoding`), or ``B * beam_size``
            hypotheses whose caches would not fit in memory (:func:`zoo.memory.check_decoding_memory`).
    """
    check_decoding(beam_size=beam_size, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b)
    c = model.config
    B, K, device = src.shape[0], beam_size, src.device
    fix = "use a smaller beam_size (--beam-size) or batch_size (--batch-size)"
    check_decoding_memory(model, B * K, 1, source_len=src.shape[1], fix=fix)
    limits = _max_lengths(src, c.pad_id, max_len_a, max_len_b, c.max_seq_len)  # (B,)
    memory, src_mask = model.encode(src)
    rows = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,) -> its sentence
    cache = model.init_cache(memory[rows], src_mask[rows])
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start as the same empty hypothesis: expand only one
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    is_done = [False] * B
    for step in range(1, int(limits.max()) + 1):
        logits = model.decode(tokens[:, -1:], cache=cache)[:, -1].float()  # (B*K, V)
        logp = logits.log_softmax(-1)
        logp[:, [c.pad_id, bos_id]] = float("-inf")
        last = (limits == step).repeat_interleave(K)  # sentences at their length limit: EOS only
        logp[last] = torch.where(
            torch.arange(logp.shape[-1], device=device) == eos_id, logp[last], float("-inf")
        )
        V = logp.shape[-1]
        cand = (scores.view(B * K, 1) + logp).view(B, K * V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=-1)  # (B, 2K)
        # the candidates as Python lists, read once: the loop below is per sentence and candidate
        cand_scores, cand_beams, cand_tokens = (top_scores.tolist(), (top_idx // V).tolist(),
                                                (top_idx % V).tolist())  # fmt: skip
        new_beam, new_token = [[0] * K for _ in range(B)], [[0] * K for _ in range(B)]
        new_scores = [[float("-inf")] * K for _ in range(B)]
        for b in range(B):
            if is_done[b]:
                continue
            kept = 0
            for score, k, t in zip(cand_scores[b], cand_beams[b], cand_tokens[b], strict=True):
                if score == float("-inf"):
                    break
                if t == eos_id:
                    if len(finished[b]) < K:
                        prefix = tokens[b * K + k, 1:].tolist()
                        finished[b].append(
                            Hypothesis(
                                tuple(prefix + [eos_id]),
                                score,
                                score / length_penalty(step, alpha),
                            )
                        )
                    continue
                if kept < K:
                    new_beam[b][kept], new_token[b][kept], new_scores[b][kept] = k, t, score
                    kept += 1
            if len(finished[b]) >= K or kept == 0:
                is_done[b] = True
        if all(is_done):
            break
        done = torch.tensor(is_done, device=device)
        first = torch.arange(B, device=device)[:, None] * K  # each sentence's first row
        index = (first + torch.tensor(new_beam, device=device)).view(-1)
        cache.reorder(index, same_source=True)  # hypotheses move only among a sentence's beams
        tokens = torch.cat([tokens[index], torch.tensor(new_token, device=device).view(-1, 1)], 1)
        scores = torch.tensor(new_scores, device=device).masked_fill(done[:, None], float("-inf"))
    return [sorted(f, key=lambda h: h.score, reverse=True)[:K] for f in finished]


@torch.no_grad()
def greedy_search(
    model: nn.Module,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[tuple[int, ...]]:
    """The most probable next token at every step, batched: per sentence, its tokens (without BOS,
    ending with EOS), at most ``max_len_a * source_length + max_len_b`` of them.

    Raises:
        ConfigError: a setting out of range (:func:`check_decoding`), or a batch whose caches would
            not fit in memory (:func:`zoo.memory.check_decoding_memory`).
    """
    check_decoding(max_len_a=max_len_a, max_len_b=max_len_b)
    c = model.config
    B, device = src.shape[0], src.device
    fix = "translate fewer sentences at once (--batch-size)"
    check_decoding_memory(model, B, 1, source_len=src.shape[1], fix=fix)
    limits = _max_lengths(src, c.pad_id, max_len_a, max_len_b, c.max_seq_len)
    memory, src_mask = model.encode(src)
    cache = model.init_cache(memory, src_mask)
    last = torch.full((B, 1), bos_id, dtype=torch.long, device=device)
    out: list[list[int]] = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for step in range(1, int(limits.max()) + 1):
        logits = model.decode(last, cache=cache)[:, -1].float()
        logits[:, [c.pad_id, bos_id]] = float("-inf")
        next_token = logits.argmax(-1)
        next_token = torch.where(limits == step, torch.full_like(next_token, eos_id), next_token)
        for b in range(B):
            if not done[b]:
                out[b].append(int(next_token[b]))
        done |= next_token == eos_id
        if bool(done.all()):
            break
        last = next_token[:, None]
    return [tuple(o) for o in out]


def translate_ids(
    model: nn.Module,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    decoding: Literal["beam", "greedy"] = "beam",
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
) -> list[list[int]]:
    """The best output's token ids for each sentence of ``src`` ``(B, S)``, without EOS."""
    kw = dict(bos_id=bos_id, eos_id=eos_id, max_len_a=max_len_a, max_len_b=max_len_b)
    if decoding == "greedy":
        outs = greedy_search(model, src, **kw)
    elif decoding == "beam":
        outs = [
            b[0].tokens for b in beam_search(model, src, beam_size=beam_size, alpha=alpha, **kw)
        ]
    else:
        raise ValueError(f"decoding must be 'beam' or 'greedy', got {decoding!r}")
    return [[t for t in out if t != eos_id] for out in outs]


def _tokenizer_of(model: nn.Module, tokenizer: Tokenizer | None) -> tuple[Tokenizer, int, int]:
    """``tokenizer`` (default: the model's) with its BOS and EOS ids; ValueError without one."""
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(
            "no tokenizer: load the model with zoo.from_pretrained (which restores tokenizer.json) "
            "or pass tokenizer="
        )
    from zoo.data.translation import SPECIAL_TOKENS

    bos_id, eos_id = (tokenizer.token_to_id(t) for t in SPECIAL_TOKENS[1:3])
    if bos_id is None or eos_id is None:
        raise ValueError(f"the tokenizer has no {SPECIAL_TOKENS[1]} / {SPECIAL_TOKENS[2]} tokens")
    return tokenizer, bos_id, eos_id


def check_decoding(
    *,
    decoding: str | None = None,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    batch_size: int | None = None,
) -> None:
    """Check the settings of :func:`translate` (and `zoo translate`'s flags); ``None`` is not
    checked.

    Raises:
        ConfigError: (a ``ValueError``) naming the first bad value, its flag and what would work:
            a value of the wrong type (a sized setting that is not a whole number), a decoding
            other than beam or greedy, ``beam_size < 1``, ``batch_size < 1``, an
            ``alpha`` or ``max_len_a`` below 0 or not finite, ``max_len_b < 0``, or both max
            lengths 0 (no room for a single output token).
    """

    def bad(name: str, value: object, fix: str) -> None:
        raise ConfigError(f"{name} (--{name.replace('_', '-')}) is {value!r}: {fix}")

    length = "an output has at most max_len_a * source length + max_len_b tokens"
    for name, value in (("beam_size", beam_size), ("batch_size", batch_size),
                        ("max_len_b", max_len_b)):  # fmt: skip
        if value is not None and (isinstance(value, bool) or not isinstance(value, Integral)):
            bad(name, value, "use a whole number")
    for name, value in (("alpha", alpha), ("max_len_a", max_len_a)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, Real)):
            bad(name, value, "use a number")
    if decoding is not None and decoding not in ("beam", "greedy"):
        bad("decoding", decoding, "use 'beam' or 'greedy'")
    if beam_size is not None and beam_size < 1:
        bad("beam_size", beam_size, "a beam keeps at least 1 hypothesis; use 1 or more (paper: 4)")
    if batch_size is not None and batch_size < 1:
        bad("batch_size", batch_size, "a batch holds at least 1 sentence; use 1 or more (64)")
    if alpha is not None and not (math.isfinite(alpha) and alpha >= 0):
        bad("alpha", alpha, "use a finite value >= 0 (0: no length penalty; paper: 0.6)")
    if max_len_a is not None and not (math.isfinite(max_len_a) and max_len_a >= 0):
        bad("max_len_a", max_len_a, f"{length}; use a finite value >= 0 (default 1.0)")
    if max_len_b is not None and max_len_b < 0:
        bad("max_len_b", max_len_b, f"{length}; use 0 or more (default 50)")
    if max_len_a == 0 and max_len_b == 0:
        raise ConfigError(
            "max_len_a (--max-len-a) and max_len_b (--max-len-b) are both 0, which leaves no room "
            "for a single output token: raise either (defaults 1.0 and 50)"
        )


PAPER_DECODING = {"search": "beam", "beam_size": 4, "alpha": 0.6, "max_len_a": 1.0, "max_len_b": 50}
"""Vaswani et al. 2017, section 6.1: beam 4, length penalty alpha 0.6, at most source + 50 tokens."""


def default_decoding(source: str | os.PathLike) -> dict[str, Any]:
    """How to decode ``source`` by default: the decoding of its registered test BLEU when it is a
    published checkpoint (so `zoo translate NAME` reproduces its card), else the paper's."""
    from zoo.hub import load_registry  # lazily: huggingface_hub

    entry = load_registry().entries.get(str(source))
    registered = entry.whole_split("test") if entry is not None else None
    decoding = dict(PAPER_DECODING)
    if registered is not None and registered.decoding:
        decoding |= {k: v for k, v in registered.decoding.items() if k in PAPER_DECODING}
    return decoding


def decoding_settings(
    model: nn.Module | None = None,
    *,
    decoding: Literal["beam", "greedy"] | None = None,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
) -> dict[str, Any]:
    """How :func:`translate` and `zoo translate` decode with ``model``: each value given, else the
    registered decoding of the published checkpoint ``model`` was loaded as
    (``model.published_name``, which :func:`zoo.from_pretrained` records; see
    :func:`default_decoding`), else the paper's (beam 4, ``alpha = 0.6``, at most
    ``1.0 * source length + 50`` tokens).

    Returns ``{"decoding", "beam_size", "alpha", "max_len_a", "max_len_b"}``, checked.

    Raises:
        ConfigError: a value out of range (:func:`check_decoding`).
    """
    name = getattr(model, "published_name", None)
    registered = default_decoding(name or "")  # "" is no checkpoint: the paper's decoding
    given = {"search": decoding, "beam_size": beam_size, "alpha": alpha,
             "max_len_a": max_len_a, "max_len_b": max_len_b}  # fmt: skip
    settings = registered | {k: v for k, v in given.items() if v is not None}
    settings["decoding"] = settings.pop("search")
    check_decoding(**settings)
    return settings


@torch.no_grad()
def translate(
    model: nn.Module,
    sentences: Sequence[str],
    *,
    tokenizer: Tokenizer | None = None,
    decoding: Literal["beam", "greedy"] | None = None,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> list[str]:
    """Translate ``sentences`` (plain text, one sentence each) with an encoder-decoder model.

    Sentences are encoded with ``tokenizer`` (default: ``model.tokenizer``, which
    :func:`zoo.from_pretrained` restores from ``tokenizer.json``), sorted by length into batches of
    ``batch_size``, decoded on the model's device in eval mode, and returned detokenized in the
    input order. An empty or whitespace-only sentence translates to ``""`` without running the
    model (a model asked to translate nothing invents a sentence). Decoding settings left ``None``
    resolve as in `zoo translate` (:func:`decoding_settings`): a published checkpoint's registered
    decoding, else the paper's (beam 4, ``alpha = 0.6``, at most source length + 50 tokens).
    ``progress`` draws a bar on stderr.

    Raises:
        ConfigError: (a ``ValueError``) a setting out of range, such as ``beam_size < 1`` or
            ``batch_size < 1`` (:func:`check_decoding`), or a batch of ``batch_size * beam_size``
            hypotheses that would not fit in memory (:func:`zoo.memory.check_decoding_memory`).
        SequenceTooLongError: (a ``ValueError``) a sentence longer than the model's
            ``max_seq_len`` tokens (the message gives its index; nothing is translated).
        ValueError: no tokenizer.
    """
    settings = decoding_settings(model, decoding=decoding, beam_size=beam_size, alpha=alpha,
                                 max_len_a=max_len_a, max_len_b=max_len_b)  # fmt: skip
    check_decoding(batch_size=batch_size)
    tokenizer, bos_id, eos_id = _tokenizer_of(model, tokenizer)
    sentences = list(sentences)
    todo = [i for i, s in enumerate(sentences) if s.strip()]  # blank lines never reach the model
    encodings = tokenizer.encode_batch([sentences[i] for i in todo])
    encoded = {i: e.ids for i, e in zip(todo, encodings, strict=True)}
    limit = model.config.max_seq_len
    too_long = [(i, len(ids)) for i, ids in encoded.items() if len(ids) > limit]
    if too_long:
        i, n = too_long[0]
        raise SequenceTooLongError(
            f"sentence {i} has {n} tokens but the model takes at most max_seq_len={limit} "
            f"({len(too_long)} sentence(s) too long): split it into shorter sentences"
        )
    order = sorted((i for i, ids in encoded.items() if ids), key=lambda i: -len(encoded[i]))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if batches:  # the largest batch, checked before the progress bar draws (its beam_search too)
        beams = settings["beam_size"] if settings["decoding"] == "beam" else 1
        fix = "use a smaller beam_size (--beam-size) or batch_size (--batch-size)"
        check_decoding_memory(model, len(batches[0]) * beams, 1,
                              source_len=len(encoded[batches[0][0]]), fix=fix)  # fmt: skip
    device = next(model.parameters()).device
    pad_id = model.config.pad_id
    out = [""] * len(sentences)
    was_training = model.training
    model.eval()
    try:
        with Progress(console=Console(stderr=True), transient=True, disable=not progress) as bar:
            task = bar.add_task("translating", total=len(order))
            for batch in batches:
                src = torch.nn.utils.rnn.pad_sequence(
                    [torch.tensor(encoded[i]) for i in batch],
                    batch_first=True,
                    padding_value=pad_id,
                ).to(device)
                ids = translate_ids(model, src, bos_id=bos_id, eos_id=eos_id, **settings)
                for i, hyp in zip(batch, tokenizer.decode_batch(ids), strict=True):
                    out[i] = hyp
                bar.advance(task, len(batch))
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def translate_with_attention(
    model: nn.Module,
    sentence: str,
    *,
    tokenizer: Tokenizer | None = None,
    decoding: Literal["beam", "greedy"] | None = None,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
) -> tuple[str, Tensor, list[str], list[str]]:
    """Translate one sentence and return ``(translation, weights (T, S) float32, source tokens,
    output tokens)``: the model's attention over the source while it produced each output token
    (EOS included), from its ``attention_weights(src, tgt)`` (the LSTM's mapping; the
    Transformer's last decoder layer, averaged over heads). A constrained mapping's sink is the
    last column, labelled ``<sink>``. Decoding settings left ``None`` resolve as in
    :func:`translate`.

    Raises:
        ConfigError: (a ``ValueError``) a decoding setting out of range (:func:`check_decoding`).
        SequenceTooLongError: (a ``ValueError``) a sentence longer than ``max_seq_len`` tokens.
        ValueError: no tokenizer, an empty or whitespace-only sentence, or a model that cannot
            report its attention.
    """
    if not hasattr(model, "attention_weights"):
        raise ValueError(f"{type(model).__name__} does not report its attention weights")
    settings = decoding_settings(model, decoding=decoding, beam_size=beam_size, alpha=alpha,
                                 max_len_a=max_len_a, max_len_b=max_len_b)  # fmt: skip
    tokenizer, bos_id, eos_id = _tokenizer_of(model, tokenizer)
    ids = tokenizer.encode(sentence).ids if sentence.strip() else []
    if not ids:
        raise ValueError("the sentence to draw is empty (or only whitespace)")
    if len(ids) > model.config.max_seq_len:
        raise SequenceTooLongError(
            f"the sentence has {len(ids)} tokens but the model takes at most "
            f"max_seq_len={model.config.max_seq_len}: split it into shorter sentences"
        )
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        src = torch.tensor([ids], device=device)
        (out,) = translate_ids(model, src, bos_id=bos_id, eos_id=eos_id, **settings)
        tgt_in = torch.tensor([[bos_id, *out]], device=device)
        weights = model.attention_weights(src, tgt_in)[0].cpu()
    finally:
        model.train(was_training)
    source = [tokenizer.id_to_token(i) for i in ids]
    if weights.shape[1] == len(ids) + 1:
        source.append("<sink>")
    output = [tokenizer.id_to_token(i) for i in [*out, eos_id]]
    return tokenizer.decode(out), weights, source, output
