"""The toy world's four effects (issue 7), measured from a labels file the project's own labeller wrote.

`python -m routedvlm.data.toyworld.effects LABELS.parquet` prints accuracy (all / easy / hard, hard = N >= 5 bars,
read from the question), mean latency and output tokens per strategy, then checks:
(a) small_reason >= small_direct + 15 points; (b) |large_direct - small_reason| <= 5 points at <= half its latency;
(c) transfer_all >= large_direct + 10 points on the hard samples; (d) large_reason the most accurate and among the
slowest (latency at least the median of the strategies'). Exit code 1 when an effect does not hold.
"""
from __future__ import annotations

import argparse
import re
import sys

EPILOG = ("example: python -m routedvlm.data.toyworld.make_labels --split eval --n 500 --out eval.parquet\n"
          "         python -m routedvlm.data.toyworld.effects eval.parquet")


def effect_table(df):
    """Per strategy: n, accuracy (all, easy, hard) in %, mean latency ms, mean output tokens."""
    import pandas as pd

    from ..labels.schema import strategies_in

    ok = df[df["error"].isna()] if "error" in df.columns else df
    bars = ok["question"].map(lambda q: int(re.match(r"\s*(\d+)", q).group(1)))
    hard = bars >= 5
    rows = []
    for s in strategies_in(ok):
        c = ok[f"correct__{s}"].astype(bool)
        rows.append({"strategy": s, "acc": 100 * c.mean(), "easy": 100 * c[~hard].mean(), "hard": 100 * c[hard].mean(),
                     "ms": ok[f"latency_ms__{s}"].mean(), "tokens": ok[f"output_tokens__{s}"].mean()})
    return pd.DataFrame(rows).set_index("strategy"), int(hard.sum()), int((~hard).sum())


def check_effects(t) -> list[tuple[str, bool, str]]:
    """The four effects as (name, holds, evidence)."""
    sd, sr, ld, lr, ta = (t.loc[s] for s in ("small_direct", "small_reason", "large_direct", "large_reason", "transfer_all"))
    slowest_half = lr["ms"] >= t["ms"].median()
    return [
        ("(a) small_reason >= small_direct + 15", sr.acc - sd.acc >= 15, f"{sr.acc - sd.acc:+.1f} points"),
        ("(b) large_direct within 5 of small_reason at <= half its latency",
         abs(ld.acc - sr.acc) <= 5 and ld.ms <= sr.ms / 2, f"{ld.acc - sr.acc:+.1f} points, {ld.ms / sr.ms:.2f}x latency"),
        ("(c) transfer_all >= large_direct + 10 on hard", ta.hard - ld.hard >= 10, f"{ta.hard - ld.hard:+.1f} points on hard"),
        ("(d) large_reason most accurate and among the slowest", lr.acc >= t["acc"].max() - 1e-9 and slowest_half,
         f"{lr.acc:.1f} % (best other {t.drop('large_reason')['acc'].max():.1f} %), {lr.ms:.0f} ms "
         f"(median {t['ms'].median():.0f} ms)"),
    ]


def format_markdown(t, n_hard: int, n_easy: int) -> str:
    lines = [f"| strategy | acc % | easy % (n={n_easy}) | hard % (n={n_hard}) | mean ms | output tokens |",
             "|---|---|---|---|---|---|"]
    for s, r in t.iterrows():
        lines.append(f"| {s} | {r.acc:.1f} | {r.easy:.1f} | {r.hard:.1f} | {r.ms:.1f} | {r.tokens:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m routedvlm.data.toyworld.effects", epilog=EPILOG,
                                description="Check the toy world's four effects on a labels file.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("labels", help="labels.parquet written by routedvlm label / make_labels on a toy split")
    args = p.parse_args(argv)
    from ..labels.schema import read_labels

    df, _ = read_labels(args.labels)
    table, n_hard, n_easy = effect_table(df)
    print(format_markdown(table, n_hard, n_easy))
    results = check_effects(table)
    for name, holds, evidence in results:
        print(f"{'holds' if holds else 'FAILS'}  {name}: {evidence}")
    return 0 if all(h for _, h, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
