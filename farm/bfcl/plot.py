"""Accuracy against request size, one line per mode, the measured horizon marked: the PNG of
``bench/bfcl_history.py --plot`` and of ``vak farm report`` for the ``bfcl_history`` and ``bfcl_degrade``
tasks (issue 36 items 2 and 4).

A point is (mode, request size in tokens, passed). Points are binned by size (bins of :func:`bin_width`
tokens); each bin with points is drawn at its mean size, its accuracy with the Wilson 95% interval as an
error bar, and the number of points beside it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vak_context.extras import pyplot

Point = tuple[str, int, bool]


def bin_width(points: Sequence[Point], horizon: int | None) -> int:
    """A quarter of the horizon (so that the bins meet at it), else a tenth of the largest size; at least 250."""
    if horizon:
        return max(250, horizon // 4)
    return max(250, max((p[1] for p in points), default=0) // 10)


def binned(points: Sequence[Point], width: int) -> dict[str, list[tuple[float, int, int]]]:
    """Per mode, per bin with points: (mean size, passed, n), in size order."""
    from collections import defaultdict

    bins: dict[str, dict[int, list[Point]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        bins[p[0]][p[1] // width].append(p)
    return {mode: [(sum(p[1] for p in ps) / len(ps), sum(p[2] for p in ps), len(ps))
                   for _, ps in sorted(by.items())] for mode, by in bins.items()}


def plot(runs: Sequence[Any], horizon: int | None, path: Path, *, title: str = "") -> Path:
    """``runs`` (anything with ``mode``, ``size`` and ``verdict.valid``) drawn to ``path``; a run whose request
    the server refused before counting it (size 0) has no place on the size axis and is left out (the
    table counts it, on its own line)."""
    return plot_points([(r.mode, r.size, bool(r.verdict.valid)) for r in runs if r.size], horizon, path, title=title)


def plot_points(points: Sequence[Point], horizon: int | None, path: Path, *, title: str = "",
                xlabel: str = "request size (prompt tokens of the checked request)") -> Path:
    from vak_context.farm.bfcl.history import wilson

    plt = pyplot("the accuracy-by-request-size PNG")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for mode, cells in sorted(binned(points, bin_width(points, horizon)).items()):
        xs = [c[0] for c in cells]
        ys = [c[1] / c[2] for c in cells]
        lows = [max(0.0, y - wilson(c[1], c[2])[0]) for y, c in zip(ys, cells, strict=True)]
        highs = [max(0.0, wilson(c[1], c[2])[1] - y) for y, c in zip(ys, cells, strict=True)]
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-", capsize=3, label=mode)
        for x, y, c in zip(xs, ys, cells, strict=True):
            ax.annotate(str(c[2]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if horizon:
        ax.axvline(horizon, color="black", linestyle=":", linewidth=1)
        ax.annotate(f"measured horizon {horizon:,}", (horizon, 1.04), fontsize=8, ha="center")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("accuracy (BFCL's checker; bars: Wilson 95%)")
    ax.set_ylim(-0.05, 1.12)
    ax.set_title(textwrap.fill(title or "accuracy against request size", 100), fontsize=8)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
