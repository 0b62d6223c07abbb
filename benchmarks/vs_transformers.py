"""The zoo against transformers' own models of the same shape, side by side in one process
(issue 78): a training step and greedy generation against GPT-2, beam 4 against MarianMT.

    python benchmarks/vs_transformers.py --out docs/bench/vs_transformers.md
    python benchmarks/vs_transformers.py --quick        # a smoke run at tiny sizes
    python benchmarks/vs_transformers.py --compile --cases "training step" "greedy generation" \
        --out docs/bench/vs_transformers_compiled_cpu_avx2.md

Issue 78's goal: the zoo stays ahead of transformers by a training step >= 1.3x GPT-2, greedy
generation >= 1.5x GPT-2 and beam 4 >= 1.25x MarianMT (the earlier figures, on an Intel Xeon:
1.33x, 1.58x, 1.26x). Run it on a quiet machine: the table records the load average before and
after.

Models (random weights, fp32):
- ``transformer_lm_small`` (byte-level, d_model 256, 4 layers of 4 heads, d_ff 1024, 256 learned
  positions, pre-norm, exact GELU, tied embeddings) against a ``GPT2LMHeadModel`` of the same
  shape (:func:`gpt2_like`: ``activation_function="gelu"``, no dropout, ``attn_implementation=
  "sdpa"``); the parameter counts are checked equal.
- beam 4: :mod:`benchmarks.beam_search_hf`'s race (``transformer_small`` against a
  ``MarianMTModel`` of its shape, decoding Multi30k test2016 through the shipped BPE for exactly
  the same number of decoder steps).

Cases: (1) a training step (forward, cross-entropy through ``labels=``, backward, AdamW step) on
4 x 256 random bytes, tokens/s; (2) greedy generation of 200 new tokens after a 56-byte prompt at
batch 1 (``zoo.generate(temperature=0)`` against ``generate(do_sample=False, use_cache=True)``;
56 + 200 = 256 positions, GPT-2's and the zoo's limit), new tokens/s; (3) beam 4 on 16
sentences for 23 decoder steps, sentences/s. Each case warms both sides up once, then runs
``--rounds`` rounds, each running each side once (which side goes first alternates); the table
gives each side's median (and the range over rounds) and the ratio of the medians (and the range
of the per-round ratios).

``--compile`` races both sides compiled, each the way its library documents: training through
``nn.Module.compile`` on both; greedy generation through ``zoo.generate(compile=True)`` against
transformers' static cache with its ``CompileConfig`` (``_compile_all_devices``: transformers
compiles automatically only on accelerators). The warm-up run, which compiles, is timed and
reported apart. Beam search has no compiled path in the zoo, so ``beam 4`` is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

try:
    from benchmarks import beam_search_hf
except ImportError:  # run as a script: benchmarks/ itself is on sys.path
    import beam_search_hf  # type: ignore[no-redef]

Runner = Callable[[], float]  # runs one side once and returns its seconds

PROMPT = b"It was the best of times, it was the worst of times, it "  # 56 bytes


@dataclasses.dataclass(frozen=True)
class Sizes:
    rounds: int
    batch: int  # training batch x length
    length: int
    train_steps: int  # optimizer steps timed together, per side per round
    prompt: int  # greedy generation: prompt bytes and new tokens
    new_tokens: int
    sentences: int  # beam 4: sentences and decoder steps
    beam_steps: int


FULL = Sizes(rounds=9, batch=4, length=256, train_steps=5, prompt=56, new_tokens=200,
             sentences=16, beam_steps=23)  # fmt: skip
QUICK = Sizes(rounds=2, batch=2, length=32, train_steps=1, prompt=8, new_tokens=8,
              sentences=2, beam_steps=3)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Goal:
    case: str
    baseline: str
    ratio: float  # the zoo's throughput over transformers', at least
    earlier: float  # the figure measured before, on an Intel Xeon


GOALS = (
    Goal("training step", "GPT-2", 1.30, 1.33),
    Goal("greedy generation", "GPT-2", 1.50, 1.58),
    Goal("beam 4", "MarianMT", 1.25, 1.26),
)


def parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights once)."""
    return sum(p.numel() for p in model.parameters())


def gpt2_like(zoo_model: torch.nn.Module) -> torch.nn.Module:
    """A ``GPT2LMHeadModel`` with the shape and the weights of the zoo's byte-level
    ``TransformerLM``, in its mode: exact GELU, no dropout, SDPA attention, no BOS/EOS (the byte
    vocabulary has no room for GPT-2's 50256, and greedy generation must not stop early)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = zoo_model.config
    if c.norm != "pre" or c.position != "learned" or not c.tie_weights or c.scale_embeddings:
        raise ValueError(f"GPT-2 has no model of this shape: {c}")
    config = GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.max_seq_len, n_embd=c.d_model, n_layer=c.n_layers,
        n_head=c.n_heads, n_inner=c.d_ff, activation_function=c.activation,
        layer_norm_epsilon=c.layer_norm_eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation="sdpa",
    )  # fmt: skip
    theirs = GPT2LMHeadModel(config)
    load_zoo_weights(theirs, zoo_model)
    return theirs.train(zoo_model.training)


@torch.no_grad()
def load_zoo_weights(gpt2: torch.nn.Module, zoo_model: torch.nn.Module) -> None:
    """Copy the zoo model's weights into :func:`gpt2_like`'s GPT-2 (whose ``Conv1D`` layers hold
    ``nn.Linear``'s weights transposed; both order the fused projection q, k, v, then heads), so
    the two compute the same function: the same losses, the same greedy tokens."""
    t = gpt2.transformer
    pairs = [(t.wte.weight, zoo_model.tok_emb.weight), (t.wpe.weight, zoo_model.pos_emb.weight),
             (t.ln_f.weight, zoo_model.norm_f.weight), (t.ln_f.bias, zoo_model.norm_f.bias)]  # fmt: skip
    for h, block in zip(t.h, zoo_model.blocks, strict=True):
        for theirs, ours in ((h.ln_1, block.norm1), (h.ln_2, block.norm2)):
            pairs += [(theirs.weight, ours.weight), (theirs.bias, ours.bias)]
        for theirs, ours in ((h.attn.c_attn, block.attention.qkv),
                             (h.attn.c_proj, block.attention.out_proj),
                             (h.mlp.c_fc, block.ff.w1), (h.mlp.c_proj, block.ff.w2)):  # fmt: skip
            pairs += [(theirs.weight, ours.weight.T), (theirs.bias, ours.bias)]
    for theirs, ours in pairs:
        theirs.copy_(ours)


def training(sizes: Sizes, compile: bool = False) -> tuple[Runner, Runner, dict]:
    """Both sides' training step on the same random bytes: ``train_steps`` steps of forward,
    cross-entropy (``labels=``), backward and AdamW per run; ``compile``: both models through
    ``nn.Module.compile``."""
    import zoo

    torch.manual_seed(0)
    ours = zoo.create_model("transformer_lm_small").train()
    theirs = gpt2_like(ours)
    x = torch.randint(
        0, 256, (sizes.batch, sizes.length), generator=torch.Generator().manual_seed(0)
    )
    losses: dict[str, list[float]] = {"zoo": [], "transformers": []}
    with torch.no_grad():  # the same weights: the same loss before any step
        initial = {"zoo": ours(x, labels=x).loss.item(),
                   "transformers": theirs(x, labels=x).loss.item()}  # fmt: skip
    if compile:
        ours.compile()
        theirs.compile()

    def runner(model: torch.nn.Module, side: str) -> Runner:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def run() -> float:
            start = time.perf_counter()
            for _ in range(sizes.train_steps):
                loss = model(x, labels=x).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            seconds = time.perf_counter() - start
            losses[side].append(loss.item())
            return seconds

        return run

    info = {"work": sizes.batch * sizes.length * sizes.train_steps, "unit": "tokens/s",
            "shape": f"{sizes.batch} × {sizes.length} random bytes, fp32, AdamW",
            "zoo_params": parameters(ours), "hf_params": parameters(theirs), "losses": losses,
            "initial_loss": initial,
            "hf_attention": theirs.config._attn_implementation}  # fmt: skip
    return runner(ours, "zoo"), runner(theirs, "transformers"), info


def greedy(sizes: Sizes, compile: bool = False) -> tuple[Runner, Runner, dict]:
    """Both sides' greedy generation of ``new_tokens`` after the same prompt, batch 1, with the
    key/value cache; ``info["lengths"]`` collects the output lengths and ``info["calls"]`` the
    forward calls of each run (the same work on both sides). ``compile``: the module docstring.
    """
    from transformers import CompileConfig

    import zoo

    torch.manual_seed(0)
    ours = zoo.create_model("transformer_lm_small").eval()
    theirs = gpt2_like(ours)
    if sizes.prompt + sizes.new_tokens > ours.config.max_seq_len:
        raise ValueError(f"prompt + new tokens > {ours.config.max_seq_len} positions")
    prompt = torch.tensor([list((PROMPT * 8)[: sizes.prompt])])
    mask = torch.ones_like(prompt)
    ours_calls = beam_search_hf.counted(ours)
    hf_calls = beam_search_hf.counted(theirs)
    lengths: dict[str, list[int]] = {"zoo": [], "transformers": []}
    calls: dict[str, list[int]] = {"zoo": [], "transformers": []}
    tokens: dict[str, list[int]] = {}  # the last run's new tokens
    hf_compiled: dict = {}
    if compile:
        config = CompileConfig(dynamic=True)
        config._compile_all_devices = True  # on a CPU too
        hf_compiled = {"cache_implementation": "static", "compile_config": config}

    def run_zoo() -> float:
        ours_calls[0] = 0
        start = time.perf_counter()
        out = zoo.generate(ours, prompt, sizes.new_tokens, temperature=0, compile=compile)
        seconds = time.perf_counter() - start
        lengths["zoo"].append(out.shape[1] - sizes.prompt)
        tokens["zoo"] = out[0, sizes.prompt :].tolist()
        calls["zoo"].append(ours_calls[0])
        return seconds

    def run_hf() -> float:
        hf_calls[0] = 0
        start = time.perf_counter()
        with torch.no_grad():
            out = theirs.generate(prompt, attention_mask=mask, max_new_tokens=sizes.new_tokens,
                                  do_sample=False, use_cache=True, **hf_compiled)  # fmt: skip
        seconds = time.perf_counter() - start
        lengths["transformers"].append(out.shape[1] - sizes.prompt)
        tokens["transformers"] = out[0, sizes.prompt :].tolist()
        calls["transformers"].append(hf_calls[0])
        return seconds

    info = {"work": sizes.new_tokens, "unit": "new tokens/s",
            "shape": f"{sizes.new_tokens} new tokens after a {sizes.prompt}-byte prompt, batch 1",
            "lengths": lengths, "calls": calls, "tokens": tokens}  # fmt: skip
    return run_zoo, run_hf, info


def beam(sizes: Sizes, compile: bool = False) -> tuple[Runner, Runner, dict]:
    """:mod:`benchmarks.beam_search_hf`'s two sides; ``info["calls"]`` collects the decoder
    steps of each run."""
    if compile:
        raise ValueError("beam 4 has no compiled zoo side: race it without --compile")
    run_zoo, run_hf, zoo_steps, hf_steps = beam_search_hf.contenders(
        sizes.sentences, sizes.beam_steps
    )
    calls: dict[str, list[int]] = {"zoo": [], "transformers": []}

    def counting(run: Runner, steps: list[int], side: str) -> Runner:
        def counted_run() -> float:
            steps[0] = 0
            seconds = run()
            calls[side].append(steps[0])
            return seconds

        return counted_run

    info = {"work": sizes.sentences, "unit": "sentences/s", "calls": calls,
            "shape": f"{sizes.sentences} Multi30k test2016 sentences, {sizes.beam_steps} decoder "
                     "steps, transformer_small's shape"}  # fmt: skip
    return counting(run_zoo, zoo_steps, "zoo"), counting(run_hf, hf_steps, "transformers"), info


CASES: dict[str, Callable[[Sizes, bool], tuple[Runner, Runner, dict]]] = {
    "training step": training,
    "greedy generation": greedy,
    "beam 4": beam,
}


def race(run_zoo: Runner, run_hf: Runner, rounds: int) -> list[tuple[float, float]]:
    """Warm both sides up once, then ``rounds`` rounds of one run each (alternating which side
    goes first): ``[(zoo seconds, transformers seconds)]``, the warm-up's first."""
    times = [(run_zoo(), run_hf())]
    for r in range(rounds):
        if r % 2:
            t_hf, t_zoo = run_hf(), run_zoo()
        else:
            t_zoo, t_hf = run_zoo(), run_hf()
        times.append((t_zoo, t_hf))
    return times


def measure(case: str, sizes: Sizes, compile: bool = False) -> dict:
    """One case's row: per-round throughputs of both sides, their medians and the ratio, and
    the warm-up's seconds (the compiles, with ``compile``)."""
    run_zoo, run_hf, info = CASES[case](sizes, compile)
    warm_up, *times = race(run_zoo, run_hf, sizes.rounds)
    work = info["work"]
    zoo = [work / t for t, _ in times]
    hf = [work / t for _, t in times]
    goal = next(g for g in GOALS if g.case == case)
    ratio = statistics.median(zoo) / statistics.median(hf)
    return {"case": case, "baseline": goal.baseline, "goal": goal.ratio, "earlier": goal.earlier,
            "zoo": zoo, "transformers": hf, "ratio": ratio, "met": ratio >= goal.ratio,
            "round_ratios": [z / h for z, h in zip(zoo, hf, strict=True)], "warm_up": warm_up,
            **info}  # fmt: skip


def cpu_name() -> str:
    """lscpu's "Model name" and torch's thread count, else :func:`zoo.lineage.device_name`."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name:"))  # fmt: skip
        return f"{name} ({torch.get_num_threads()} threads)"
    except (OSError, subprocess.CalledProcessError, StopIteration):
        from zoo.lineage import device_name

        return device_name("cpu")


def _spread(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–" \
           f"{fmt.format(max(values))})"  # fmt: skip


COMPILED_NOTE = (
    "Both sides through torch.compile, each as its library documents (training: "
    "`nn.Module.compile`; greedy: `zoo.generate(compile=True)` against transformers' static "
    "cache and `CompileConfig(dynamic=True)`, compiled on a CPU through `_compile_all_devices`). "
    "The warm-up run, which compiles, is not in the rounds; its seconds are below."
)


def report(rows: list[dict], environment: dict) -> str:
    """The markdown: the goal table, what each row measured, and the rounds."""
    compiled = environment.get("compile", False)
    title = "# The zoo against transformers' own models of the same shape"
    lines = [title + (", both compiled (issue 81)" if compiled else " (issue 78)"), ""]
    if compiled:
        lines += [COMPILED_NOTE, ""]
    lines += [
        f"{environment['cpu']}, torch {environment['torch']}, transformers "
        f"{environment['transformers']}; {environment['rounds']} rounds per case after a "
        "warm-up, each running both sides once (alternating which goes first). Cells: median "
        "(range over rounds); ratio: zoo median / transformers median (range of the per-round "
        "ratios); above 1 the zoo is faster.",
        "",
        "| case | zoo | transformers | ratio | goal | met? |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} vs {r['baseline']} ({r['unit']}) | {_spread(r['zoo'], '{:,.1f}')} "
            f"| {_spread(r['transformers'], '{:,.1f}')} | {r['ratio']:.2f}× "
            f"({min(r['round_ratios']):.2f}–{max(r['round_ratios']):.2f}) "
            f"| ≥ {r['goal']:.2f}× (earlier {r['earlier']:.2f}× on an Intel Xeon) "
            f"| {'yes' if r['met'] else '**no**'} |"
        )
    lines += ["", "What each row ran:"]
    for r in rows:
        lines.append(f"- {r['case']}: {r['shape']}.")
        if "zoo_params" in r:
            same = "the same" if r["zoo_params"] == r["hf_params"] else "**different**"
            lines.append(
                f"  Parameters: zoo {r['zoo_params']:,}, GPT-2 {r['hf_params']:,} ({same}); "
                f"GPT-2 attention: {r['hf_attention']}; GPT-2 holds the zoo's weights. Loss "
                f"before any step: zoo {r['initial_loss']['zoo']:.4f}, GPT-2 "
                f"{r['initial_loss']['transformers']:.4f}; after the last run: zoo "
                f"{r['losses']['zoo'][-1]:.4f}, GPT-2 {r['losses']['transformers'][-1]:.4f}."
            )
        if "lengths" in r:
            lines.append(
                f"  New tokens per run: zoo {sorted(set(r['lengths']['zoo']))}, GPT-2 "
                f"{sorted(set(r['lengths']['transformers']))}; the same tokens: "
                f"{'yes' if r['tokens']['zoo'] == r['tokens']['transformers'] else 'no'}."
            )
        if "calls" in r:
            lines.append(
                f"  Forward (decoder) calls per run: zoo {sorted(set(r['calls']['zoo']))}, "
                f"{r['baseline']} {sorted(set(r['calls']['transformers']))}."
            )
    if compiled:
        lines += [
            "",
            "Warm-up run, compiles included (seconds, zoo / transformers): "
            + "; ".join(f"{r['case']} {r['warm_up'][0]:.1f} / {r['warm_up'][1]:.1f}" for r in rows)
            + ".",
        ]
    lines += [
        "",
        "Per round (zoo / transformers):",
        "",
        "| case | " + " | ".join(str(i + 1) for i in range(environment["rounds"])) + " |",
        "|---|" + "---|" * environment["rounds"],
    ]
    for r in rows:
        cells = [f"{z:,.1f} / {h:,.1f}" for z, h in zip(r["zoo"], r["transformers"], strict=True)]
        lines.append(f"| {r['case']} ({r['unit']}) | " + " | ".join(cells) + " |")
    loads = ", ".join(f"{r['load_after']:.2f}" for r in rows)
    lines += [
        "",
        f"Load average (1 min) before the run: {environment['load_before']:.2f}; after each "
        f"case: {loads} (this run itself keeps "
        f"{environment['threads']} threads busy: a load above that is other work on the cores).",
        "",
        f"Command: `{environment['command']}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> tuple[list[dict], str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 2 rounds")
    p.add_argument("--rounds", type=int, default=None, help=f"default {FULL.rounds}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--compile", action="store_true", help="both sides compiled (torch.compile); "
                   "training step and greedy generation only")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = p.parse_args(argv)
    if args.compile and "beam 4" in args.cases:
        p.error(
            '--compile races "training step" and "greedy generation" only (the zoo\'s beam '
            'search has no compiled path): pass --cases "training step" "greedy generation"'
        )
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else FULL
    if args.rounds is not None:
        sizes = dataclasses.replace(sizes, rounds=args.rounds)

    import transformers

    argv = sys.argv[1:] if argv is None else argv
    load_before = os.getloadavg()[0]
    rows = []
    for case in args.cases:
        rows.append(measure(case, sizes, args.compile))
        rows[-1]["load_after"] = os.getloadavg()[0]
    environment = {
        "cpu": cpu_name(), "torch": torch.__version__, "transformers": transformers.__version__,
        "rounds": sizes.rounds, "threads": args.threads, "load_before": load_before,
        "compile": args.compile,
        "command": shlex.join(["python", "benchmarks/vs_transformers.py", *argv]),
    }  # fmt: skip
    text = report(rows, environment)
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return rows, text


if __name__ == "__main__":
    main()
