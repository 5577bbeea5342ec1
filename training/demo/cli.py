"""`routedvlm demo`: the whole product on the embedded toy world (`toy.py`), or `--random`: the mechanics.

Default: label the toy `label` split -> train-router (LightGBM and the LoRA probe, cascade and one-shot; `--routers`)
-> register all in MLflow, the best certified utility as `champion` -> RoutedVLM loaded from
`models:/vlm-router@champion` on the toy `eval` split, live beside the binary accept-or-reason rule, mutual
verification and large_reason, plus every router, single strategy and the oracle replayed on the same samples; one
table with the certified target's verdict per row, written to --out as table.json / table.md with plot.png.
`--random`: every strategy, an escalation and mutual verification on a tiny random-weight Qwen3-VL pair, with the
per-stage trace (answers are noise; the point is the mechanics).
`--ladder`: the three-model toy ladder (small, mid, large): label, train + certify the ladder's policy and every
two-model sub-pair's at one absolute target, replay them on fresh eval samples (`ladder.py`).
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import textwrap
import time

EPILOG = """examples:
  routedvlm demo                        # toy world: LightGBM on the bundled 1000 labels, labels 150 eval samples
  routedvlm demo --full                 # labels the 1000 `label` samples again, also trains the LoRA probe
  routedvlm demo --routers lightgbm,lora-probe   # the bundled labels, both router types (both modes each)
  routedvlm demo --quick --out /tmp/d   # a few dozen samples each (CI)
  routedvlm demo --cost profile.json --out runs/demo-2b8b   # toy effects priced at the profiled 2B/8B costs
  routedvlm demo --random --workdir /tmp/routedvlm-demo --arch qwen3_vl
  routedvlm demo --ladder               # small, mid, large: the ladder's certified policy against its best pair
"""
COLUMNS = ("stage", "model", "mode", "vision_ms", "prefill_ms", "prefill_tok", "cached_tok", "decode_ms", "decode_tok")


def _parser() -> argparse.ArgumentParser:
    from dataclasses import MISSING, fields

    from .toy import DemoConfig

    p = argparse.ArgumentParser(prog="routedvlm demo", description="Run the whole product on the embedded toy world "
                                "(label, train-router, register, RoutedVLM) and print the side-by-side table.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(DemoConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name in ("progress", "live_mutual_verification"):
            p.add_argument("--no-" + flag[2:], dest=f.name, action="store_false", help="do not: " + f.metadata["help"])
        elif f.type == "bool":
            p.add_argument(flag, action="store_true", help=f.metadata["help"])
        else:
            conv = int if f.type.startswith("int") else float if f.type.startswith("float") else str
            shown = f" (default {f.default})" if f.default not in (None, MISSING) else ""
            p.add_argument(flag, type=conv, default=f.default, help=f.metadata["help"] + shown)
    g = p.add_argument_group("--ladder: the three-model toy ladder against its best two-model pair")
    g.add_argument("--ladder", action="store_true", help="run the ladder demo (400 label + 200 eval samples; --quick "
                   "120 + 60; --n-label, --n-eval, --min-accuracy, --delta, --seed, --checkpoints, --out apply)")
    g.add_argument("--ladder-mode", default="cascade", choices=("cascade", "one-shot"),
                   help="router mode of every ladder / pair policy (default cascade)")
    r = p.add_argument_group("--random: tiny random-weight models (mechanics only)")
    r.add_argument("--random", action="store_true", help="run every strategy on a tiny random VLM pair instead")
    r.add_argument("--workdir", type=pathlib.Path, default=None, help="where to build the tiny models (default: a temp dir)")
    r.add_argument("--arch", default="qwen3_vl", help="tiny model family: qwen3_vl, qwen2_vl, smolvlm, llava_onevision")
    r.add_argument("--selector", default="prefix", help="prefix, suffix or attention")
    r.add_argument("--keep-tokens", type=int, default=16, help="K for the escalation and mutual verification")
    return p


def _images():
    from PIL import Image, ImageDraw

    a = Image.new("RGB", (64, 64), "white")
    ImageDraw.Draw(a).rectangle([8, 8, 40, 40], fill="red")
    b = Image.new("RGB", (96, 48), "black")
    ImageDraw.Draw(b).ellipse([10, 5, 50, 40], fill="blue")
    return [(a, "What colour is the square?"), (b, "How many circles are there?")]


def _row(cells) -> str:
    return "  ".join(str(c)[:14].ljust(14) if i < 3 else str(c).rjust(11) for i, c in enumerate(cells))


def _print_result(label: str, res) -> None:
    print(f"\n[{label}] strategy={res.strategy} keep_tokens={res.keep_tokens} answer={res.answer!r}")
    print("  " + _row(COLUMNS))
    for r in res.trace:
        print("  " + _row([r["stage"], r["model"], r.get("mode", ""), f"{r['vision_ms']:.1f}", f"{r['prefill_ms']:.1f}",
                           r["prefill_tokens"], r["cached_tokens"], f"{r['decode_ms']:.1f}", r["decode_tokens"]]))


def run_random_demo(workdir: pathlib.Path, arch: str, selector: str, keep: int) -> None:
    from routedvlm.inference import VLM, CollaborativePipeline, MutualVerification, build_tiny_pair
    from routedvlm.router.strategies import default_strategies

    small_dir, large_dir = build_tiny_pair(workdir, arch=arch)
    pipe = CollaborativePipeline(VLM.from_pretrained(small_dir), VLM.from_pretrained(large_dir), selector=selector,
                                 k_grid=(8, 16, 32), min_new_tokens=3, max_direct_tokens=8, max_reason_tokens=48,
                                 min_reason_tokens=32)
    print(f"small: {small_dir}\nlarge: {large_dir}\nselector: {selector}  (random weights: answers are noise)")
    for i, (image, question) in enumerate(_images()):
        print(f"\n=== sample {i}: {question}")
        for sid in default_strategies(pipe.k_grid):
            _print_result(sid, pipe.run(image, question, sid))
        first = pipe.run(image, question, "large_direct")
        _print_result(f"escalate K={keep}", pipe.escalate(first, keep))
        _print_result("mutual verification", MutualVerification(pipe, check="small_direct", keep_tokens=keep).run(image, question))


def _quiet() -> None:
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    import torch

    torch.set_num_threads(1)  # tiny models: one thread is faster than contended ones


def _random(args) -> None:
    if args.workdir is None:
        with tempfile.TemporaryDirectory(prefix="routedvlm-demo-") as tmp:
            run_random_demo(pathlib.Path(tmp), args.arch, args.selector, args.keep_tokens)
    else:
        run_random_demo(args.workdir, args.arch, args.selector, args.keep_tokens)


def _toy(args) -> None:
    import os

    from .toy import DemoConfig, run_toy_demo
    from .table import LATENCY_NOTE

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "ERROR")  # its INFO/WARNING lines are noise in the demo
    skip = {"random", "workdir", "arch", "selector", "keep_tokens", "ladder", "ladder_mode"}
    cfg = DemoConfig(**{k: v for k, v in vars(args).items() if k not in skip})
    res = run_toy_demo(cfg, say=lambda msg: print(msg, flush=True))
    from routedvlm.router.decision_rules import describe

    from .table import certificate_lines

    h = res.header
    print(f"\n=== toy world, eval split: {h['n_eval']} samples (champion {h['router']} v{h['version']}: {h['champion']}, "
          f"{h['mode']}, {describe(h['rule'])}; trained on {h['n_label']} labelled samples"
          + (", the bundled labels)" if h.get("label_source") == "bundled" else ")"))
    for line in certificate_lines(h):
        print(textwrap.fill(line, width=110, subsequent_indent="      "))
    print(textwrap.fill(f"note: {LATENCY_NOTE}", width=110, subsequent_indent="      "))
    if cfg.cost:
        print(textwrap.fill(f"SIMULATED ECONOMICS: every latency below is priced by the cost profile {cfg.cost} "
                            f"(small = {h['cost_models']['small']}, large = {h['cost_models']['large']}): the toy pair's "
                            "real answers, accuracy and token counts, each stage costed as if the pair were those "
                            "models (the profile's fitted vision, prefill and per-token decode); not a measurement "
                            "of the toy pair.", width=110, subsequent_indent="      "))
    print(f"live RoutedVLM end-to-end wall clock per request (incl. Python overhead): {h['live_wall_mean_ms']:.1f} ms mean; "
          f"fallback decisions: {h['live_fallbacks']}\n")
    print(res.table)
    print(f"\nwrote {res.paths['markdown']}, {res.paths['json']} and {res.paths['plot']}")


def _ladder(args) -> None:
    from .ladder import LadderDemoConfig, run_ladder_demo, table

    out = args.out if args.out != "runs/demo" else "runs/demo-ladder"
    cfg = LadderDemoConfig(out=out, n_label=args.n_label, n_eval=args.n_eval, min_accuracy=args.min_accuracy,
                           delta=args.delta, mode=args.ladder_mode, quick=args.quick, checkpoints=args.checkpoints,
                           seed=args.seed, progress=args.progress)
    res = run_ladder_demo(cfg, say=lambda msg: print(msg, flush=True))
    t = res["target"]
    print(f"\n=== toy ladder: {res['n_label']} labelled samples, {res['n_eval']} fresh eval samples; every policy "
          f"certified at accuracy >= {t['min_accuracy']} (delta {t['delta']}, {t['mode']})\n")
    print(table(res))
    ratio = res["latency_ratio_ladder_vs_best_pair"]
    if ratio is not None:
        print(f"\nladder vs best pair ({res['best_pair']}): mean latency ratio {ratio:.3f} "
              f"({abs(100 * (1 - ratio)):.1f} % {'lower' if ratio <= 1 else 'higher'})")
    print(f"\nwrote {out}/table.md and {out}/table.json")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _quiet()
    start = time.perf_counter()
    _ladder(args) if args.ladder else _random(args) if args.random else _toy(args)
    print(f"\ndone in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
