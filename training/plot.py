"""The accuracy-latency plot: the learned policy's tau sweep as a curve, every baseline as a labelled point."""
from __future__ import annotations

from pathlib import Path

MARKERS = {"single": "o", "oracle": "*", "baseline": "s", "learned": "D"}


def plot_curve(evaluation: dict, path) -> Path:
    """Write a PNG (matplotlib Agg backend) of `evaluation["curve"]` and `evaluation["rows"]`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    curve = sorted(evaluation["curve"], key=lambda p: p["mean_latency_ms"])
    ax.plot([p["mean_latency_ms"] for p in curve], [p["accuracy"] for p in curve], "-", color="tab:blue",
            alpha=0.7, label=f"learned policy, sweeping tau (AUC {evaluation['auc']:.3f})")
    for row in evaluation["rows"]:
        kind = row["kind"]
        color = {"learned": "tab:blue", "oracle": "tab:green", "baseline": "tab:red"}.get(kind, "tab:gray")
        ax.scatter(row["mean_latency_ms"], row["accuracy"], marker=MARKERS.get(kind, "o"), color=color, zorder=3)
        ax.annotate(row["name"], (row["mean_latency_ms"], row["accuracy"]), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    if evaluation["target"]["kind"] == "accuracy":
        ax.axhline(evaluation["required_test"], color="tab:orange", ls="--", lw=1, label="accuracy target (test)")
    else:
        ax.axvline(evaluation["target"]["value"], color="tab:orange", ls="--", lw=1, label="latency budget")
    ax.set_xscale("log")
    ax.set_xlabel("mean realized latency per sample (ms, log scale)")
    ax.set_ylabel("accuracy (test split)")
    ax.set_title(f"routedvlm train-router: {evaluation['mode']} policy vs baselines")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
