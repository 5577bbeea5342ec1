"""`routedvlm audit report LOG`: the history of an audit log, replayed through the same `AuditMonitor` the server
ran (same alpha, delta and epochs, gold applied where it arrived), printed and drawn (the bound against alpha over
the audits, matplotlib PNG).
"""
from __future__ import annotations

import logging

import pandas as pd

from routedvlm.errors import InputError, LabelsError
from routedvlm.inference.audit.bounds import lower_bound, upper_bound
from routedvlm.inference.audit.monitor import AuditMonitor

from .log import read_log


def replay(df: pd.DataFrame) -> tuple[AuditMonitor, pd.DataFrame]:
    """(the monitor after every record, one history row per record: audits, bounds, status)."""
    audits = df[df["kind"] == "audit"]
    if audits.empty:
        raise LabelsError("The audit log holds no audits yet; serve with --audit-rate and come back later.")
    first = audits.iloc[0]
    window = int(first["window"]) if "window" in df and pd.notna(first.get("window")) else 0
    delta = float(first["delta"]) if "delta" in df and pd.notna(first.get("delta")) else 0.05
    mon = AuditMonitor(alpha=float(first["alpha"]), reference=str(first["reference"]), router=str(first["router"]),
                       delta=delta, window=window)
    rows = []
    quiet = logging.getLogger("routedvlm.inference.audit.monitor")
    level, quiet.level = quiet.level, logging.ERROR  # the replay's status changes are printed, not logged
    try:
        for rec in df.itertuples(index=False):
            if rec.kind == "audit":
                mon.record(rec.request_id, bool(rec.agree), when=float(rec.time))
            elif rec.kind == "feedback":
                try:
                    mon.feedback(rec.request_id, bool(rec.reference_correct) and not bool(rec.routed_correct),
                                 when=float(rec.time))
                except InputError:  # gold for an audit not in the log (lost unflushed, or refused live): not counted
                    continue
            h = mon.history[-1]
            rows.append({**h, "upper": upper_bound(h["upper_sum"], h["epoch_audits"], h["level"]),
                         "lower": lower_bound(h["lower_sum"], h["epoch_audits"], h["level"]), "kind": rec.kind})
    finally:
        quiet.level = level
    return mon, pd.DataFrame(rows)


def text_report(mon: AuditMonitor, hist: pd.DataFrame, every: int = 0) -> str:
    """The status changes (and every `every`-th audit), then the final statement."""
    lines = [f"router {mon.router}: regret vs {mon.reference} must stay <= alpha = {mon.alpha:.4f} "
             f"(delta {mon.delta:g}, epochs of {mon.window or 'all'} audits)",
             f"{'audits':>7} {'epoch':>5} {'disagree':>8} {'gold':>5} {'upper':>7} {'lower':>7}  status"]
    changed = hist["status"].ne(hist["status"].shift())
    pick = changed | (hist["audits"] % every == 0 if every else False) | (hist.index == len(hist) - 1)
    for r in hist[pick].itertuples():
        lines.append(f"{r.audits:>7} {r.epoch:>5} {r.disagreements:>8} {r.gold:>5} {r.upper:>7.4f} {r.lower:>7.4f}  {r.status}")
    snap = mon.snapshot()
    lines.append(f"now: {snap['status']} after {snap['audits']} audits ({snap['skipped']} skipped); upper bound on the "
                 f"{snap['bound_on']} rate {snap['upper_bound']:.4f}, lower bound on the regret {snap['lower_bound']:.4f}")
    return "\n".join(lines)


def plot(mon: AuditMonitor, hist: pd.DataFrame, out) -> str:
    """The bounds and alpha against the number of audits, statuses shaded; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    x = hist["audits"]
    ax.plot(x, hist["upper"], label="upper bound (regret; disagreement until gold)", color="tab:blue")
    ax.plot(x, hist["lower"], label="lower bound (regret, from gold)", color="tab:orange")
    ax.axhline(mon.alpha, color="black", linestyle="--", label=f"alpha = {mon.alpha:.3f}")
    colours = {"holding": "tab:green", "violated": "tab:red"}
    for status, colour in colours.items():
        ax.fill_between(x, 0, 1, where=hist["status"].eq(status), color=colour, alpha=0.12, step="post",
                        transform=ax.get_xaxis_transform(), label=status)
    ax.set_xlabel("audits")
    ax.set_ylabel("rate")
    ax.set_ylim(0, min(1.0, max(0.05, float(hist["upper"].quantile(0.9)) * 1.3, mon.alpha * 2)))
    ax.set_title(f"{mon.router}: live audit vs {mon.reference}")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return str(out)


def report(path, png=None, every: int = 0) -> str:
    mon, hist = replay(read_log(path))
    text = text_report(mon, hist, every)
    if png is not None:
        text += f"\nplot: {plot(mon, hist, png)}"
    return text
