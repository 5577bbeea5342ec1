"""Live audit on the toy world: does the status catch drift, and only real drift? (issue #28)

Trains a router on the bundled labels (data/toyworld/labels.parquet, target accuracy 0.85: a certified regret limit
alpha vs large_reason of about 0.14), serves it with RoutedVLM(audit_rate=1.0) on the shipped toy pair, and streams
(1) `--same` eval samples of the toy world's own distribution, then (2) `--shifted` samples of harder charts from
the same generator (4-6 bars with values 7-9: larger sums, which the question does not reveal), sending the gold
answer of every sample as feedback. The audit records are replayed through four monitors side by side (without gold
in one epoch and in epochs of `--window`; with gold in epochs of 300 and of `--window`, the live one). Prints, per
phase, the true regret and disagreement rates; per monitor, the first audit at which the status is holding, whether
it was ever violated before the shift, whether it held at the shift, and how many audits after the shift it took
to leave holding (and to be violated).

    .venv/bin/python benchmarks/bench_audit_drift.py --target 0.85 --same 2000 --shifted 500 --window 1000
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--same", type=int, default=2000, help="same-distribution samples (toy eval split)")
    p.add_argument("--shifted", type=int, default=500, help="shifted samples (harder charts) after them")
    p.add_argument("--window", type=int, default=1000, help="audits per epoch of the windowed monitors")
    p.add_argument("--delta", type=float, default=0.05, help="level of the live bounds")
    p.add_argument("--target", type=float, default=0.85, help="train-router --target-accuracy")
    p.add_argument("--router", default=None, help="a trained router folder instead of training one")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    p.add_argument("--save-log", default=None, help="also copy the audit log's rows to this parquet file")
    return p.parse_args(argv)


def train(target: float, out: Path) -> Path:
    from routedvlm.data.toyworld import make_labels  # noqa: F401 - the toy package must be installed
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    labels = Path(make_labels.__file__).with_name("labels.parquet")
    train_router(TrainConfig(data=str(labels), no_mlflow=True, output_dir=str(out), target_accuracy=target,
                             allow_constant_features=True))
    return out / "router"


def stream(args, router: Path, tmp: Path):
    """Serve the samples through an audited RoutedVLM; returns the audit log's rows and per-sample truths."""
    from routedvlm.data.audit import AuditLog, read_log
    from routedvlm.data.toyworld.make_labels import MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID, checkpoint_pair
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import RoutedVLM
    from routedvlm.inference.vlm import set_threads

    set_threads(1)
    small, large = checkpoint_pair()
    log = AuditLog(tmp / "audit.parquet", store_inputs=False)
    vlm = RoutedVLM.from_pretrained(str(small), str(large), router=str(router), k_grid=TOY_K_GRID,
                                    max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS,
                                    device="cpu", audit_rate=1.0,
                                    audit={"log": log, "window": args.window, "delta": args.delta, "seed": 0})
    phases = [("same", make_samples("eval", args.same, seed=1)),
              ("shifted", make_samples("eval", args.shifted, seed=2, min_bars=4, min_value=7))]
    truth, t0 = [], time.perf_counter()
    for phase, samples in phases:
        for s in samples:
            out = vlm.generate(image=s.image, question=s.question)
            vlm.auditor.wait()
            vlm.audit_feedback(out.request_id, answer=s.answer)
            truth.append({"phase": phase, "status": vlm.audit_status()["status"]})
    seconds = time.perf_counter() - t0
    vlm.auditor.close()
    log.close()
    return read_log(tmp / "audit.parquet"), truth, vlm.auditor.monitor, seconds


def replay_statuses(df, alpha, reference, delta, window, gold: bool) -> list[str]:
    from routedvlm.inference.audit.monitor import AuditMonitor

    mon = AuditMonitor(alpha=alpha, reference=reference, delta=delta, window=window)
    gold_of = {r.request_id: r for r in df[df["kind"] == "feedback"].itertuples()}
    out = []
    for r in df[df["kind"] == "audit"].itertuples():
        mon.record(r.request_id, bool(r.agree))
        if gold and r.request_id in gold_of:
            g = gold_of[r.request_id]
            mon.feedback(r.request_id, bool(g.reference_correct) and not bool(g.routed_correct))
        out.append(mon.status)
    return out


def summarise(statuses, phases, shift_at) -> dict:
    same, after = statuses[:shift_at], statuses[shift_at:]
    first_hold = next((i + 1 for i, s in enumerate(same) if s == "holding"), None)
    held_at_shift = bool(same) and same[-1] == "holding"
    leave = next((i + 1 for i, s in enumerate(after) if s != "holding"), None) if held_at_shift else None
    violated = next((i + 1 for i, s in enumerate(after) if s == "violated"), None)
    return {"first_holding": first_hold, "violated_before_shift": "violated" in same, "holding_at_shift": held_at_shift,
            "audits_to_leave_holding": leave, "audits_to_violated": violated, "final": statuses[-1]}


def main(argv=None) -> int:
    args = _args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        router = Path(args.router) if args.router else train(args.target, tmp / "train")
        df, truth, live, seconds = stream(args, router, tmp)
        if args.save_log:
            df.to_parquet(args.save_log)
    audits = df[df["kind"] == "audit"].reset_index(drop=True)
    fb = df[df["kind"] == "feedback"].set_index("request_id")
    phase = [t["phase"] for t in truth]
    audits["phase"] = phase
    audits["regret"] = [bool(fb.loc[r, "reference_correct"]) and not bool(fb.loc[r, "routed_correct"]) for r in audits["request_id"]]
    rates = audits.groupby("phase").agg(n=("agree", "size"), disagreement=("agree", lambda a: 1 - a.mean()),
                                        regret=("regret", "mean")).reindex(["same", "shifted"])
    shift_at = args.same
    rows = {}
    for name, window, gold in (("no gold, one epoch", 0, False), (f"no gold, epochs of {args.window}", args.window, False),
                               ("gold, epochs of 300", 300, True), (f"gold, epochs of {args.window} (live)", args.window, True)):
        st = replay_statuses(df, live.alpha, live.reference, args.delta, window, gold)
        rows[name] = summarise(st, phase, shift_at)
    live_statuses = [t["status"] for t in truth]
    assert live_statuses == replay_statuses(df, live.alpha, live.reference, args.delta, args.window, True)
    print(f"router (target accuracy {args.target}): regret vs {live.reference} <= alpha = {live.alpha:.4f}; delta {args.delta}; "
          f"{len(audits)} audits in {seconds:.0f} s ({seconds / max(1, len(audits)):.2f} s per request + audit)")
    print(rates.to_string(float_format=lambda v: f"{v:.3f}"))
    head = f"{'monitor':34} {'1st holding':>11} {'violated<shift':>14} {'held@shift':>10} {'leave':>6} {'violated':>8}  final"
    print(head)
    for name, r in rows.items():
        print(f"{name:34} {str(r['first_holding']):>11} {str(r['violated_before_shift']):>14} "
              f"{str(r['holding_at_shift']):>10} {str(r['audits_to_leave_holding']):>6} {str(r['audits_to_violated']):>8}  {r['final']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"alpha": live.alpha, "rates": rates.reset_index().to_dict("records"),
                                               "monitors": rows, "seconds": seconds}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
