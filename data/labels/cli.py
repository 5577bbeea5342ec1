"""`routedvlm labels validate FILE [--json] [--strict]`: check a labels file (or folder / glob of parquet files)
against its schema. `routedvlm labels import-outcomes --layout routellm|mmr-bench|routerbench TABLE --out
labels.parquet`: a published outcome table of N >= 2 models as direct-only labels of a ladder (outcomes.py).

Prints every problem (exit 1) or a one-line summary (exit 0); metadata problems of a table another tool wrote or
filtered (no `routedvlm` metadata, a stale content hash) are warnings, problems with `--strict`. A missing or
unreadable file is an error (exit 2).
"""
from __future__ import annotations

import argparse
import json
import sys

EPILOG = ("examples: routedvlm labels validate labels.parquet --json\n          routedvlm labels validate ray_out/ --strict\n"
          "          routedvlm labels import-outcomes --layout routellm gsm8k_responses.csv --out gsm8k.parquet\n"
          "          routedvlm labels import-outcomes --layout mmr-bench mmr.csv --order 2B 4B 8B --out mmr.parquet\n"
          "          routedvlm labels import-outcomes --layout routellm gsm8k_responses.csv --out gsm8k.parquet "
          "--encoder ./all-MiniLM-L6-v2\n"
          "          routedvlm labels add-features data/toyworld/labels.parquet --out labels-state.parquet")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="routedvlm labels", description="Check a labels.parquet file, or import an outcome "
                                "table.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = sub.add_parser("validate", help="report every schema problem of a labels file", epilog=EPILOG)
    v.add_argument("file", metavar="FILE", help="labels.parquet, a folder of parquet files or a glob")
    v.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    v.add_argument("--strict", action="store_true", help="also require the routedvlm metadata and a matching content "
                   "hash (what write_labels writes)")
    i = sub.add_parser("import-outcomes", help="an outcome table of N >= 2 models (CSV or parquet) as direct-only "
                       "labels", epilog=EPILOG)
    i.add_argument("file", metavar="TABLE", help="the outcome table (.csv, or .parquet)")
    i.add_argument("--layout", required=True, choices=("mmr-bench", "routellm", "routerbench"),
                   help="the table's column layout")
    i.add_argument("--order", nargs="+", metavar="MODEL", help="the models to import, cheapest first (they become "
                   "small, mid..., large; default: every model, by mean cost)")
    i.add_argument("--min-score", type=float, default=0.5, help="routerbench layout: a score counts as correct from "
                   "this value (default 0.5)")
    i.add_argument("--out", required=True, help="the labels.parquet to write")
    i.add_argument("--small", help="two models: the cheaper model's column name (default: RouteLLM's weak model, or "
                   "the lower mean cost)")
    i.add_argument("--dataset", default="imported", help="the `dataset` value of every row")
    i.add_argument("--cost-ms", default="", help="a cost per call for each model, e.g. 'mixtral=1,gpt-4=10' "
                   "(milliseconds or any unit, by the table's column name): for a table with correctness columns but "
                   "no response or cost column (also orders the models, cheapest first)")
    i.add_argument("--ms-per-token", default="", help="routellm layout: price per response token by alias or model, "
                   "e.g. 'small=10,large=30' (the default; middle models evenly between)")
    i.add_argument("--encoder", metavar="FOLDER_OR_ID", help="add meaning features (feat__prompt__meaning_<i>): the "
                   "questions embedded by this sentence encoder (a local folder or hub id; see docs/labelling.md)")
    i.add_argument("--encoder-dims", type=int, default=16, help="meaning features per question: the embedding's "
                   "random projection to this many values (default 16; the encoder's size keeps it whole)")
    a = sub.add_parser("add-features", help="add the small VLM's state features (feat__small_direct__state_<i>) to a "
                       "labels table, re-running only the small model's direct pass", epilog=EPILOG)
    a.add_argument("file", metavar="LABELS", help="the labels.parquet to read (never lost: the output is written "
                   "atomically)")
    a.add_argument("--out", default=None, help="the labels.parquet to write (default: LABELS, replaced atomically)")
    a.add_argument("--small", default=None, help="the small VLM folder (default: the labels' small model)")
    a.add_argument("--dataset", default=None, help="the data set the labels were made from (default: the labels' "
                   "sample_source)")
    a.add_argument("--state-layer", type=int, default=-1, help="decoder layer whose output at the last prompt token "
                   "is read (default -1, the last)")
    a.add_argument("--state-dims", type=int, default=16, help="random-projection size (default 16; the hidden size "
                   "keeps it whole)")
    a.add_argument("--state-seed", type=int, default=0, help="seed of the random projection (default 0)")
    a.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def add_features_command(args) -> int:
    from .add_features import add_state_features

    out = add_state_features(args.file, args.out, small=args.small, dataset=args.dataset, layer=args.state_layer,
                             dims=args.state_dims, seed=args.state_seed, progress=not args.no_progress)
    print(f"wrote {out} with {args.state_dims} state features (feat__small_direct__state_*)")
    return 0


def import_command(args) -> int:
    import pandas as pd

    from routedvlm.errors import ConfigError, LabelsError

    from .outcomes import import_outcomes, outcome_metadata
    from .schema import write_labels
    from .validate import inspect_labels

    try:
        prices = {k.strip(): float(v) for k, v in (item.split("=", 1) for item in args.ms_per_token.split(",") if item)}
    except ValueError as exc:
        raise ConfigError(f"`--ms-per-token` must look like 'small=10,large=30'. Got {args.ms_per_token!r} "
                          "instead.") from exc
    try:
        costs = {k.strip(): v.strip() for k, v in (item.rsplit("=", 1) for item in args.cost_ms.split(",") if item)}
    except ValueError as exc:
        raise ConfigError(f"`--cost-ms` must look like 'MODEL_A=1,MODEL_B=10'. Got {args.cost_ms!r} instead.") from exc
    try:
        df = pd.read_parquet(args.file) if str(args.file).endswith(".parquet") else pd.read_csv(args.file)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise LabelsError(f"Cannot read the outcome table {args.file!r}: {exc}") from exc
    labels = import_outcomes(df, args.layout, order=args.order, small=args.small, dataset=args.dataset,
                             ms_per_token=prices, min_score=args.min_score, cost_ms=costs or None)
    metadata = outcome_metadata(labels, args.layout, args.file)
    if args.encoder:
        from .outcomes import with_meaning

        labels, metadata["encoder"] = with_meaning(labels, args.encoder, args.encoder_dims)
    problems, _ = inspect_labels(labels, metadata, strict=False)
    if problems:  # the table's checks should have caught it: never write what `labels validate` rejects
        raise LabelsError(f"The imported labels would not validate ({len(problems)} problem(s)); nothing written: "
                          f"{problems[0]}")
    write_labels(labels, args.out, metadata)
    parts = [f"{a}_direct = {m} (accuracy {labels[f'correct__{a}_direct'].mean():.3f})"
             for a, m in labels.attrs["models"].items()]
    print(f"wrote {len(labels)} rows to {args.out}: " + ", ".join(parts))
    return 0


def validate_command(path: str, as_json: bool, strict: bool = False) -> int:
    from .schema import _read, k_grid_in, strategies_in
    from .validate import inspect_labels

    df, _, _ = _read(path)  # raises LabelsError for a missing / unreadable file
    problems, warnings = inspect_labels(path, strict=strict)
    report = {"file": path, "ok": not problems, "strict": strict, "rows": len(df), "strategies": strategies_in(df),
              "k_grid": k_grid_in(df), "problems": problems, "warnings": warnings}
    if as_json:
        print(json.dumps(report, indent=2))
    elif problems:
        print(f"{path}: {len(problems)} problem(s):", file=sys.stderr)
        for msg in problems:
            print(f"  - {msg}", file=sys.stderr)
    else:
        for msg in warnings:
            print(f"warning: {msg} (--strict makes this a problem)", file=sys.stderr)
        print(f"OK: {len(df)} rows, strategies {', '.join(report['strategies'])}, "
              f"K grid {', '.join(map(str, report['k_grid'])) or '(none)'}")
    return 0 if not problems else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.action == "validate":
        return validate_command(args.file, args.json, args.strict)
    if args.action in ("import-outcomes", "add-features"):
        from routedvlm.errors import RoutedVLMError

        try:
            return import_command(args) if args.action == "import-outcomes" else add_features_command(args)
        except RoutedVLMError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 2
