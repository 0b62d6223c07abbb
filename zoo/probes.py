"""Zero-shot retrieval by distance: the copy probe (``zoo evaluate SOURCE --probe copy``).

Average bits per byte hardly sees far context: few bytes of a book have a copy source more than a
few hundred bytes back (docs/bench/copy_distance_pg19mini.md), so a model that retrieves them
cannot show it there. This probe plants one, in the style of the induction-head and
associative-recall tests (Olsson et al. 2022, "In-context Learning and Induction Heads"; Arora et
al. 2023, "Zoology", §3), on real text and without training:

- a trial is a window of ``n = max_seq_len`` bytes of held-out text (a split of the model's data
  set, or a file), drawn from the seed, and a span of ``m`` random lowercase ASCII letters
  (uniform over ``a``-``z``, drawn from the seed);
- the span is written at the window's end, ``q = n - m``; for distance ``d`` the same span is also
  written at ``p = q - d`` (``d``: the distance between the starts of the two copies, so
  ``m <= d <= n - m``: the copies do not overlap and both lie in the window);
- the model's bits per byte are scored on the second copy's bytes after its first ``k`` (the
  cue), targets ``q + k .. n - 1``, once with the first copy (the *repeat*) and once without it
  (the *control*: the text at ``p`` as it was; it does not depend on ``d``, so it is computed once
  per trial);
- the retrieval gain is ``control - repeat`` in bits per byte, with a two-sided 95% Student-t
  interval over the trials' paired gains (``mean ± t(0.975, trials - 1) · s / sqrt(trials)``).

The windows and spans depend on the seed, the context and the span alone, not on the distances,
so the gain at one distance is the same whichever other distances are measured with it. That is
what the registry's ``copy_gain`` metric relies on (:func:`copy_gain`: one distance, re-measured
by ``zoo evaluate NAME --registered``).

A model that copies from its context scores the repeat near 0 bits; one that does not scores it as
the control. The windows of one book may overlap, so read the interval as a lower bound on the
uncertainty. The model runs in fp32, in eval mode, the trials batched in forward passes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.drawing import plot_copy_probe
from zoo.errors import ConfigError
from zoo.profiles import COPY_PROBE_FILES, CopyProbe, default_distances, load_copy_probe

if TYPE_CHECKING:
    from zoo.hub.schema import Metric

# CopyProbe, its reader and defaults live in zoo.profiles with the other profiles; named here too
__all__ = [
    "COPY_PROBE_FILES",
    "CopyProbe",
    "copy_gain",
    "copy_inputs",
    "copy_probe",
    "copy_probe_rich_table",
    "copy_probe_table",
    "default_distances",
    "gain_metric",
    "load_copy_probe",
    "save_copy_probe",
    "t_critical",
]

CONFIDENCE = 0.95


def t_critical(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided critical value of Student's t with ``df >= 1`` degrees of freedom:
    ``P(|T| <= t) = confidence`` (12.706 for one, 2.040 for 31, 1.960 in the limit). Bisection on
    the closed-form distribution for whole ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    if df < 1 or not 0 < confidence < 1:
        raise ConfigError(
            f"t_critical needs df >= 1 and 0 < confidence < 1, got {df}, {confidence}"
        )

    def inside(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        s, c2 = math.sin(theta), math.cos(theta) ** 2
        if df % 2:  # (2/pi) (theta + sin(theta) (cos + 2/3 cos^3 + ... + cos^(df-2)))
            term = math.cos(theta)
            total = 0.0 if df == 1 else term
            for r in range(1, (df - 1) // 2):
                term *= c2 * 2 * r / (2 * r + 1)
                total += term
            return 2 / math.pi * (theta + s * total)
        term = total = 1.0  # sin(theta) (1 + 1/2 cos^2 + ... + cos^(df-2))
        for r in range(1, df // 2):
            term *= c2 * (2 * r - 1) / (2 * r)
            total += term
        return s * total

    lo, hi = 0.0, 1.0
    while inside(hi) < confidence:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if inside(mid) < confidence else (lo, mid)
    return (lo + hi) / 2


def copy_inputs(window, span, distance: int | None):
    """One model input: ``window`` ``(n,)`` int64 bytes with ``span`` ``(m,)`` written at its end
    (``q = n - m``) and, unless ``distance`` is None (the control), also at ``q - distance``."""
    x = window.clone()
    q = len(window) - len(span)
    x[q:] = span
    if distance is not None:
        x[q - distance : q - distance + len(span)] = span
    return x


def _check_settings(span, cue, trials, distances) -> None:
    """The limits that do not depend on the model (ConfigError naming the limit)."""
    if trials < 2:
        raise ConfigError(f"trials={trials}: the 95% interval over trials needs at least 2")
    if span < 1:
        raise ConfigError(f"span={span}: the span needs at least 1 byte")
    if not 0 <= cue < span:
        raise ConfigError(
            f"cue={cue} must be at least 0 and shorter than the span ({span} bytes): the scored "
            "bytes are the span's after its cue"
        )
    for d in distances or ():
        if d < span:
            raise ConfigError(
                f"distance {d} is shorter than the span ({span} bytes): the two copies would "
                f"overlap; give distances of at least {span}"
            )


def _byte_lm(model, name: str) -> int:
    """``model``'s context ``max_seq_len``; ConfigError unless it is a byte-level causal LM."""
    c = getattr(model, "config", None)
    kind = getattr(model, "model_type", type(model).__name__)
    if kind == "image_transformer_lm" or kind.endswith("seq2seq") or c is None or (
        getattr(c, "vocab_size", None) != 256 or not hasattr(c, "max_seq_len")
    ):  # fmt: skip
        raise ConfigError(
            f"{name} is a {kind} (vocabulary {getattr(c, 'vocab_size', '?')}): the copy probe "
            "measures byte-level causal language models (256 byte values, one sequence)"
        )
    structure = c.structure() if callable(getattr(c, "structure", None)) else {}
    if structure.get("causal") is False:
        raise ConfigError(
            f"{name}'s evaluation looks ahead (routing {getattr(c, 'routing', '?')}): it could "
            "read the second copy itself; the copy probe measures strictly causal models"
        )
    return c.max_seq_len


def _documents(n, dataset, split, text_file, data_dir) -> list[bytes]:
    """The documents the windows come from: ``text_file``'s bytes, or ``split`` of ``dataset``."""
    if text_file is not None:
        path = Path(text_file)
        if not path.is_file():
            raise ConfigError(f"text file {text_file} does not exist")
        data = path.read_bytes()
        if len(data) < n:
            raise ConfigError(
                f"text file {text_file} holds {len(data):,} bytes, fewer than one window of the "
                f"model's context ({n:,} bytes)"
            )
        return [data]
    from zoo.data.byte_corpora import load_byte_corpus
    from zoo.data.images import IMAGE_DATASETS
    from zoo.data.translation import EVAL_SPLITS

    if split not in ("valid", "test"):
        raise ConfigError(f"split must be 'valid' or 'test', not {split!r}")
    if dataset in IMAGE_DATASETS or dataset in EVAL_SPLITS:
        raise ConfigError(
            f"the copy probe plants spans in text; {dataset} is not a byte-level text data set "
            "(give --text-file)"
        )
    docs = load_byte_corpus(dataset, data_dir=data_dir, splits=(split,))[split]
    if not any(len(d) >= n for d in docs):
        raise ConfigError(f"no document of {dataset} {split} holds a window of {n:,} bytes")
    return docs


def _draw(docs, n: int, span: int, trials: int, seed: int):
    """``trials`` windows ``(trials, n)`` int64, uniform over every window of ``n`` bytes inside
    one document, their ``(document, start)``, and spans ``(trials, span)`` of lowercase letters."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    starts = np.array([max(len(d) - n + 1, 0) for d in docs])  # windows per document
    picks = rng.integers(0, starts.sum(), trials)
    doc = np.searchsorted(np.cumsum(starts), picks, side="right")
    begin = picks - np.concatenate([[0], np.cumsum(starts)])[doc]
    where = [(int(d), int(b)) for d, b in zip(doc, begin, strict=True)]
    windows = torch.tensor(np.stack([np.frombuffer(docs[d], np.uint8, n, b) for d, b in where]))
    spans = torch.from_numpy(rng.integers(ord("a"), ord("z") + 1, (trials, span)))
    return windows.long(), tuple(where), spans.long()


def copy_probe(
    source,
    *,
    dataset: str = "pg19mini",
    split: str = "test",
    text_file: str | os.PathLike | None = None,
    span: int = 32,
    cue: int = 8,
    trials: int = 32,
    distances: tuple[int, ...] | list[int] | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    data_dir: str | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> CopyProbe:
    """Run the copy probe (module docstring) on ``source``.

    Args:
        source: anything :func:`~zoo.loading.load_task` takes for a byte-level causal language
            model (published name, ``.ckpt``, run or ``save_pretrained`` folder), or such a model
            itself: an ``nn.Module`` mapping int64 bytes ``(B, T)`` to logits ``(B, T, 256)``
            with ``config.max_seq_len`` and ``config.vocab_size == 256``.
        dataset, split: where the windows come from (``valid`` or ``test``).
        text_file: instead, one file of at least ``max_seq_len`` bytes.
        span, cue, trials, seed: ``m``, ``k``, the number of windows, the seed of the windows
            and spans.
        distances: default :func:`default_distances` (powers of two from 16 that fit).
        batch_size: windows per forward pass (default ``16,384 // max_seq_len``, at least 1).
        device: where the model runs.

    Returns:
        A :class:`CopyProbe`, bits in bits per byte.

    Raises:
        ConfigError: fewer than 2 trials, a span under 1 byte or not shorter than the context, a
            cue not shorter than the span, a distance under the span or past ``n - m``, a text
            file shorter than one window, a data set that is not text, or a model that is not a
            byte-level causal LM; CheckpointError / HubError: the model cannot be loaded;
            DataNotFoundError: the data set is not found.
    """
    import torch

    _check_settings(span, cue, trials, distances)
    if isinstance(source, torch.nn.Module):
        model, name = source, type(source).__name__
    else:
        from zoo.loading import load_task
        from zoo.tasks import CausalLM

        model, name = load_task(source, CausalLM).model, str(source)
    n = _byte_lm(model, name)
    if span >= n:
        raise ConfigError(f"span={span} does not fit the model's context of {n:,} bytes")
    distances = tuple(sorted(set(distances))) if distances else default_distances(n, span)
    if not distances:
        raise ConfigError(
            f"no distance fits a span of {span} bytes twice in the context of {n:,} bytes "
            f"(span <= d <= n - span = {n - span:,}): use a span of at most {n // 2}"
        )
    if distances[-1] > n - span:
        raise ConfigError(
            f"distance {distances[-1]:,} is past the model's context of {n:,} bytes: the first "
            f"copy must start inside the window, d <= n - span = {n - span:,}"
        )
    docs = _documents(n, dataset, split, text_file, data_dir)
    windows, where, spans = _draw(docs, n, span, trials, seed)
    model = model.float().to(device).eval()
    control, repeat = _score(model, windows, spans, distances, cue, batch_size, device, progress)
    gains = control[None, :] - repeat  # (D, trials) paired
    half = t_critical(trials - 1) * gains.std(1) / math.sqrt(trials)
    return CopyProbe(
        source=name,
        dataset=None if text_file is not None else dataset,
        split=None if text_file is not None else split,
        text_file=None if text_file is None else str(text_file),
        max_seq_len=n,
        span=span,
        cue=cue,
        trials=trials,
        seed=seed,
        distances=distances,
        repeat=_rounded(repeat.mean(1)),
        control=round(float(control.mean()), 5),
        gain=_rounded(gains.mean(1)),
        gain_low=_rounded(gains.mean(1) - half),
        gain_high=_rounded(gains.mean(1) + half),
        windows=where,
        trial_control=_rounded(control),
        trial_repeat=tuple(_rounded(row) for row in repeat),
    )


def gain_metric(probe: CopyProbe, distance: int, *, hardware: str | None = None,
                date: str | None = None) -> Metric:  # fmt: skip
    """The registry's ``copy_gain`` :class:`~zoo.hub.schema.Metric` of ``probe`` at
    ``distance``: its gain in bits per byte, measured in fp32 on ``probe.trials`` windows.

    Raises:
        ConfigError: ``probe`` did not measure ``distance``, or was measured on a text file.
    """
    from zoo.hub.schema import Metric

    if distance not in probe.distances or probe.text_file is not None:
        raise ConfigError(
            f"copy_gain at d = {distance} needs a probe of a data set's split that measured it "
            f"(this one: {probe.text}, distances {list(probe.distances)})"
        )
    return Metric(
        name="copy_gain",
        value=probe.gain[probe.distances.index(distance)],
        dataset=probe.dataset,
        split=probe.split,
        windows=probe.trials,
        targets=probe.trials * (probe.span - probe.cue),
        precision="32-true",
        context=probe.max_seq_len,
        hardware=hardware,
        date=date,
        probe={"distance": distance, "span": probe.span, "cue": probe.cue, "seed": probe.seed},
    )


def copy_gain(source, *, distance: int, device: str | None = None, **settings) -> Metric:
    """Measure the copy probe at ``distance`` alone on ``source`` (``settings``: the other
    arguments of :func:`copy_probe`: dataset, split, span, cue, trials, seed, data_dir, ...) and
    return it as a ``copy_gain`` metric (:func:`gain_metric`), with this machine's hardware and
    today's date. ``device``: default a CUDA GPU when there is one, else the CPU."""
    import datetime

    import torch

    from zoo.lineage import device_name

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    probe = copy_probe(source, distances=(distance,), device=device, **settings)
    on = f"1 x {device_name(device)}" if device.startswith("cuda") else device_name("cpu")
    return gain_metric(probe, distance, hardware=on, date=datetime.date.today().isoformat())


def _rounded(values) -> tuple[float, ...]:
    return tuple(round(float(v), 5) for v in values)


def _score(model, windows, spans, distances, cue, batch_size, device, progress):
    """Bits per byte of every trial's control ``(trials,)`` and repeats ``(D, trials)``, float64:
    the mean NLL of targets ``q + cue .. n - 1``, from the logits at ``q + cue - 1 .. n - 2``."""
    import torch
    import torch.nn.functional as F
    from rich.progress import Progress

    trials, n = windows.shape
    q = n - spans.shape[1]
    jobs = [(t, j) for t in range(trials) for j in (-1, *range(len(distances)))]  # -1: control
    per_pass = batch_size or max(1, 16_384 // n)
    bits = torch.zeros(len(distances) + 1, trials, dtype=torch.float64)  # row 0: control
    with torch.no_grad(), Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"copy probe ({trials} trials, {len(distances)} distances)",
                            total=len(jobs))  # fmt: skip
        for i in range(0, len(jobs), per_pass):
            batch = jobs[i : i + per_pass]
            x = torch.stack([copy_inputs(windows[t], spans[t], None if j < 0 else distances[j])
                             for t, j in batch]).to(device)  # fmt: skip  # (B, n)
            logits = model(x).logits[:, q + cue - 1 : n - 1].float()  # (B, m - k, V)
            nll = F.cross_entropy(logits.transpose(1, 2), x[:, q + cue :], reduction="none")
            per_window = nll.double().mean(1).cpu() / math.log(2)  # (B,) bits per byte
            for (t, j), b in zip(batch, per_window, strict=True):
                bits[j + 1, t] = b
            bar.advance(task, len(batch))
    return bits[0], bits[1:]


def _describe(p: CopyProbe) -> str:
    return (
        f"Zero-shot retrieval (copy probe): `{p.source}` on {p.trials} windows of {p.max_seq_len:,} "
        f"bytes of {p.text} (seed {p.seed}). In each, a span of {p.span} random lowercase letters "
        f"is written at the window's end and, for the repeat, also d bytes earlier (d: between the "
        f"starts of the copies); the control has it only at the end. Bits per byte on the span's "
        f"last {p.span - p.cue} bytes (after a {p.cue}-byte cue). Gain = control − repeat, with a "
        f"95% Student-t interval over the {p.trials} trials' paired gains."
    )


def copy_probe_table(probe: CopyProbe) -> str:
    """``probe`` as markdown: what was measured, then one row per distance."""
    p = probe
    lines = [
        _describe(p),
        "",
        "| distance d | repeat bits/byte | control bits/byte | gain | 95% interval |",
        "|---|---|---|---|---|",
    ]
    for i, d in enumerate(p.distances):
        lines.append(
            f"| {d:,} | {p.repeat[i]:.4f} | {p.control:.4f} | {p.gain[i]:+.4f} | "
            f"[{p.gain_low[i]:+.4f}, {p.gain_high[i]:+.4f}] |"
        )
    return "\n".join(lines) + "\n"


def copy_probe_rich_table(probe: CopyProbe):
    """``probe`` as a :class:`rich.table.Table` for the terminal."""
    from rich.table import Table

    p = probe
    table = Table(
        title=f"{p.source}: copy probe on {p.text} ({p.trials} windows of {p.max_seq_len:,} bytes, "
        f"span {p.span}, cue {p.cue}; bits per byte on the span's last {p.span - p.cue} bytes)"
    )
    for col in ("distance d", "repeat", "control", "gain", "95% interval (t)"):
        table.add_column(col, justify="right", no_wrap=True)
    for i, d in enumerate(p.distances):
        table.add_row(f"{d:,}", f"{p.repeat[i]:.4f}", f"{p.control:.4f}", f"{p.gain[i]:+.4f}",
                      f"[{p.gain_low[i]:+.4f}, {p.gain_high[i]:+.4f}]")  # fmt: skip
    return table


def save_copy_probe(
    probe: CopyProbe, out_dir: str | os.PathLike, *, label: str | None = None
) -> list[Path]:
    """Write ``copy_probe.md`` (:func:`copy_probe_table`), ``copy_probe.json`` and
    ``copy_probe.png`` (:func:`plot_copy_probe`) into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js, png = (out / f for f in COPY_PROBE_FILES)
    md.write_text(copy_probe_table(probe))
    js.write_text(probe.to_json())
    plot_copy_probe(probe, png, label=label)
    return [md, js, png]
