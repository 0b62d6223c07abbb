"""Benchmark cards: ``zoo bench NAME`` measures a published checkpoint on this machine.

For each sequence length ``n`` (batch 1), three measurements, each the median of ``repeats`` runs
after ``warmup`` untimed ones:

- **forward**: one forward pass over ``n`` tokens in eval mode, without gradients (seconds);
- **generation**: cached greedy decoding of the last ``new_tokens`` tokens of an ``n``-token
  sequence (a prompt of ``n - new_tokens`` tokens is encoded into the family's cache, untimed;
  then ``new_tokens`` single-token steps, the loop of :func:`zoo.generate`, are timed): tokens/s;
- **training step**: forward, cross-entropy on random next-token targets, backward and an
  ``AdamW`` step in train mode (seconds). The weights are restored afterwards.

and the peak memory of each, in bytes, above what was allocated before it started (so the weights
are not counted): on CUDA ``torch.cuda.max_memory_allocated``; on a Linux CPU the growth of the
process's peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs`` after returning
freed heap to the system with ``malloc_trim``), which counts everything the process touched
(oneDNN scratch, the allocator's slack), not only tensors; elsewhere ``None``.

Beside the times, each measurement's **executed FLOP/s**: the FLOPs of one more run of it, counted
by :mod:`zoo.roofline` (matrix products and attention), over its median time; and the
card's **matrix-product peak**, the best ``torch.mm`` rate of the precision's compute dtype on this
machine and thread count (:func:`zoo.roofline.matmul_peak`), so that each figure is also a
fraction of what the machine can do. Generation's is per decoded token, times tokens/s.

An encoder-decoder (translation) model reads a source of ``n`` tokens and a target of ``n``
tokens: forward and training step run both, generation encodes the source and decodes into the
target as :func:`zoo.translate` does; its lengths start at 32.

Lengths run from 256 (or the context, if shorter) doubling up to the model's ``max_seq_len``, the
context itself the last; one untimed pass at the shortest length comes first, so one-time set-up
(library initialisation, thread pools) is no length's time or memory. When ``n <= new_tokens``
the prompt is 1 token and ``n - 1`` are decoded. :func:`write_card` writes ``bench.md`` (a title
naming the checkpoint and the hardware, then the table), ``bench.json`` and ``bench.png``.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from zoo.drawing import plot_bench_card
from zoo.errors import ConfigError
from zoo.lineage import device_name
from zoo.memory import peak_memory_method, peak_memory_since, peak_memory_start
from zoo.roofline import MatmulPeak, count_flops, counting, matmul_peak

__all__ = [
    "PRECISIONS",
    "BenchCard",
    "BenchRow",
    "bench_lengths",
    "benchmark",
    "measure_length",
    "render_markdown",
    "write_card",
]

# Lightning's precision names: (autocast dtype, weight dtype)
PRECISIONS: dict[str, tuple[torch.dtype | None, torch.dtype]] = {
    "32-true": (None, torch.float32),
    "bf16-mixed": (torch.bfloat16, torch.float32),
    "16-mixed": (torch.float16, torch.float32),
    "bf16-true": (None, torch.bfloat16),
}
FORMAT = "zoo-bench/2"  # bench.json's "format" (2: FLOPs and the matmul peak)
MIB = 2**20


@dataclass(frozen=True)
class BenchRow:
    """The measurements at one sequence length (batch 1). Times in seconds, memory in bytes
    (``None``: not measurable on this platform)."""

    seq_len: int
    forward_s: float
    forward_peak_bytes: int | None
    prompt_tokens: int  # generation: tokens encoded into the cache before timing
    new_tokens: int  # generation: tokens decoded one by one, timed
    generate_tokens_per_s: float
    generate_peak_bytes: int | None
    train_step_s: float
    train_peak_bytes: int | None
    forward_flops: int | None = None  # executed FLOPs of one forward pass (zoo.roofline)
    generate_flops_per_token: int | None = None  # of one cached decoding step, on average
    train_flops: int | None = None  # of one training step

    def gflops(self, what: str) -> float | None:
        """Executed GFLOP/s of ``what``: ``"forward"``, ``"generate"`` or ``"train"``."""
        flops, seconds = {
            "forward": (self.forward_flops, self.forward_s),
            "generate": (self.generate_flops_per_token, 1 / self.generate_tokens_per_s),
            "train": (self.train_flops, self.train_step_s),
        }[what]
        return None if flops is None else flops / seconds / 1e9


@dataclass
class BenchCard:
    """A benchmark card: what was measured, where, and the rows (see the module docstring)."""

    name: str
    model_type: str
    parameters: int
    context: int  # max_seq_len
    device: str
    hardware: str  # "AMD EPYC 9R14 (2 threads)" or "NVIDIA H100 80GB HBM3"
    torch_version: str
    precision: str
    repeats: int
    warmup: int
    memory: str  # how peak memory was measured
    date: str  # ISO date
    zoo_version: str
    rows: list[BenchRow] = field(default_factory=list)
    peak: MatmulPeak | None = None  # the compute dtype's matrix-product peak here
    format: str = FORMAT

    def to_dict(self) -> dict:
        return asdict(self)


def bench_lengths(context: int, start: int = 256) -> list[int]:
    """``start, 2 start, 4 start, ...`` below ``context``, then ``context`` itself; ``[context]``
    when the context is at most ``start`` (tiny models)."""
    lengths, n = [], start
    while n < context:
        lengths.append(n)
        n *= 2
    return [*lengths, context]


def _device(device: str) -> torch.device:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"--device {device!r} is not a device (cpu, cuda, cuda:1)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"--device {device}: this machine has no CUDA device (torch {torch.__version__}); "
            "use --device cpu"
        )
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {device}: zoo bench measures on cpu or cuda")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise ConfigError(
            f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    return dev


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- the three measurements ------------------------------------------------------------------------
def _timed(device: torch.device, run: Callable[[], float | None], warmup: int, repeats: int):
    """Median seconds of ``repeats`` calls of ``run`` after ``warmup``, and the peak memory (bytes)
    over all of them. ``run`` returns its own time (seconds) when it must exclude set-up, else
    ``None`` and the whole call is timed."""
    start = peak_memory_start(device)
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        own = run()
        _sync(device)
        if i >= warmup:
            times.append(own if own is not None else time.perf_counter() - t0)
    return statistics.median(times), peak_memory_since(device, start)


SEQ2SEQ_START = 32  # encoder-decoders' shortest length: translation sentences are short


def _seq2seq(model: nn.Module) -> bool:
    return getattr(model, "is_encoder_decoder", False)


def _tokens(model: nn.Module, n: int, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    low = 4 if _seq2seq(model) else 0  # past a tokenizer's specials (pad 0 would be masked)
    return torch.randint(low, model.config.vocab_size, (1, n), generator=g).to(device)  # (1, n)


def _full(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Logits ``(1, n, V)`` of ``x``; an encoder-decoder reads ``x`` as source and target."""
    return (model(x, x) if _seq2seq(model) else model(x)).logits


def _prefill(model: nn.Module, x: torch.Tensor, prompt_len: int):
    """``(logits, cache)`` after encoding the first ``prompt_len`` tokens into the cache (an
    encoder-decoder first encodes all of ``x`` as its source)."""
    if _seq2seq(model):
        cache = model.init_cache(*model.encode(x))
        return model.decode(x[:, :prompt_len], cache=cache), cache
    cache = model.init_cache(1)
    return model(x[:, :prompt_len], past_key_values=cache).logits, cache


def _step(model: nn.Module, token: torch.Tensor, cache) -> torch.Tensor:
    if _seq2seq(model):
        return model.decode(token, cache=cache)
    return model(token, past_key_values=cache).logits


def _decode(model, x, prompt_len: int, steps: int, device, counted: list[int] | None) -> float:  # noqa: ANN001
    """Seconds of ``steps`` cached greedy steps after encoding ``x[:, :prompt_len]`` (untimed);
    with ``counted``, their FLOPs are appended to it."""
    logits, cache = _prefill(model, x, prompt_len)  # (1, prompt_len, V), untimed
    token = logits[:, -1, :].float().argmax(-1, keepdim=True)  # (1, 1)
    _sync(device)
    t0 = time.perf_counter()
    with counting() if counted is not None else nullcontext() as total:
        for _ in range(steps):  # the cached loop of zoo.generate, greedy
            logits = _step(model, token, cache)
            token = logits[:, -1, :].float().argmax(-1, keepdim=True)
    _sync(device)
    if counted is not None:
        counted.append(total())
    return time.perf_counter() - t0


def measure_length(
    model: nn.Module,
    n: int,
    *,
    device: torch.device,
    precision: str = "32-true",
    new_tokens: int = 64,
    warmup: int = 1,
    repeats: int = 5,
) -> BenchRow:
    """Forward, generation and training-step measurements of ``model`` at length ``n`` (batch 1);
    see the module docstring. ``model`` is left in eval mode with its weights unchanged."""
    autocast_dtype, _ = PRECISIONS[precision]

    def autocast():
        if autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=autocast_dtype)

    x = _tokens(model, n, device, seed=n)  # (1, n)
    model.eval()

    def forward() -> None:
        with torch.no_grad(), autocast():
            _full(model, x)

    forward_s, forward_peak = _timed(device, forward, warmup, repeats)
    forward_flops = count_flops(forward)

    prompt_len = max(1, n - new_tokens)
    steps = n - prompt_len  # new_tokens; fewer (n - 1) when n <= new_tokens

    def decode(counted: list[int] | None = None) -> float:
        with torch.no_grad(), autocast():
            return _decode(model, x, prompt_len, steps, device, counted)

    decode_s, generate_peak = _timed(device, decode, warmup, repeats)
    decode(counted := [])

    saved = copy.deepcopy(model.state_dict())
    y = _tokens(model, n, device, seed=n + 1)  # (1, n) targets
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)  # as zoo fit's
    scaler = torch.amp.GradScaler(device.type, enabled=autocast_dtype == torch.float16)
    model.train()

    def train_step() -> None:
        with autocast():
            logits = _full(model, x)  # (1, n, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    try:
        train_s, train_peak = _timed(device, train_step, warmup, repeats)
        train_flops = count_flops(train_step)
    finally:
        model.eval()
        model.load_state_dict(saved)
    return BenchRow(
        seq_len=n,
        forward_s=forward_s,
        forward_peak_bytes=forward_peak,
        prompt_tokens=prompt_len,
        new_tokens=steps,
        generate_tokens_per_s=steps / decode_s,
        generate_peak_bytes=generate_peak,
        train_step_s=train_s,
        train_peak_bytes=train_peak,
        forward_flops=forward_flops,
        generate_flops_per_token=round(counted[0] / steps),
        train_flops=train_flops,
    )


def benchmark(
    name: str,
    *,
    device: str = "cpu",
    precision: str = "32-true",
    lengths: Sequence[int] | None = None,
    new_tokens: int = 64,
    warmup: int = 1,
    repeats: int = 5,
    progress: bool = False,
    peak: MatmulPeak | None = None,
) -> BenchCard:
    """Measure the checkpoint ``name`` (anything :func:`zoo.from_pretrained` takes) at each length
    (default :func:`bench_lengths` of its context); see the module docstring for what is measured.
    ``peak``: the machine's matrix-product peak for the precision's compute dtype, measured
    (:func:`zoo.roofline.matmul_peak`) when ``None``.

    Raises:
        ConfigError: an unavailable device, an unknown precision, a length outside
            ``2..max_seq_len``, ``repeats < 1``, ``warmup < 0`` or ``new_tokens < 1``.
        UnknownModelError, CheckpointError, HubError: from :func:`zoo.from_pretrained`.
    """
    from zoo import __version__
    from zoo.pretrained import from_pretrained

    dev = _device(device)
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r}: one of {', '.join(PRECISIONS)}")
    if repeats < 1 or warmup < 0 or new_tokens < 1:
        raise ConfigError(
            f"--repeats must be >= 1, --warmup >= 0 and --new-tokens >= 1, got {repeats}, "
            f"{warmup} and {new_tokens}"
        )
    model = from_pretrained(name, device=dev, dtype=PRECISIONS[precision][1])
    context = model.config.max_seq_len
    start = SEQ2SEQ_START if _seq2seq(model) else 256
    lengths = sorted(set(lengths)) if lengths else bench_lengths(context, start)
    bad = [n for n in lengths if not 2 <= n <= context]
    if bad:
        raise ConfigError(
            f"length(s) {bad} outside 2..{context}: the context (max_seq_len) of {name} is "
            f"{context}"
        )
    card = BenchCard(
        name=str(name),
        model_type=model.model_type,
        parameters=sum(p.numel() for p in model.parameters()),
        context=context,
        device=str(dev),
        hardware=device_name(dev),  # the GPU, or the CPU and threads
        torch_version=torch.__version__,
        precision=precision,
        repeats=repeats,
        warmup=warmup,
        memory=peak_memory_method(dev),
        date=datetime.date.today().isoformat(),
        zoo_version=__version__,
        peak=peak or matmul_peak(PRECISIONS[precision][0] or PRECISIONS[precision][1], device=dev),
    )
    options = dict(device=dev, precision=precision, new_tokens=new_tokens, warmup=warmup,
                   repeats=repeats)  # fmt: skip
    # once, untimed, so one-time set-up (lazy library init, thread pools) is no length's memory
    measure_length(model, min(lengths), **{**options, "warmup": 0, "repeats": 1})
    if not progress:
        card.rows = [measure_length(model, n, **options) for n in lengths]
        return card
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("", total=len(lengths))
        for n in lengths:
            bar.update(task, description=f"length {n}")
            card.rows.append(measure_length(model, n, **options))
            bar.advance(task)
    return card


# --- the card --------------------------------------------------------------------------------------
COLUMNS = (  # (markdown header, terminal header, BenchRow field, format)
    ("length", "length", "seq_len", "{:d}"),
    ("forward (ms)", "fwd ms", "forward_s", "ms"),
    ("forward peak (MiB)", "fwd MiB", "forward_peak_bytes", "mib"),
    ("generation (tokens/s)", "gen tok/s", "generate_tokens_per_s", "{:,.1f}"),
    ("generation peak (MiB)", "gen MiB", "generate_peak_bytes", "mib"),
    ("train step (ms)", "train ms", "train_step_s", "ms"),
    ("train peak (MiB)", "train MiB", "train_peak_bytes", "mib"),
)


FLOP_COLUMNS = (("forward", "fwd"), ("generation", "gen"), ("train step", "train"))
_FLOP_KEYS = ("forward", "generate", "train")


def flop_rows(card: BenchCard) -> list[list[str]]:
    """Per length: the executed GFLOP/s of forward, generation and training step, each followed
    by its percentage of the card's matrix-product peak (``-`` where not counted)."""
    rows = []
    for r in card.rows:
        cells = [str(r.seq_len)]
        for key in _FLOP_KEYS:
            rate = r.gflops(key)
            share = None if rate is None or card.peak is None else 100 * rate / card.peak.gflops
            cells += [_cell(rate, "{:,.1f}"), _cell(share, "{:.0f} %")]
        rows.append(cells)
    return rows


def peak_line(card: BenchCard) -> str:
    """What the percentages are of: the peak, its product's shape and the threads."""
    if card.peak is None:
        return "The matrix-product peak was not measured."
    k = card.peak
    return (
        f"% of peak: of this machine's {k.dtype} matrix-product peak, {k.gflops:,.1f} GFLOP/s "
        f"(the best torch.mm, at {k.shape[0]} x {k.shape[1]} x {k.shape[2]}, {k.threads} "
        "threads; zoo.roofline). FLOPs: matrix products and attention, counted by "
        "torch.utils.flop_counter on one run."
    )


def _cell(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if fmt == "ms":
        return f"{1e3 * value:,.2f}" if value < 1 else f"{1e3 * value:,.0f}"
    if fmt == "mib":
        return f"{value / MIB:,.1f}"
    return fmt.format(value)


def table_rows(card: BenchCard) -> list[list[str]]:
    """The table's cells, one list per length, in :data:`COLUMNS` order."""
    return [[_cell(getattr(r, key), fmt) for _, _, key, fmt in COLUMNS] for r in card.rows]


def title(card: BenchCard) -> str:
    """``Benchmark of NAME on HARDWARE``: the card's title line."""
    return f"Benchmark of {card.name} on {card.hardware}"


def render_markdown(card: BenchCard) -> str:
    """``bench.md``: the title line, what was measured, then the table (self-contained)."""
    new = card.rows[-1].new_tokens if card.rows else 0
    lines = [
        f"# {title(card)}",
        "",
        f"{card.model_type}, {card.parameters / 1e6:.2f}M parameters, context {card.context}; "
        f"device {card.device}, torch {card.torch_version}, precision {card.precision}, "
        f"batch 1, median of {card.repeats} after {card.warmup} warm-up; {card.date}.",
        "",
        "forward: one forward pass without gradients. generation: greedy cached decoding of the "
        f"last {new} tokens of the sequence (the prompt before them encoded untimed). train step: "
        "forward, cross-entropy, backward and an AdamW step. peak: memory above what was in use "
        f"before the measurement (weights not counted): {card.memory}."
        + (
            " An encoder-decoder: length n is a source of n tokens and a target of n tokens; "
            "generation encodes the source, then decodes into the target as zoo.translate does."
            if card.model_type.endswith("seq2seq")
            else ""
        ),  # fmt: skip
        "",
        "| " + " | ".join(h for h, _, _, _ in COLUMNS) + " |",
        "|" + "---:|" * len(COLUMNS),
        *("| " + " | ".join(cells) + " |" for cells in table_rows(card)),
        "",
        "Executed FLOP/s. " + peak_line(card),
        "",
        "| length | "
        + " | ".join(f"{h} (GFLOP/s) | {h} (% of peak)" for h, _ in FLOP_COLUMNS)
        + " |",
        "|" + "---:|" * (1 + 2 * len(FLOP_COLUMNS)),
        *("| " + " | ".join(cells) + " |" for cells in flop_rows(card)),
    ]
    return "\n".join(lines) + "\n"


def write_card(card: BenchCard, out_dir: str | Path) -> list[Path]:
    """Write ``bench.md``, ``bench.json`` and ``bench.png`` into ``out_dir`` (created); return them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.md", out / "bench.json", out / "bench.png"]
    paths[0].write_text(render_markdown(card))
    paths[1].write_text(json.dumps(card.to_dict(), indent=1) + "\n")
    plot_bench_card(card, paths[2], title(card))
    return paths
