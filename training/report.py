"""The train-router evaluation as text: the side-by-side table, then what the target means, the certificate,
the verdict on the test rows ("target X: met / missed by Y (SE Z)") and what the area numbers are."""
from __future__ import annotations


def fmt_mix(mix: dict, n: int = 3) -> str:
    items = sorted(mix.items(), key=lambda kv: -kv[1])
    text = " ".join(f"{k}:{v:.0%}" for k, v in items[:n])
    return text + (" ..." if len(items) > n else "")


def target_text(evaluation: dict) -> str:
    """What the target promises, in words."""
    t, c = evaluation["target"], evaluation["certificate"]
    if t["kind"] == "latency_ms":
        return f"target: mean latency <= {t['value']:g} ms (a budget: not certified)"
    if t["kind"] == "min_accuracy":
        return f"target: accuracy >= {t['value']:g}, certified as the error rate 1[chosen wrong] <= {c['risk_limit']:.4f}"
    return (f"target: {t['value']:g} x the best single strategy = accuracy >= accuracy({c['reference']}) - "
            f"{c['risk_limit']:.4f} ({c['reference']} is {c['reference_train_accuracy']:.3f} accurate on the training "
            f"rows), certified as the {c['loss']} <= {c['risk_limit']:.4f}")


def verdict_line(evaluation: dict) -> str:
    """'target 0.918 on test (200 rows): met (+0.012, SE 0.019)' for the chosen policy."""
    learned, t = evaluation["rows"][-1], evaluation["target"]
    n = evaluation["test_rows"]
    if t["kind"] == "latency_ms":
        return f"on test ({n} rows): {learned['name']} at {learned['mean_latency_ms']:.1f} ms -> target {learned['verdict']}"
    return (f"on test ({n} rows): {learned['name']} accuracy {learned['accuracy']:.3f} -> target "
            f"{evaluation['required_test']:.3f}: {learned['verdict']}")


def area_line(evaluation: dict) -> str:
    lo, hi = evaluation["auc_range_ms"]
    parts = ", ".join(f"{k} {v:.3f}" for k, v in evaluation["auc"].items())
    return (f"area under the accuracy-latency curve on test (the best accuracy a rule reaches within a mean latency L, "
            f"averaged over L = {lo:.0f}-{hi:.0f} ms, the single strategies' range; 1 = always right): {parts}; "
            f"single strategies {evaluation['auc_single_strategies']:.3f}")


def pairs_line(evaluation: dict) -> str:
    """The ladder policy against its best sub-pair at the same target (evaluate.py `ladder_vs_pairs`)."""
    v = evaluation["ladder_vs_pairs"]
    if v.get("best_pair") is None:
        return "ladder vs pairs: no two-model sub-pair certifies the target on these calibration rows"
    a, b = v["best_pair"]
    return (f"ladder vs its best pair ({a}/{b}, each certified at the same target; not chosen among): mean latency "
            f"{v['ladder_mean_latency_ms']:.1f} vs {v['best_pair_mean_latency_ms']:.1f} ms on test "
            f"({abs(v['latency_reduction']):.1%} {'lower' if v['latency_reduction'] >= 0 else 'higher'}), accuracy {v['ladder_accuracy']:.3f} vs {v['best_pair_accuracy']:.3f}")


def format_table(evaluation: dict) -> str:
    """The evaluation as a fixed-width terminal table plus the target, certificate, verdict and area lines."""
    head = f"{'policy':<44} {'acc':>6} {'mean ms':>9} {'p90 ms':>9} {'speed-up':>8}  {'target on test':<27} mix"
    lines = [head, "-" * len(head)]
    for r in evaluation["rows"]:
        sp = r["speedup_vs_large_reason"]
        lines.append(f"{r['name'][:44]:<44} {r['accuracy']:>6.3f} {r['mean_latency_ms']:>9.1f} "
                     f"{r['p90_latency_ms']:>9.1f} {(f'{sp:.2f}x' if sp else '-'):>8}  {r['verdict'][:27]:<27} "
                     f"{fmt_mix(r['mix'])}")
    missing = [k for k in ("tau", "lagrangian", "binary") if k in evaluation["auc"]
               and not any(r["kind"] == "rule" and r["rule"]["name"] == k for r in evaluation["rows"])]
    if missing:
        lines.append(f"(no parameter of {', '.join(missing)} certified on the calibration rows: no row)")
    c = evaluation["certificate"]
    lines += [target_text(evaluation), f"certificate: {c['statement']} [{c['method']}; delta {c['delta']}, "
              f"n {c['n']} calibration rows, bound {c['bound'] if c['bound'] is None else round(c['bound'], 4)}]",
              verdict_line(evaluation), area_line(evaluation)]
    if evaluation.get("ladder_vs_pairs") is not None:
        lines.append(pairs_line(evaluation))
    if evaluation.get("probabilities"):
        from .probability import summary_line

        lines.append(summary_line(evaluation["probabilities"]))
    return "\n".join(lines)
