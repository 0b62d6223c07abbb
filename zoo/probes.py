"""Zero-shot retrieval by distance: the copy probe (``zoo evaluate SOURCE --probe copy``).

Average bits per byte hardly sees far context: few bytes of a book have a copy source more than a
few hundred bytes back (docs/bench/copy_distance_pg19mini.md), so a model that retrieves them
cannot show it there. This probe plants one, in the style of the induction-head and
associative-recall tests (Olsson et al. 2022, "In-context Learning and Induction Heads"; Arora et
al. 2023, "Zoology", §3), on real text and without training:

- a trial is a window of ``n = max_seq_len`` bytes of held-out text (a split of the model's data
  set, or a file), drawn from the seed, and a span of ``m`` bytes of the span kind, drawn from the
  seed: random lowercase letters (the default), uppercase letters, digits, printable ASCII, bytes
  1-255, or natural text from elsewhere in the held-out text (:mod:`zoo.data.span_kinds`);
- the span is written at the window's end, ``q = n - m``; for distance ``d`` the same span is also
  written at ``p = q - d`` (``d``: the distance between the starts of the two copies, so
  ``m <= d <= n - m``: the copies do not overlap and both lie in the window);
- the model's bits per byte are scored on the second copy's bytes after its first ``k`` (the
  cue), targets ``q + k .. n - 1``, once with the first copy (the *repeat*) and once without it
  (the *control*: the text at ``p`` as it was; it does not depend on ``d``, so it is computed once
  per trial);
- the retrieval gain is ``control - repeat`` in bits per byte, with a two-sided 95% Student-t
  interval over the trials' paired gains (``mean ± t(0.975, trials - 1) · s / sqrt(trials)``).

The windows and spans depend on the seed, the context, the span and its kind alone, not on the
distances nor on the other kinds measured, so the gain at one distance is the same whichever other
distances or kinds are measured with it. That is what the registry's ``copy_gain`` metric relies
on (:func:`copy_gain`: one distance of ``letters``, re-measured by ``zoo evaluate NAME
--registered``). Several kinds in one run share the windows (:class:`CopyProbes`, side by side in
the tables and the plot).

A model that copies from its context scores the repeat near 0 bits; one that does not scores it as
the control. The windows of one book may overlap, so read the interval as a lower bound on the
uncertainty. The model runs in fp32, in eval mode, the trials batched in forward passes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from zoo.drawing import plot_copy_probe
from zoo.errors import ConfigError
from zoo.profiles import (
    COPY_PROBE_FILES,
    CopyProbe,
    CopyProbes,
    default_distances,
    load_copy_probe,
)

if TYPE_CHECKING:
    from zoo.hub.schema import Metric

# CopyProbe, its reader and defaults live in zoo.profiles with the other profiles; named here too
__all__ = [
    "COPY_PROBE_FILES",
    "CopyProbe",
    "CopyProbes",
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
    span_kind: str | Sequence[str] = "letters",
    batch_size: int | None = None,
    data_dir: str | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> CopyProbe | CopyProbes:
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
        span_kind: what the span is made of (:data:`SPAN_KINDS`): ``letters`` (the default),
            ``uppercase``, ``digits``, ``printable``, ``bytes`` or ``text``; or several, measured
            on the same windows.
        batch_size: windows per forward pass (default ``16,384 // max_seq_len``, at least 1).
        device: where the model runs.

    Returns:
        A :class:`CopyProbe` for one kind, a :class:`CopyProbes` (one per kind, in the order
        given) for several; bits in bits per byte.

    Raises:
        ConfigError: fewer than 2 trials, a span under 1 byte or not shorter than the context, a
            cue not shorter than the span, a distance under the span or past ``n - m``, an
            unknown span kind, a text file shorter than one window (or, for ``text`` spans, with
            no room for one outside a window), a data set that is not text, or a model that is
            not a byte-level causal LM; CheckpointError / HubError: the model cannot be loaded;
            DataNotFoundError: the data set is not found.
    """
    from zoo.data.span_kinds import documents, draw_spans, draw_windows, span_kinds

    kinds = span_kinds(span_kind)
    _check_settings(span, cue, trials, distances)
    model, name = _model(source)
    n = _byte_lm(model, name)
    distances = _distances(n, span, distances)
    docs = documents(n, dataset, split, text_file, data_dir)
    windows, where, rng = draw_windows(docs, n, trials, seed)
    spans = {k: draw_spans(k, rng, docs, where, n, span, seed) for k in kinds}
    model = model.float().to(device).eval()
    shared = dict(
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
        windows=where,
    )
    probes = [_measured(model, windows, spans[k], k, batch_size, device, progress, **shared)
              for k in kinds]  # fmt: skip
    return probes[0] if len(probes) == 1 else CopyProbes(tuple(probes))


def _measured(model, texts, spans, kind, batch_size, device, progress, **shared) -> CopyProbe:
    """The :class:`CopyProbe` of spans ``spans`` of ``kind`` in the windows ``texts`` (the
    ``shared`` fields: the settings): score them, then the paired gains and t-intervals."""
    trials, distances = shared["trials"], shared["distances"]
    control, repeat = _score(model, texts, spans, distances, shared["cue"], batch_size, device,
                             progress, kind)  # fmt: skip
    gains = control[None, :] - repeat  # (D, trials) paired
    half = t_critical(trials - 1) * gains.std(1) / math.sqrt(trials)
    return CopyProbe(
        repeat=_rounded(repeat.mean(1)),
        control=round(float(control.mean()), 5),
        gain=_rounded(gains.mean(1)),
        gain_low=_rounded(gains.mean(1) - half),
        gain_high=_rounded(gains.mean(1) + half),
        span_kind=kind,
        trial_control=_rounded(control),
        trial_repeat=tuple(_rounded(row) for row in repeat),
        **shared,
    )


def _model(source):
    """``(model, name)`` of ``source``: a module as it is, else loaded as a causal LM."""
    import torch

    if isinstance(source, torch.nn.Module):
        return source, type(source).__name__
    from zoo.loading import load_task
    from zoo.tasks import CausalLM

    return load_task(source, CausalLM).model, str(source)


def _distances(n: int, span: int, distances) -> tuple[int, ...]:
    """The distances to measure, sorted (default :func:`default_distances`), checked against the
    context ``n``."""
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
    return distances


def gain_metric(probe: CopyProbe | CopyProbes, distance: int, *, hardware: str | None = None,
                date: str | None = None) -> Metric:  # fmt: skip
    """The registry's ``copy_gain`` :class:`~zoo.hub.schema.Metric` of ``probe`` at
    ``distance``: its gain in bits per byte on spans of ``letters`` (of several kinds, that one),
    measured in fp32 on ``probe.trials`` windows.

    Raises:
        ConfigError: ``probe`` did not measure ``distance`` or ``letters``, or was measured on a
            text file.
    """
    from zoo.hub.schema import Metric

    if isinstance(probe, CopyProbes) and "letters" in probe.span_kinds:
        probe = probe["letters"]
    if getattr(probe, "span_kind", None) != "letters":
        raise ConfigError(
            "copy_gain is registered on spans of random lowercase letters (span kind letters); "
            f"this probe measured {', '.join(getattr(probe, 'span_kinds', (probe.span_kind,)))}"
        )
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

    from zoo.data.span_kinds import span_kinds
    from zoo.lineage import device_name

    if span_kinds(settings.get("span_kind", "letters")) != ("letters",):
        raise ConfigError("copy_gain is registered on spans of random lowercase letters alone "
                          f"(span kind letters), not {settings['span_kind']!r}")  # fmt: skip
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    probe = copy_probe(source, distances=(distance,), device=device, **settings)
    on = f"1 x {device_name(device)}" if device.startswith("cuda") else device_name("cpu")
    return gain_metric(probe, distance, hardware=on, date=datetime.date.today().isoformat())


def _kinds() -> dict:
    """:data:`zoo.data.span_kinds.SPAN_KINDS`, imported when used: ``zoo.data`` brings Lightning,
    which reading or drawing a probe does not need."""
    from zoo.data.span_kinds import SPAN_KINDS

    return SPAN_KINDS


def _rounded(values) -> tuple[float, ...]:
    return tuple(round(float(v), 5) for v in values)


def _score(model, windows, spans, distances, cue, batch_size, device, progress, kind):
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
        task = bar.add_task(f"copy probe, {kind} ({trials} trials, {len(distances)} distances)",
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


def _describe(p: CopyProbe | CopyProbes) -> str:
    """What was measured, for the markdown table: one kind, or several side by side."""
    several = isinstance(p, CopyProbes)
    kind = None if several else _kinds()[p.span_kind]
    what = f"{p.span} bytes of the kind" if several else f"{p.span} {kind.phrase}"
    if several:
        note = ("Chance: a uniform guess over the kind's alphabet, without copying (natural text "
                "has none: a model that copies perfectly saves its whole control).")  # fmt: skip
    elif kind.chance is None:
        note = ("The span is natural text: the control is the model's own bits on it, all of "
                "which a model that copies perfectly saves.")  # fmt: skip
    else:
        note = f"A uniform guess over the span's alphabet, without copying, scores {kind.chance:.2f} bits."
    return (
        f"Zero-shot retrieval (copy probe){' by span kind' * several}: `{p.source}` on "
        f"{p.trials} windows of {p.max_seq_len:,} bytes of {p.text} (seed {p.seed})"
        f"{', the same windows for every kind' * several}. In each, a span of {what} is written "
        "at the window's end and, for the repeat, also d bytes earlier (d: between the starts of "
        f"the copies); the control has it only at the end. Bits per byte on the span's last "
        f"{p.span - p.cue} bytes (after a {p.cue}-byte cue). Gain = control − repeat, with a 95% "
        f"Student-t interval over the {p.trials} trials' paired gains. {note}"
    )


def copy_probe_table(probe: CopyProbe | CopyProbes) -> str:
    """``probe`` as markdown: what was measured, then one row per distance (for several kinds,
    a table of the kinds and their controls, then a column group per kind)."""
    if isinstance(probe, CopyProbes):
        return _kinds_table(probe)
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


def _kinds_table(p: CopyProbes) -> str:
    lines = [_describe(p), "", "| span kind | the span | chance bits/byte | control bits/byte |",
             "|---|---|---|---|"]  # fmt: skip
    for k in p.probes:
        chance = _kinds()[k.span_kind].chance
        lines.append(f"| {k.span_kind} | {_kinds()[k.span_kind].phrase} | "
                     f"{'—' if chance is None else f'{chance:.2f}'} | {k.control:.4f} |")  # fmt: skip
    head = "".join(f" {k} repeat | {k} gain | {k} 95% interval |" for k in p.span_kinds)
    lines += ["", f"| distance d |{head}", "|---|" + "---|---|---|" * len(p.probes)]
    for i, d in enumerate(p.distances):
        cells = "".join(f" {k.repeat[i]:.4f} | {k.gain[i]:+.4f} | "
                        f"[{k.gain_low[i]:+.4f}, {k.gain_high[i]:+.4f}] |"
                        for k in p.probes)  # fmt: skip
        lines.append(f"| {d:,} |{cells}")
    return "\n".join(lines) + "\n"


def copy_probe_rich_table(probe: CopyProbe | CopyProbes):
    """``probe`` as a :class:`rich.table.Table` for the terminal (for several kinds, a column
    per kind: the gain ± its 95% half-width; the controls and chance levels in the caption)."""
    from rich.table import Table

    p = probe
    several = isinstance(p, CopyProbes)
    what = f"span kinds {', '.join(p.span_kinds)}, " if several else (
        "" if p.span_kind == "letters" else f"span kind {p.span_kind}, ")  # fmt: skip
    table = Table(
        title=f"{p.source}: copy probe on {p.text} ({p.trials} windows of {p.max_seq_len:,} bytes, "
        f"{what}span {p.span}, cue {p.cue}; bits per byte on the span's last {p.span - p.cue} "
        "bytes)"
    )
    if not several:
        for col in ("distance d", "repeat", "control", "gain", "95% interval (t)"):
            table.add_column(col, justify="right", no_wrap=True)
        for i, d in enumerate(p.distances):
            table.add_row(f"{d:,}", f"{p.repeat[i]:.4f}", f"{p.control:.4f}", f"{p.gain[i]:+.4f}",
                          f"[{p.gain_low[i]:+.4f}, {p.gain_high[i]:+.4f}]")  # fmt: skip
        return table
    table.add_column("distance d", justify="right", no_wrap=True)
    for k in p.span_kinds:  # one column per kind: the gain and its interval's half-width
        table.add_column(f"{k}\ngain ± 95% (t)", justify="right")
    for i, d in enumerate(p.distances):
        table.add_row(f"{d:,}", *(f"{k.gain[i]:+.4f} ± {(k.gain_high[i] - k.gain_low[i]) / 2:.4f}"
                                  for k in p.probes))  # fmt: skip
    chances = [(k, _kinds()[k].chance) for k in p.span_kinds]
    table.caption = (
        "control (no first copy): "
        + ", ".join(f"{k.span_kind} {k.control:.4f}" for k in p.probes)
        + " bits/byte; chance (a uniform guess over the alphabet): "
        + ", ".join(f"{k} {c:.2f}" for k, c in chances if c is not None)
    )
    return table


def save_copy_probe(
    probe: CopyProbe | CopyProbes, out_dir: str | os.PathLike, *, label: str | None = None
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
