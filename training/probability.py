"""How good are the router's probabilities? Per candidate strategy, on the test rows: the Brier score of
P(correct), the base-rate Brier (always predicting the training accuracy: a model must beat it), the mean predicted
vs the observed accuracy, and a 10-bin reliability table (mean predicted, observed, rows per bin), which
`plot_reliability` draws. Nothing here changes a decision; it is reported in evaluation.json and the table.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

BINS = 10


def probability_report(proba: pd.DataFrame, test: pd.DataFrame, train: pd.DataFrame | None = None) -> dict:
    """{strategy: {brier, brier_base_rate, auroc, mean_p, accuracy, reliability: [[mean_p, observed, n], ...]}}
    (`auroc`: how well P(correct) ranks the strategy's right answers above its wrong ones; None when the test rows
    hold only one of the two)."""
    out = {}
    for s in proba.columns:
        p = proba[s].to_numpy(dtype=float)
        y = test[f"correct__{s}"].to_numpy(dtype=bool).astype(float)
        base = float((train if train is not None else test)[f"correct__{s}"].mean())
        bins = np.minimum((p * BINS).astype(int), BINS - 1)
        table = [[float(p[bins == b].mean()), float(y[bins == b].mean()), int((bins == b).sum())]
                 for b in range(BINS) if (bins == b).any()]
        out[s] = {"brier": float(np.mean((p - y) ** 2)), "brier_base_rate": float(np.mean((base - y) ** 2)),
                  "auroc": auroc(p, y),
                  "mean_p": float(p.mean()), "accuracy": float(y.mean()), "reliability": table}
    return out


def auroc(p: np.ndarray, y: np.ndarray) -> float | None:
    """The area under the ROC curve of scores `p` for 0/1 outcomes `y` (ties count half); None for one class."""
    from scipy.stats import rankdata

    pos = y > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return None
    ranks = rankdata(p)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def summary_line(report: dict) -> str:
    """One line for the evaluation table: mean Brier vs the base rate's, and the worst over-confidence."""
    if not report:
        return "probabilities: -"
    brier = np.mean([r["brier"] for r in report.values()])
    base = np.mean([r["brier_base_rate"] for r in report.values()])
    worst = max(report.items(), key=lambda kv: kv[1]["mean_p"] - kv[1]["accuracy"])
    aucs = [r["auroc"] for r in report.values() if r.get("auroc") is not None]
    auc = f", mean AUROC {np.mean(aucs):.3f}" if aucs else ""
    return (f"probabilities on test: mean Brier {brier:.4f} (base rate {base:.4f}){auc} over {len(report)} strategies; "
            f"most over-confident {worst[0]}: mean P {worst[1]['mean_p']:.3f} vs accuracy {worst[1]['accuracy']:.3f}")


def plot_reliability(report: dict, path) -> Path:
    """A reliability diagram (observed accuracy vs mean predicted P per bin, one line per strategy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 5.5), dpi=110)
    ax.plot([0, 1], [0, 1], "--", color="gray", lw=1, label="perfectly calibrated")
    for s, r in report.items():
        t = np.asarray(r["reliability"], dtype=float).reshape(-1, 3)
        ax.plot(t[:, 0], t[:, 1], "o-", ms=3, lw=1, label=f"{s} (Brier {r['brier']:.3f})")
    ax.set_xlabel("mean predicted P(correct) in the bin")
    ax.set_ylabel("observed accuracy in the bin (test split)")
    ax.set_title("reliability of the router's P(correct)")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
