"""The manual's pictures, from real runs on the bundled toy labels (data/toyworld/labels.parquet), drawn by the
product's own plotting code, written small into docs/img/:

- `frontier.png`: accuracy vs mean latency of every single strategy, the oracle, mutual verification, each rule's
  parameter sweep and the certified choice (train-router's `curve.png`, `training/plot.py`: the demo draws the same
  plot as `plot.png`), for bare `train-router --no-mlflow` (cascade, target 0.95);
- `reliability.png`: the same router's reliability diagram (`training/probability.py`) for three strategies;
- `audit.png`: `routedvlm audit report --plot` (`data/audit/report.py`) of a router certified at target 0.85,
  audited on 1000 requests drawn from the labels' rows, then 600 drawn from the hard charts only (5-6 bars, where
  its regret exceeds its alpha), gold sent for each: the replay tests/training/test_audit_drift.py checks, without
  running the models (the run with the models is benchmarks/bench_audit_drift.py).

    .venv/bin/python tools/docs_figures.py   # about 20 s of CPU (two train-router runs); prints what each figure shows

Training is deterministic (seeded split, LightGBM), so a rerun on the same labels gives the same figures up to the
latencies in the labels, which do not change; the audit draws are seeded.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
RELIABILITY_STRATEGIES = ("large_direct", "transfer_8", "large_reason")
AUDIT_WINDOW = 500
SAME, HARD = 1000, 600


def labels_path() -> Path:
    from routedvlm.data.toyworld import make_labels

    return make_labels.toyworld_dir() / "labels.parquet"


def train(out: Path, target: float) -> Path:
    """Bare train-router on the bundled labels (no MLflow); returns the output folder."""
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    train_router(TrainConfig(data=str(labels_path()), no_mlflow=True, output_dir=str(out), target_accuracy=target))
    return out


def shrink(src: Path, dst: Path, colors: int = 96) -> Path:
    """Copy a matplotlib PNG as an adaptive-palette PNG (a third of the bytes; the plots have few colours)."""
    from PIL import Image

    with Image.open(src) as im:
        im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)
    return dst


def frontier_and_reliability(work: Path) -> str:
    from routedvlm.training.probability import plot_reliability

    out = train(work / "default", target=0.95)
    shrink(out / "curve.png", IMG / "frontier.png")
    evaluation = json.loads((out / "evaluation.json").read_text())
    report = {s: evaluation["probabilities"][s] for s in RELIABILITY_STRATEGIES}
    plot_reliability(report, work / "reliability.png")
    shrink(work / "reliability.png", IMG / "reliability.png")
    chosen = next(r for r in evaluation["rows"] if r["name"].startswith("chosen"))
    ref = next(r for r in evaluation["rows"] if r["name"] == "large_reason")
    bins = {s: [n for _, _, n in report[s]["reliability"]] for s in report}
    return (f"frontier.png: {chosen['name']}: accuracy {chosen['accuracy']:.3f} at "
            f"{ref['mean_latency_ms'] / chosen['mean_latency_ms']:.2f}x large_reason's speed on "
            f"{evaluation['test_rows']} test rows (target {evaluation['required_test']:.3f})\n"
            f"reliability.png: rows per bin {bins}")


def audit(work: Path) -> str:
    """Audits replayed from the labels' answers through the log format `routedvlm audit report` reads."""
    import pandas as pd

    from routedvlm.data.audit.report import plot, replay, text_report
    from routedvlm.router import load_router

    router = load_router(train(work / "audit", target=0.85) / "router")
    cert = router.policy.certificate
    df = pd.read_parquet(labels_path())
    chosen = router.choices(df)
    ref = cert["reference"]
    rows = pd.DataFrame({
        "agree": [df[f"answer__{s}"].iloc[i] == df[f"answer__{ref}"].iloc[i] for i, s in enumerate(chosen)],
        "routed_correct": [bool(df[f"correct__{s}"].iloc[i]) for i, s in enumerate(chosen)],
        "reference_correct": df[f"correct__{ref}"].astype(bool).to_numpy(),
        "bars": df["question"].str.extract(r"^(\d)")[0].astype(int)})
    stream = pd.concat([rows.sample(n=SAME, replace=True, random_state=0),
                        rows[rows["bars"] >= 5].sample(n=HARD, replace=True, random_state=1)], ignore_index=True)
    records = []
    for i, r in enumerate(stream.itertuples()):
        common = {"request_id": f"req-{i}", "time": float(i), "alpha": cert["risk_limit"], "reference": ref,
                  "router": "toy router (target 0.85)", "delta": 0.05, "window": AUDIT_WINDOW}
        records.append({**common, "kind": "audit", "agree": bool(r.agree)})
        records.append({**common, "kind": "feedback", "agree": None, "routed_correct": bool(r.routed_correct),
                        "reference_correct": bool(r.reference_correct)})
    mon, hist = replay(pd.DataFrame(records))
    plot(mon, hist, work / "audit.png")
    shrink(work / "audit.png", IMG / "audit.png")
    regret = ~stream["routed_correct"] & stream["reference_correct"]
    return (f"audit.png: alpha {cert['risk_limit']:.4f}; regret {regret[:SAME].mean():.3f} on the first {SAME} "
            f"audits, {regret[SAME:].mean():.3f} on the {HARD} hard-chart audits\n"
            + text_report(mon, hist))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.parse_args(argv)
    IMG.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="docs-figures-"))
    try:
        print(frontier_and_reliability(work))
        print(audit(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for png in sorted(IMG.glob("*.png")):
        print(f"{png.relative_to(ROOT)}: {png.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
