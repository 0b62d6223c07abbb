"""The optional sections of a model card, one per measured file shipped beside it: bits per byte
by position and by context length, the copy probe's retrieval by distance, a translation model's
attention over the source, image samples, and time and memory by sequence length (``zoo bench``).

A card stands alone, on the Hub as in the repository: :func:`standalone` takes out what only
makes sense in a clone of the zoo (a ``docs/`` page, a research log's section) and the date of
a measuring session, so that the text copied into a card from the files it shows reads without
them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zoo.hub.schema import Metric

__all__ = [
    "attention_section",
    "bench_section",
    "by_context_section",
    "by_position_section",
    "copy_probe_section",
    "samples_section",
    "standalone",
]

_PAGE = r"docs/[\w./#-]+(?:\s*§\s*[\w.]+)?"  # a docs page, with a log section number if any
_IN_PARENTHESES = re.compile(rf"\s*\((?:see )?{_PAGE}\)")  # "... them (docs/x.md §11b)"
_AFTER_COMMA = re.compile(rf",\s*{_PAGE}")  # "(they stall training, docs/images.md)"
_SESSION_DATE = re.compile(r"; \d{4}-\d{2}-\d{2}\.$", re.MULTILINE)  # bench.md's "...; 2026-11-24."


def standalone(text: str) -> str:
    """``text`` without references to the zoo's ``docs/`` pages (they are not beside a card on the
    Hub) or to a research log's section numbers, and without a measuring session's date at the
    end of a line (``"warm-up; 2026-11-24."`` -> ``"warm-up."``)."""
    text = _IN_PARENTHESES.sub("", text)
    text = _AFTER_COMMA.sub("", text)
    return _SESSION_DATE.sub(".", text)


def bench_section(name: str, table: str | None, plot: str | None) -> str:
    """Time and memory by sequence length: ``table`` is ``bench.md``'s text (its ``# title`` line
    becomes the lead), ``plot`` the PNG beside the card."""
    if table is None:
        return ""
    lines = table.strip().splitlines()
    title = lines[0].removeprefix("# ").strip() if lines and lines[0].startswith("#") else ""
    body = "\n".join(lines[1:] if title else lines).strip()
    parts = [
        "\n## Speed and memory by sequence length\n",
        f"{title}, measured with `zoo bench {name}` (`bench.json` has the numbers). Run it on your "
        "machine to see yours.\n",
    ]
    if plot is not None:
        parts.append(f"![time and memory by sequence length]({plot})\n")
    parts.append(body + "\n")
    return "\n".join(parts)


def samples_section(name: str, samples: list[str]) -> str:
    """An image model's samples and completions (PNG paths relative to the card)."""
    if not samples:
        return ""
    pictures = "\n\n".join(f"![{Path(p).stem.replace('_', ' ')}]({p})" for p in samples)
    return (
        "\n## Samples\n\n"
        f"Drawn with `zoo sample --checkpoint {name} --out samples.png --num-samples 8 "
        "--completions 8 --seed 0` (temperature 1.0). Completions keep the top half of test "
        "images; their rows are the given half, the completion, the original.\n\n"
        f"{pictures}\n"
    )


def by_position_section(name: str, table: str | None, plot: str | None) -> str:
    return _curve_section(
        "Bits per byte by position",
        "Does the model use its context? Bits per byte at each position of the evaluation "
        f"window, measured with `zoo evaluate {name} --by-position` (`by_position.json` has the "
        "numbers):",
        "bits per byte by position in the window",
        table,
        plot,
    )


def by_context_section(command: str, table: str | None, plot: str | None) -> str:
    return _curve_section(
        "Bits per byte by context length",
        "Each bucket of the curve above holds other bytes of the books, so its level moves with the "
        "text as well as with the context. Here one fixed set of bytes is scored again with windows "
        "of each context length, so a difference between two rows is what the extra context is "
        f"worth to the model. Measured with `{command}` (`by_context.json` has every block's bits, "
        "for paired comparisons):",
        "bits per byte of the same bytes by context length",
        table,
        plot,
    )


def copy_probe_section(
    name: str, command: str, table: str | None, plot: str | None, metrics: list[Metric]
) -> str:
    registered = next((m for m in metrics if m.name == "copy_gain" and m.probe), None)
    lead = (
        "Does the model copy from far back in its context? A span of random lowercase letters (or "
        "of each kind the table names: other alphabets, natural text from elsewhere) is written "
        "at the end of a window of held-out text and again d bytes earlier. The gain is "
        "how many bits per byte below the control (the same window without the first copy) the "
        "model scores the span's bytes after the cue: about 0 means it does not copy from that far "
        f"back, a model that copies saves nearly all of the control. Measured with `{command}` "
        "(`copy_probe.json` has every trial's bits and window)."
    )
    if registered is not None:
        lead += (
            f" The registered `copy_gain` (Results) is the gain at d = "
            f"{registered.probe['distance']:,}; `zoo evaluate {name} --registered --metric "
            "copy_gain` re-measures it."
        )
    return _curve_section("Retrieval at a distance (copy probe)", lead,
                          "retrieval gain by distance (copy probe)", table, plot)  # fmt: skip


def attention_section(profile: Any) -> str:
    """A translation model's attention over the source (``attention.md`` / ``.png``)."""
    if profile is None:
        return ""
    lead = (f"How much of the source the model attends to ({profile.mapping}): the support of a "
            "target token is the number of source tokens with non-zero weight (a softmax keeps "
            f"all, a sparse mapping few), teacher-forced on the {profile.split} references. The "
            f"picture is line {profile.line} as the model translates it: darker = more attention, "
            f"white = exactly zero. Measured with `{profile.command()}`.")  # fmt: skip
    return _curve_section("Attention over the source", lead, "attention map of one sentence",
                          profile.text(), "attention.png")  # fmt: skip


def _curve_section(heading: str, lead: str, alt: str, table: str | None, plot: str | None) -> str:
    """A card section: heading, a lead paragraph, the plot (if any), the markdown table (if any)."""
    if table is None and plot is None:
        return ""
    parts = [f"\n## {heading}\n", f"{lead}\n"]
    if plot is not None:
        parts.append(f"![{alt}]({plot})\n")
    if table is not None:
        parts.append(table.strip() + "\n")
    return "\n".join(parts)
