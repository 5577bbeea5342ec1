"""`routedvlm audit`: `report LOG [--plot PNG]` prints an audit log's history and draws the bound against alpha;
`export LOG --out FILE` writes the audited requests with stored inputs and gold answers as a data set to relabel."""
from __future__ import annotations

import argparse

EPILOG = """examples:
  routedvlm serve --small ./small --large ./large --audit-rate 0.05 --audit-log audit.parquet
  routedvlm audit report audit.parquet --plot audit.png
  routedvlm audit export audit.parquet --out audited.parquet   # needs --audit-store-inputs and gold answers
  routedvlm label --small ./small --large ./large --dataset audited.parquet --out fresh_labels.parquet
  train-router --data labels.parquet --calibration-data fresh_labels.parquet
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="routedvlm audit", description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    rep = sub.add_parser("report", help="print the history and draw the bound against alpha")
    rep.add_argument("log", help="the --audit-log path of routedvlm serve (or a parquet file of its rows)")
    rep.add_argument("--plot", default=None, help="write the bound-vs-alpha plot to this PNG")
    rep.add_argument("--every", type=int, default=0, help="also print every N-th audit (default: status changes only)")
    exp = sub.add_parser("export", help="audited requests with inputs and gold answers as a data set")
    exp.add_argument("log", help="the --audit-log path")
    exp.add_argument("--out", required=True, help="parquet file to write (sample_id, image, question, answer)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "report":
        from .report import report

        print(report(args.log, args.plot, args.every))
        return 0
    from .export import export

    counts = export(args.log, args.out)
    print(f"wrote {counts['exported']} audited samples to {args.out} ({counts['audits']} audits; left out: "
          f"{counts['without_inputs']} without stored inputs, {counts['without_gold']} without a gold answer)")
    return 0
