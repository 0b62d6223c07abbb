"""The tokenizers transformers' ``AutoTokenizer`` gives zoo checkpoints
(:mod:`zoo.integrations.transformers`): bytes for the language models, the folder's BPE for the
translation models."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizer, PreTrainedTokenizerFast

from zoo.errors import ConfigError

__all__ = ["NUL", "ZooBPETokenizer", "ZooByteTokenizer"]

NUL = "\x00"
"""Byte 0: the byte tokenizer's end-of-sequence and padding token."""


class ZooByteTokenizer(PreTrainedTokenizer):
    """Text <-> UTF-8 bytes, id = byte value (0-255): the zoo's byte models' "tokenizer". Needs no
    files; decoding replaces invalid UTF-8.

    Byte 0 (NUL, ``"\\x00"``) is both ``eos_token`` and ``pad_token``: none of the zoo's text
    corpora (pg19mini, Gutenberg, enwik8, WikiText-2, Tiny Shakespeare) contains it, so it marks
    nothing but the end or padding, and a model trained on them gives it almost no probability.
    Encoding adds no special token. The models' ``generation_config`` has no ``eos_token_id``, so
    ``generate`` runs to ``max_new_tokens`` as :func:`zoo.generate` does; pass
    ``eos_token_id=0`` to both to stop at a NUL. Padding is on the left (``padding_side``), what
    ``generate`` and the text-generation pipeline want from a decoder.
    """

    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "left"

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("eos_token", NUL)
        kwargs.setdefault("pad_token", NUL)
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return 256

    def get_vocab(self) -> dict[str, int]:
        return {chr(i): i for i in range(256)}

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        return ord(token) if len(token) == 1 and ord(token) < 256 else 0

    def _convert_id_to_token(self, index: int) -> str:
        return chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return bytes(ord(t) for t in tokens if len(t) == 1 and ord(t) < 256).decode(
            "utf-8", errors="replace"
        )

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # nothing to save: the vocabulary is the 256 byte values


class ZooBPETokenizer(PreTrainedTokenizerFast):
    """The translation checkpoints' ``tokenizer.json`` (the Multi30k BPE, ``tokenizers``), with its
    special tokens named: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3. A source sentence is
    its plain ids, as the zoo encodes it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for key, token in (("pad_token", "<pad>"), ("bos_token", "<s>"), ("eos_token", "</s>"),
                           ("unk_token", "<unk>")):  # fmt: skip
            kwargs.setdefault(key, token)
        super().__init__(*args, **kwargs)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *args: Any, **kwargs: Any):
        """The folder's ``tokenizer.json`` (a zoo checkpoint folder: ``checkpoint_folder(name)``).

        Raises:
            ConfigError: the folder has no ``tokenizer.json``.
        """
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"{folder} has no tokenizer.json: pass a zoo translation "
                              "checkpoint's folder (checkpoint_folder(name))")  # fmt: skip
        return cls(tokenizer_file=str(path))
