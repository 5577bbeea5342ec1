"""`routedvlm labels validate FILE [--json] [--strict]`: check a labels file (or folder / glob of parquet files)
against schema version 1.

Prints every problem (exit 1) or a one-line summary (exit 0); metadata problems of a table another tool wrote or
filtered (no `routedvlm` metadata, a stale content hash) are warnings, problems with `--strict`. A missing or
unreadable file is an error (exit 2).
"""
from __future__ import annotations

import argparse
import json
import sys

EPILOG = "examples: routedvlm labels validate labels.parquet --json\n          routedvlm labels validate ray_out/ --strict"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="routedvlm labels", description="Check a labels.parquet file.", epilog=EPILOG)
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = sub.add_parser("validate", help="report every schema problem of a labels file", epilog=EPILOG)
    v.add_argument("file", metavar="FILE", help="labels.parquet, a folder of parquet files or a glob")
    v.add_argument("--json", action="store_true", help="print a JSON report instead of text")
    v.add_argument("--strict", action="store_true", help="also require the routedvlm metadata and a matching content "
                   "hash (what write_labels writes)")
    return p


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
    return 2
