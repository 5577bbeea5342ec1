"""The accuracy-latency plot: every parameterised rule swept as a curve, every baseline and the chosen policy as a
labelled point."""
from __future__ import annotations

import itertools
from pathlib import Path

MARKERS = {"single": "o", "oracle": "*", "baseline": "s", "rule": "^", "learned": "D"}
CURVE_COLORS = {"tau": "tab:blue", "lagrangian": "tab:purple", "binary": "tab:green"}


def plot_curve(evaluation: dict, path, *, title: str | None = None, split: str = "test split") -> Path:
    """Write a PNG (matplotlib Agg backend) of `evaluation["curve"]` and `evaluation["rows"]`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11.5, 5.5), dpi=110)
    for chain, points in evaluation.get("curves", {}).items():
        curve = sorted(points, key=lambda p: p["mean_latency_ms"])
        ax.plot([p["mean_latency_ms"] for p in curve], [p["accuracy"] for p in curve], "-", alpha=0.6,
                color=CURVE_COLORS.get(chain, "tab:gray"),
                label=f"{chain} rule, whole parameter sweep (area {evaluation['auc'][chain]:.3f})")
    colors = itertools.cycle(plt.get_cmap("tab20").colors)
    for row in evaluation["rows"]:
        x, y, kind = row["mean_latency_ms"], row["accuracy"], row["kind"]
        if kind == "single":  # single strategies: grey dots, labelled in place
            ax.scatter(x, y, marker="o", color="tab:gray", zorder=3)
            ax.annotate(row["name"], (x, y), fontsize=7, color="dimgray", xytext=(4, -9), textcoords="offset points")
        else:  # oracle, baselines and the learned policy: distinct colours, named in the legend
            color = "black" if kind == "learned" else next(colors)
            ax.scatter(x, y, marker=MARKERS.get(kind, "o"), s=60 if kind != "oracle" else 140, color=color,
                       edgecolors="black", linewidths=0.5, zorder=4, label=f"{row['name']}: {y:.3f}, {x:.0f} ms")
    if evaluation.get("required_test") is not None:
        ax.axhline(evaluation["required_test"], color="tab:orange", ls="--", lw=1, label=f"accuracy target ({split})")
    else:
        ax.axvline(evaluation["target"]["value"], color="tab:orange", ls="--", lw=1, label="latency budget")
    ax.set_xscale("log")
    ax.set_xlabel("mean realized latency per sample (ms, log scale)")
    ax.set_ylabel(f"accuracy ({split})")
    ax.set_title(title or f"routedvlm train-router: {evaluation['mode']} policy vs baselines")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
