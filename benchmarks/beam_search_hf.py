"""Beam search: the zoo's encoder-decoder against transformers' ``generate(num_beams=4)``, side by
side in one process (issue 55, item 5). Needs ``pip install transformers``; run it on a quiet machine.

    python benchmarks/beam_search_hf.py --out docs/bench/beam_search_hf.md

Both models have the shape of ``transformer_small.multi30k`` (3 + 3 post-norm layers, d_model 256,
4 heads, ff 1024, vocab 8,000, ReLU, shared embeddings) and random weights: the zoo's preset and a
``MarianMTModel`` of the same dims. Both decode the same source ids (the first ``--sentences``
Multi30k test2016 sentences through the published BPE) with beam 4 for exactly ``--steps``
decoder steps: the zoo with ``max_len_a=0, max_len_b=steps`` (random weights do not end a
hypothesis before the limit forces EOS), transformers with ``min_new_tokens = max_new_tokens =
steps``. Decoder calls are counted on both sides, so a row whose step counts differ says so.
Rounds alternate the two (zoo first, then transformers, ``--rounds`` times); the table gives each
round's sentences/s and the ratio zoo / transformers, and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
Runner = Callable[[], float]  # runs one side once and returns its seconds


def sources(n: int) -> torch.Tensor:
    """``(n, S)`` int64: the first ``n`` test2016 German sentences, BPE ids, PAD (0) padded."""
    from tokenizers import Tokenizer

    from zoo.data.translation import load_pairs

    tokenizer = Tokenizer.from_file(
        str(REPO / "checkpoints/transformer_small.multi30k/tokenizer.json")
    )
    pairs = load_pairs("multi30k", "test_2016_flickr", "de", "en")[:n]
    ids = [torch.tensor(tokenizer.encode(de).ids) for de, _ in pairs]
    return torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=0)


def marian_like(zoo_model):
    """A MarianMTModel with the zoo model's dims (random weights)."""
    from transformers import MarianConfig, MarianMTModel

    c = zoo_model.config
    config = MarianConfig(
        vocab_size=c.vocab_size, d_model=c.d_model, encoder_layers=c.n_encoder_layers,
        decoder_layers=c.n_decoder_layers, encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads, encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff,
        activation_function="relu", max_position_embeddings=c.max_seq_len, pad_token_id=0,
        eos_token_id=2, decoder_start_token_id=1, bos_token_id=1, dropout=0.0,
        share_encoder_decoder_embeddings=True, scale_embedding=True,
    )  # fmt: skip
    torch.manual_seed(0)
    return MarianMTModel(config).eval()


def counted(module, method: str | None = None) -> list[int]:
    """A counter of ``module``'s forward calls, or of its ``method`` (the decoder steps)."""
    calls = [0]
    if method is None:
        module.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        return calls
    inner = getattr(module, method)

    def wrapped(*args, **kwargs):
        calls[0] += 1
        return inner(*args, **kwargs)

    setattr(module, method, wrapped)
    return calls


def contenders(sentences: int, steps: int) -> tuple[Runner, Runner, list[int], list[int]]:
    """The two sides of the race: ``(run_zoo, run_hf, zoo_steps, hf_steps)``.

    ``run_zoo`` and ``run_hf`` each decode the first ``sentences`` test2016 sentences with beam 4
    for exactly ``steps`` decoder steps and return their seconds; ``zoo_steps[0]`` and
    ``hf_steps[0]`` count the decoder calls made since they were last set to 0.
    """
    import zoo
    from zoo.beam_search import beam_search

    torch.manual_seed(0)
    ours = zoo.create_model("transformer_small", vocab_size=8000).eval()
    theirs = marian_like(ours)
    src = sources(sentences)
    mask = (src != 0).long()
    zoo_steps, hf_steps = counted(ours, "decode"), counted(theirs.model.decoder)

    def run_zoo() -> float:
        start = time.perf_counter()
        beam_search(ours, src, bos_id=1, eos_id=2, beam_size=4, max_len_a=0.0, max_len_b=steps)
        return time.perf_counter() - start

    def run_hf() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            theirs.generate(input_ids=src, attention_mask=mask, num_beams=4, do_sample=False,
                            max_new_tokens=steps, min_new_tokens=steps,
                            early_stopping=True)  # fmt: skip
        return time.perf_counter() - start

    return run_zoo, run_hf, zoo_steps, hf_steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=16)
    p.add_argument("--steps", type=int, default=23)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="markdown table (and .json beside it)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    import transformers

    from zoo.lineage import device_name

    run_zoo, run_hf, zoo_steps, hf_steps = contenders(args.sentences, args.steps)
    run_zoo(), run_hf()  # warm-up
    rows = []
    for r in range(args.rounds):
        zoo_steps[0] = hf_steps[0] = 0
        t_zoo, t_hf = run_zoo(), run_hf()
        rows.append({"round": r + 1, "zoo_s": t_zoo, "hf_s": t_hf, "zoo_steps": zoo_steps[0],
                     "hf_steps": hf_steps[0], "ratio": t_hf / t_zoo})  # fmt: skip
    n = args.sentences
    lines = [
        f"Beam 4, {n} Multi30k test2016 sentences, {args.steps} decoder steps a side, random "
        f"weights of transformer_small.multi30k's shape; {device_name()}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}.",
        "",
        "| round | zoo sentences/s | transformers sentences/s | zoo / transformers | steps (zoo, hf) |",
        "|---|---|---|---|---|",
        *(
            f"| {x['round']} | {n / x['zoo_s']:.1f} | {n / x['hf_s']:.1f} | {x['ratio']:.2f}× | "
            f"{x['zoo_steps']}, {x['hf_steps']} |"
            for x in rows
        ),  # fmt: skip
        "",
        f"Median ratio: **{statistics.median(x['ratio'] for x in rows):.2f}×** (above 1: the zoo "
        "is faster).",
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
