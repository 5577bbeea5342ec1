"""How far the fitted latency model (`routedvlm profile`) is from the wall clock on real pipeline traces.

Profiles the two models (or reads `--profile`), runs `CollaborativePipeline.run_many` on toy-world samples, and
composes every strategy's standalone latency twice from the same stage records (`data.latency.compose_latencies`):
with the measured stage times and with `LatencyModel.stage_ms`. Reports, per strategy, both means and the mean
absolute % difference, and how often the label (cheapest correct strategy) is the same under both sources.

    .venv/bin/python benchmarks/bench_cost_model.py --samples 12 --threads 1
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile

TOY = pathlib.Path(__file__).resolve().parents[1] / "data" / "toyworld" / "checkpoints"


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", default=str(TOY / "small"), help="small model folder (default: the toy world's)")
    p.add_argument("--large", default=str(TOY / "large"), help="large model folder (default: the toy world's)")
    p.add_argument("--profile", default=None, help="an existing profile.json of both models (default: profile now)")
    p.add_argument("--samples", type=int, default=12, help="toy-world samples (split 'label') to run")
    p.add_argument("--k-grid", default="4,8,16", help="K values of transfer_<K>")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p.parse_args(argv)


def _profile(args, workdir: pathlib.Path) -> pathlib.Path:
    if args.profile:
        return pathlib.Path(args.profile)
    from routedvlm.inference.profiling.profiler import ProfileSettings, run_profile

    settings = ProfileSettings(image_sizes=[64], prompt_tokens=[16, 64, 128], output_tokens=[1, 8, 32, 64], repeats=2)
    path = workdir / "profile.json"
    path.write_text(json.dumps(run_profile([args.small, args.large], settings, show_progress=False)))
    return path


def _label(latency: dict, correct: dict) -> str:
    ok = [s for s in latency if correct[s]]
    return min(ok, key=lambda s: (latency[s], s)) if ok else "none"


def main(argv=None) -> dict:
    args = _args(argv)
    import torch

    from routedvlm.data.labelling.latency import compose_latencies
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import VLM, CollaborativePipeline
    from routedvlm.inference.profiling.latency_model import cost_stage_fn
    from routedvlm.router.strategies import default_strategies, parse_k_grid

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        profile = _profile(args, pathlib.Path(tmp))
        cost_fn, meta = cost_stage_fn(profile, small_path=args.small, large_path=args.large)
        grid = parse_k_grid(args.k_grid)
        pipe = CollaborativePipeline(VLM.from_pretrained(args.small), VLM.from_pretrained(args.large), k_grid=grid,
                                     max_direct_tokens=8, max_reason_tokens=48)
        strategies = default_strategies(grid)
        rows, same_label = [], 0
        samples = make_samples("label", args.samples + 1, seed=7)
        pipe.run_many(samples[0].image, samples[0].question, strategies)  # warm-up
        for sample in samples[1:]:
            results = pipe.run_many(sample.image, sample.question, strategies)
            wall, _ = compose_latencies(results)
            cost, _ = compose_latencies(results, cost_fn)
            correct = {s: r.answer.strip() == sample.answer for s, r in results.items()}
            same_label += _label(wall, correct) == _label(cost, correct)
            rows += [{"strategy": s, "wall_ms": wall[s], "cost_ms": cost[s]} for s in strategies]
    report = _report(rows, same_label, args.samples, meta)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    return report


def _report(rows: list, same_label: int, n: int, meta: dict) -> dict:
    print(f"{'strategy':<16} {'wall ms':>10} {'cost ms':>10} {'cost/wall':>10} {'|diff| %':>9}")
    out = {"samples": n, "cost_models": meta["cost_models"], "strategies": {}}
    for s in dict.fromkeys(r["strategy"] for r in rows):
        sel = [r for r in rows if r["strategy"] == s]
        w, c = statistics.fmean(r["wall_ms"] for r in sel), statistics.fmean(r["cost_ms"] for r in sel)
        ape = statistics.fmean(abs(r["cost_ms"] - r["wall_ms"]) / r["wall_ms"] * 100 for r in sel)
        out["strategies"][s] = {"wall_ms": round(w, 2), "cost_ms": round(c, 2), "mape": round(ape, 1)}
        print(f"{s:<16} {w:>10.1f} {c:>10.1f} {c / w:>10.2f} {ape:>9.1f}")
    out["mape_all"] = round(statistics.fmean(abs(r["cost_ms"] - r["wall_ms"]) / r["wall_ms"] * 100 for r in rows), 1)
    out["label_agreement"] = round(same_label / n, 3)
    print(f"all strategies: mean |cost - wall| / wall = {out['mape_all']}%; "
          f"same label (cheapest correct) under both sources: {same_label}/{n}")
    return out


if __name__ == "__main__":
    main()
