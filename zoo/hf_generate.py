"""``model.generate`` of every zoo model, with the keywords of Hugging Face transformers'
``GenerationMixin.generate`` where they mean the same: a tokenizer's output
(``model.generate(**tokenizer(texts, return_tensors="pt", padding=True))``), ``max_length``,
``num_return_sequences``, ``repetition_penalty``, ``streamer``, ``generation_config``.

A language model decodes through :func:`zoo.generate` (greedy unless ``do_sample``); an
encoder-decoder through :mod:`zoo.beam_search`. Where the zoo's defaults differ from
transformers' they are the zoo's (no top-k of 50 unless asked; an encoder-decoder's registered
beam). A keyword the zoo does not take is a one-line error naming it, never ignored.

Shape legend: B batch, T prompt positions, N new tokens, n ``num_return_sequences``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import torch
from torch import Tensor, nn

from zoo.errors import ConfigError
from zoo.generation import generate, seeded_generator

__all__ = ["GENERATE_KEYWORDS", "generate_like_transformers"]

GENERATE_KEYWORDS = (
    "max_new_tokens", "max_length", "do_sample", "temperature", "top_k", "top_p", "num_beams",
    "length_penalty", "num_return_sequences", "repetition_penalty", "eos_token_id",
    "pad_token_id", "suppress_tokens",
)  # fmt: skip
"""The settings :func:`generate_like_transformers` takes from an argument or from a
``generation_config``, by transformers' names."""

# a generation_config's fields that change no token here: metadata, the cache (always used),
# the ids a decoder starts from (the model's own)
_NO_EFFECT = {"transformers_version", "_from_model_config", "_commit_hash", "use_cache",
              "bos_token_id", "decoder_start_token_id", "cache_implementation"}  # fmt: skip
_DEFAULTS = {"do_sample": False, "temperature": 1.0, "num_return_sequences": 1,
             "repetition_penalty": 1.0}  # fmt: skip


def _refuse(name: str, value: object, why: str) -> NoReturn:
    raise ConfigError(f"generate: {name}={value!r} {why}")


def _config_settings(generation_config: Any) -> dict[str, Any]:
    """The settings a transformers ``GenerationConfig`` (its non-default fields,
    ``to_diff_dict()``) or a mapping gives.

    Raises:
        ConfigError: it sets a field the zoo does not take (e.g. ``return_dict_in_generate``).
    """
    if isinstance(generation_config, Mapping):
        values = dict(generation_config)
    elif hasattr(generation_config, "to_diff_dict"):
        values = generation_config.to_diff_dict()
    else:
        _refuse("generation_config", type(generation_config).__name__,
                "is not a transformers GenerationConfig or a dict")  # fmt: skip
    other = sorted(k for k, v in values.items()
                   if k not in GENERATE_KEYWORDS and k not in _NO_EFFECT and v is not None)  # fmt: skip
    if other:
        _refuse("generation_config", other, "are settings zoo models' generate does not take: "
                "leave them out, or load the folder with zoo.integrations.transformers")  # fmt: skip
    return {k: v for k, v in values.items() if k in GENERATE_KEYWORDS}


@torch.no_grad()
def generate_like_transformers(
    model: nn.Module,
    input_ids: Tensor,
    max_new_tokens: int | None = None,
    *,
    attention_mask: Tensor | None = None,
    generation_config: Any = None,
    streamer: Any = None,
    seed: int | None = None,
    progress: bool = False,
    **settings: Any,
) -> Tensor:
    """``model.generate`` of every zoo model.

    A language model continues ``input_ids`` ``(B, T)`` int64, left-padded with
    ``attention_mask`` ``(B, T)`` if its prompts differ in length (each row then gets the tokens
    it gets alone), through :func:`zoo.generate`: greedily (``do_sample=False``) or by sampling
    (``temperature``, ``top_k``, ``top_p``; ``seed`` for a reproducible draw),
    ``repetition_penalty`` (CTRL's), ``streamer`` (one row), ``num_return_sequences`` samples
    per prompt; ``max_new_tokens`` defaults to 20 (``max_length`` counts the prompt);
    ``eos_token_id`` ends a row, which is then filled with ``pad_token_id`` (or repeats its EOS).
    It returns ``(B n, T + N)`` int64, the prompt first.

    An encoder-decoder translates the source ids ``input_ids`` ``(B, S)`` (padded with its
    ``pad_id``; ``attention_mask``, if given, must agree) with beam search (``num_beams > 1``;
    ``length_penalty`` is the GNMT alpha of :mod:`zoo.beam_search`; ``num_return_sequences`` up
    to ``num_beams`` best hypotheses) or greedy search (``num_beams=1``); both default to the
    registered decoding of a published checkpoint, else the Transformer paper's (beam 4, alpha
    0.6). ``max_new_tokens`` caps the output (default: source length + 50). It returns
    ``(B n, L)`` int64: BOS, the tokens and EOS, padded with ``pad_token_id`` (default the
    model's ``pad_id``).

    ``generation_config`` (a transformers ``GenerationConfig`` or a dict) gives settings that
    the keywords do not; keywords win.

    Raises:
        ConfigError: an unknown keyword; a setting the model's kind does not take (beams for a
            language model; sampling, a streamer or a repetition penalty for an
            encoder-decoder); ``num_return_sequences > 1`` with greedy search of a language
            model or above ``num_beams``; ``do_sample`` with ``temperature <= 0``; a seed outside
            0 to :data:`~zoo.generation.MAX_SEED`; a value out of range (:func:`zoo.generate`,
            :func:`zoo.beam_search.check_decoding`).
        SequenceTooLongError: a prompt that does not fit (:func:`zoo.generate`).
    """
    unknown = sorted(set(settings) - set(GENERATE_KEYWORDS))
    if unknown:
        _refuse(unknown[0], settings[unknown[0]], "is not a keyword zoo models' generate takes "
                f"(it takes {', '.join(GENERATE_KEYWORDS)}, attention_mask, generation_config, "
                "streamer, seed, progress)")  # fmt: skip
    s = _DEFAULTS | (_config_settings(generation_config) if generation_config is not None else {})
    s |= {k: v for k, v in settings.items() if v is not None}
    if max_new_tokens is not None:
        s["max_new_tokens"] = max_new_tokens
    if input_ids.dtype != torch.long or input_ids.ndim != 2:
        _refuse("input_ids", f"{input_ids.dtype} {tuple(input_ids.shape)}",
                "is not token ids: pass a (batch, length) int64 tensor")  # fmt: skip
    n = s["num_return_sequences"]
    if not isinstance(n, int) or n < 1:
        _refuse("num_return_sequences", n, "must be a whole number >= 1")
    if getattr(model, "is_encoder_decoder", False):
        return _translate_ids(model, input_ids, attention_mask, streamer, s)
    return _continue_ids(model, input_ids, attention_mask, streamer, seed, progress, s)


def _new_tokens(s: dict[str, Any], prompt_len: int, default: int | None) -> int | None:
    """``max_new_tokens``, else ``max_length`` less the ``prompt_len`` it counts, else
    ``default``."""
    if s.get("max_new_tokens") is not None:
        if s["max_new_tokens"] < 1:
            _refuse("max_new_tokens", s["max_new_tokens"], "adds nothing: pass 1 or more")
        return s["max_new_tokens"]
    if s.get("max_length") is not None:
        if s["max_length"] <= prompt_len:
            _refuse("max_length", s["max_length"], f"leaves no room after the {prompt_len} "
                    "prompt tokens it counts: pass a larger one, or max_new_tokens")  # fmt: skip
        return s["max_length"] - prompt_len
    return default


def _continue_ids(model, ids, mask, streamer, seed, progress, s) -> Tensor:
    """The language-model half of :func:`generate_like_transformers`."""
    lm_decodes = ("is for encoder-decoder models: a language model here decodes greedily "
                  "(do_sample=False) or by sampling (do_sample=True)")  # fmt: skip
    if s.get("num_beams") not in (None, 1):
        _refuse("num_beams", s["num_beams"], lm_decodes)
    if s.get("length_penalty") is not None:
        _refuse("length_penalty", s["length_penalty"], lm_decodes)
    sample, n = s["do_sample"], s["num_return_sequences"]
    if sample and not s["temperature"] > 0:
        _refuse("temperature", s["temperature"], "must be > 0 to sample; do_sample=False is greedy")
    if n > 1 and not sample:
        _refuse("num_return_sequences", n, "needs do_sample=True: greedy decoding returns one "
                "sequence per prompt")  # fmt: skip
    device = next(model.parameters()).device
    ids = ids.to(device).repeat_interleave(n, 0)
    mask = None if mask is None else mask.to(device).repeat_interleave(n, 0)
    out = generate(
        model, ids, _new_tokens(s, ids.shape[1], 20),
        temperature=s["temperature"] if sample else 0.0,
        top_k=s.get("top_k") if sample else None, top_p=s.get("top_p") if sample else None,
        generator=None if seed is None else seeded_generator(seed, device),
        suppress_tokens=tuple(s.get("suppress_tokens") or ()), eos_token_id=s.get("eos_token_id"),
        progress=progress, attention_mask=mask, repetition_penalty=s["repetition_penalty"],
        streamer=streamer,
    )  # fmt: skip
    eos, pad = s.get("eos_token_id"), s.get("pad_token_id")
    if eos is not None and pad is not None:  # transformers fills an ended row with padding
        new = out[:, ids.shape[1] :]
        is_eos = torch.isin(new, torch.tensor(_flat(eos), device=device)).long()
        new.masked_fill_(is_eos.cumsum(1) - is_eos > 0, pad)  # after the row's first EOS
    return out


def _translate_ids(model, src, mask, streamer, s) -> Tensor:
    """The encoder-decoder half of :func:`generate_like_transformers`."""
    from zoo.beam_search import beam_search, decoding_settings, greedy_search
    from zoo.data.translation import BOS_ID, EOS_ID

    for name, value, default in (("do_sample", s["do_sample"], False), ("streamer", streamer, None),
                                 ("repetition_penalty", s["repetition_penalty"], 1.0)):  # fmt: skip
        if value != default:
            _refuse(name, value, "is not implemented for encoder-decoder models: decode with "
                    "beam search (num_beams > 1) or greedily (num_beams=1)")  # fmt: skip
    eos = s.get("eos_token_id")
    if eos is not None and _flat(eos) != [EOS_ID]:
        _refuse("eos_token_id", eos, f"differs from the tokenizer's </s> ({EOS_ID})")
    pad_id = model.config.pad_id
    if mask is not None and (
        mask.shape != src.shape or bool((mask.bool() != (src != pad_id)).any())
    ):
        _refuse("attention_mask", tuple(mask.shape), f"disagrees with the padding of input_ids "
                f"(pad id {pad_id}): pass the tokenizer's mask, or none")  # fmt: skip
    beams, n = s.get("num_beams"), s["num_return_sequences"]
    new = _new_tokens(s, 1, None)  # max_length counts BOS
    lengths = {} if new is None else {"max_len_a": 0.0, "max_len_b": new}
    settings = decoding_settings(
        model, decoding=None if beams is None else ("greedy" if beams == 1 else "beam"),
        beam_size=beams, alpha=s.get("length_penalty"), **lengths,
    )  # fmt: skip
    greedy = settings["decoding"] == "greedy"
    if n > (1 if greedy else settings["beam_size"]):
        _refuse("num_return_sequences", n, "must be at most num_beams (1 for greedy search)")
    src = src.to(next(model.parameters()).device)
    kw = dict(bos_id=BOS_ID, eos_id=EOS_ID, max_len_a=settings["max_len_a"],
              max_len_b=settings["max_len_b"])  # fmt: skip
    if greedy:
        outs = greedy_search(model, src, **kw)
    else:
        best = beam_search(
            model, src, beam_size=settings["beam_size"], alpha=settings["alpha"], **kw
        )
        outs = [hyp.tokens for hyps in best for hyp in hyps[:n]]
    pad = s.get("pad_token_id", pad_id)
    width = 1 + max(len(o) for o in outs)
    out = torch.full((len(outs), width), pad, dtype=torch.long)
    for row, tokens in enumerate(outs):
        out[row, : 1 + len(tokens)] = torch.tensor([BOS_ID, *tokens])
    return out


def _flat(ids: int | Sequence[int]) -> list[int]:
    return [ids] if isinstance(ids, int) else list(ids)
