"""Figures for the bench reports (matplotlib, drawn to PNG files without a display): where a reader
would rather look than read a table. Each function takes what its report already computed."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ratio_chart(path: Path, title: str, rows: list[tuple[str, float, float, float]]) -> None:
    """B/A per metric as horizontal bars, each round's spread as a whisker, 1.0 marked.
    `rows`: (metric, median ratio, lowest round, highest round)."""
    plt = _pyplot()
    rows = [r for r in rows if r[1] == r[1] and r[1] > 0]  # no NaN, no zero
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(rows) + 1.4))
    clip = (0.25, 4.0)  # a log scale, clipped: one wild round must not flatten the rest

    def c(x: float) -> float:
        return min(max(x, clip[0]), clip[1])

    names = [r[0] for r in rows]
    ratios = [c(r[1]) for r in rows]
    lo = [c(r[1]) - c(r[2]) for r in rows]
    hi = [c(r[3]) - c(r[1]) for r in rows]
    colors = ["#4c72b0" if abs(r - 1) <= 0.05 else "#dd8452" for r in ratios]
    ax.scatter(ratios, names, color=colors, zorder=3)
    ax.errorbar(ratios, names, xerr=[lo, hi], fmt="none", ecolor="gray", capsize=2)
    ax.set_xscale("log")
    ax.set_xlim(*clip)
    ax.set_xticks([0.25, 0.5, 1, 2, 4], ["1/4", "1/2", "1", "2", "4"])
    ax.minorticks_off()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel(
        "B / A, log scale clipped to [1/4, 4] (median of rounds; bars: lowest to highest round)"
    )
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def grouped_bars(
    path: Path, title: str, groups: list[str], series: dict[str, list[float]], xlabel: str
) -> None:
    """One group of horizontal bars per entry of `groups`, one bar per series (e.g. a broker)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(groups) * max(len(series), 1) / 2 + 1.5))
    height = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        ys = [g + i * height for g in range(len(groups))]
        ax.barh(ys, values, height=height, label=name)
    ax.set_yticks([g + 0.4 - height / 2 for g in range(len(groups))], groups, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
