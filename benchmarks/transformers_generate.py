"""transformers' ``generate`` on a zoo checkpoint against :func:`zoo.generate`, side by side in one
process (issue 78, item 2): greedy decoding of the published ``transformer_lm_small.pg19mini``
loaded with ``AutoModelForCausalLM`` (:mod:`zoo.integrations.transformers`, ``use_cache=True``:
the zoo's own cache in a transformers ``Cache``) and by the zoo. Run it on a quiet machine.

    python benchmarks/transformers_generate.py --out docs/bench/transformers_generate.md
    python benchmarks/transformers_generate.py --profile     # where transformers' side spends

Cases (batch 1, ``--new`` new tokens, default 200): a ``--prompt``-byte prompt (default 56: 56 +
200 = 256 positions, the model's context) and a ``--long-prompt``-byte one (default 200: decoding
runs past the 256-position context, where both re-encode the last 128 tokens when the cache is
full). Each case warms both sides up once, then runs ``--rounds`` rounds of one run a side (which
side goes first alternates); the table gives each side's median new tokens/s, the ratio of the
medians (transformers / zoo; issue 78's goal: >= 0.9x), the forward calls of the zoo module per
new token on each side (counted in a separate run) and whether both produced the same tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

CHECKPOINT = "transformer_lm_small.pg19mini"
TEXT = (b"It was the best of times, it was the worst of times, it was the age of wisdom, it was "
        b"the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, "
        b"it was the season of Light, it was the season of Darkness, it was the spring of hope, "
        b"it was the winter of despair.")  # fmt: skip


def contenders(prompt_len: int, new: int) -> tuple[Callable[[], torch.Tensor], ...]:
    """``(run_zoo, run_hf, calls)``: each run decodes ``new`` greedy tokens after the first
    ``prompt_len`` bytes of :data:`TEXT` and returns the ids; ``calls`` counts the zoo module's
    forward calls (``calls[0]``, reset by the caller)."""
    from transformers import AutoModelForCausalLM

    import zoo
    import zoo.integrations.transformers as zt

    model = AutoModelForCausalLM.from_pretrained(zt.checkpoint_folder(CHECKPOINT))
    module = model.zoo_model  # the same weights on both sides
    if prompt_len > len(TEXT):
        raise SystemExit(f"--prompt at most {len(TEXT)} bytes")
    prompt = torch.tensor([list(TEXT[:prompt_len])])
    calls = [0]
    module.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))

    def run_zoo() -> torch.Tensor:
        return zoo.generate(module, prompt, new, temperature=0)

    def run_hf() -> torch.Tensor:
        return model.generate(prompt, max_new_tokens=new, do_sample=False, use_cache=True)

    return run_zoo, run_hf, calls


def timed(run: Callable[[], torch.Tensor]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(name: str, prompt_len: int, new: int, rounds: int) -> dict:
    """One case's row: median new tokens/s a side, their ratio, calls per token, same tokens."""
    run_zoo, run_hf, calls = contenders(prompt_len, new)
    counts, outs = {}, {}
    for side, run in (("zoo", run_zoo), ("hf", run_hf)):  # also the warm-up
        calls[0] = 0
        outs[side] = run()
        counts[side] = calls[0] / new
    zoo_s, hf_s = [], []
    for r in range(rounds):
        if r % 2:
            hf_s.append(timed(run_hf))
            zoo_s.append(timed(run_zoo))
        else:
            zoo_s.append(timed(run_zoo))
            hf_s.append(timed(run_hf))
    zoo_tps, hf_tps = new / statistics.median(zoo_s), new / statistics.median(hf_s)
    paired = statistics.median(z / h for z, h in zip(zoo_s, hf_s, strict=True))
    return {"case": name, "prompt": prompt_len, "new": new, "zoo": zoo_tps, "hf": hf_tps,
            "ratio": hf_tps / zoo_tps, "paired": paired, "calls": counts,
            "same": torch.equal(outs["zoo"], outs["hf"])}  # fmt: skip


def report(rows: list[dict], command: str) -> str:
    """The markdown table of :func:`measure`'s rows, with the machine and the command."""
    import transformers

    from zoo.lineage import device_name

    lines = [
        f"Greedy decoding of `{CHECKPOINT}` at batch 1: transformers' `generate` "
        "(`AutoModelForCausalLM`, `use_cache=True`, the zoo's cache) against `zoo.generate`; "
        f"{device_name()}, torch {torch.__version__}, transformers {transformers.__version__}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end.",
        "",
        f"Command: `{command}`",
        "",
        "| case | zoo.generate tokens/s | transformers generate tokens/s | transformers / zoo "
        "(median of rounds) | forward calls per new token (zoo, transformers) | same tokens |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['case']} ({r['prompt']} + {r['new']}) | {r['zoo']:.0f} | {r['hf']:.0f} | "
            f"{r['ratio']:.2f}× ({r['paired']:.2f}×) | {r['calls']['zoo']:.3f}, "
            f"{r['calls']['hf']:.3f} | {'yes' if r['same'] else '**no**'} |"
            for r in rows
        ),
        "",
        "Tokens/s: median over the rounds; the ratio is that of the medians, and in brackets the "
        "median of each round's ratio. Calls per new token: 1 means one forward call of the zoo "
        "module per token, on the new token only (the first call reads the prompt); past the "
        "context each side re-encodes the last 128 tokens when the cache is full, in the same "
        "calls. Goal (issue 78): transformers / zoo >= 0.9×.",
    ]
    return "\n".join(lines)


def profile(prompt_len: int, new: int) -> None:
    """cProfile of transformers' side: the functions with the most time of their own."""
    import cProfile
    import pstats

    _, run_hf, _ = contenders(prompt_len, new)
    run_hf()
    profiler = cProfile.Profile()
    profiler.enable()
    run_hf()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompt", type=int, default=56, help="bytes of the short prompt")
    p.add_argument("--long-prompt", type=int, default=200, help="bytes of the long prompt")
    p.add_argument("--new", type=int, default=200, help="new tokens a run")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="profile transformers' side instead")
    p.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args.prompt, args.new)
        return
    rows = [measure("within the context", args.prompt, args.new, args.rounds),
            measure("past the context", args.long_prompt, args.new, args.rounds)]  # fmt: skip
    command = (f"python benchmarks/transformers_generate.py --prompt {args.prompt} --long-prompt "
               f"{args.long_prompt} --new {args.new} --rounds {args.rounds} --threads "
               f"{args.threads}" + (f" --out {args.out}" if args.out else ""))  # fmt: skip
    text = report(rows, command)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
