"""`routedvlm profile`: measure where each model's latency goes, fit a latency model, write profile.json + plots.

Only argparse at import time (no torch), so `--help` is fast; the measurement lives in `profiler.py`.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from routedvlm.errors import ConfigError

EPILOG = """example:
  routedvlm profile --model ./small --model ./large --image-sizes 224,448 --prompt-tokens 32,256 \\
      --output-tokens 1,16,64,256 --repeats 3 --out profile.json --plots-dir plots/
  routedvlm profile --model http://127.0.0.1:8002/v1#toy-small --model http://127.0.0.1:8001/v1#toy-large \\
      --image-sizes 96x16 --prompt-tokens 8,32 --output-tokens 1,8,32 --out profile_servers.json
  routedvlm profile --shape qwen3-vl-2b --shape qwen3-vl-4b --dtype bfloat16 --image-sizes 224 \\
      --prompt-tokens 8,48,128 --output-tokens 1,4,16 --repeats 1 --out profile.json   # real sizes, random weights
  routedvlm profile --preset gpu-check --budget-s 540   # on a CUDA machine: 2B + 8B shapes, paper grid, escalation,
                                                         # GPU tests; exit 1 when a step fails, 2 at the budget
  routedvlm profile --preset gpu-check --dry-run   # on the CPU: same calls at tiny shapes, counts + expected GPU time
then: routedvlm label ... --cost profile.json   (deterministic latencies from the fitted model)
"""


def _int_list(flag: str):
    def parse(text: str) -> list:
        try:
            vals = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be comma-separated positive integers, got {text!r}") from None
        if not vals or min(vals) <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be comma-separated positive integers, got {text!r}")
        return vals
    return parse


def _size_list(text: str) -> list:
    out = []
    for part in (v.strip().lower() for v in text.split(",") if v.strip()):
        dims = part.split("x")
        if len(dims) not in (1, 2) or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise argparse.ArgumentTypeError(f"--image-sizes must be comma-separated sizes such as 224 or 96x16, got {text!r}")
        out.append(int(part) if len(dims) == 1 else part)
    if not out:
        raise argparse.ArgumentTypeError(f"--image-sizes must name at least one size, got {text!r}")
    return out


DEFAULTS = {"image_sizes": [224, 448, 896], "prompt_tokens": [32, 256, 1024], "output_tokens": [1, 16, 64, 256, 1024],
            "repeats": 3, "device": "auto", "dtype": None}


def build_parser() -> argparse.ArgumentParser:
    from .gpu_check import PRESETS  # stdlib only at import

    p = argparse.ArgumentParser(
        prog="routedvlm profile", description="Measure preprocess / vision / prefill / decode latency per model on "
        "simulated inputs and fit a latency model.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], metavar="PATH_OR_ID",
                   help="checkpoint folder, hub id, or '<base_url>#<model id>' of a model on an OpenAI-compatible "
                        "server (streamed, one request in flight; prompt lengths then count words); repeat for several")
    p.add_argument("--api-key", default=None, help="API key of the servers given as --model URL#ID (default: "
                   "$ROUTEDVLM_BACKEND_API_KEY)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME_OR_CONFIG",
                   help="a published model shape with seeded random weights: "
                        "qwen3-vl-2b, qwen3-vl-4b, qwen3-vl-8b, or a config.json path; repeatable")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="gpu-check: the 2B and 8B shapes on the paper's grid on CUDA, the escalation benchmark at those "
                        "shapes and the GPU tests, into runs/gpu-check/ (flags given here override the preset)")
    p.add_argument("--image-sizes", type=_size_list, default=None, metavar="PX,...",
                   help="random-image sizes: a side in pixels (square) or WxH, e.g. 224,448,96x16 (default 224,448,896)")
    p.add_argument("--prompt-tokens", type=_int_list("--prompt-tokens"), default=None, metavar="N,...",
                   help="synthetic question lengths in tokens (default 32,256,1024)")
    p.add_argument("--output-tokens", type=_int_list("--output-tokens"), default=None, metavar="N,...",
                   help="output lengths; decode runs to the largest (default 1,16,64,256,1024)")
    p.add_argument("--repeats", type=int, default=None, help="measurements per grid point (default 3)")
    p.add_argument("--device", default=None, help="torch device: auto (cuda when available, else cpu), cpu, cuda, "
                   "cuda:1 ... (default auto)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads: 1 (default) gives stable latencies on a "
                   "shared CPU; 0 keeps torch's default (one per core); recorded in profile.json")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: the checkpoint's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random images and shape weights (default 0)")
    p.add_argument("--no-warmup", action="store_true", help="skip the unrecorded warm-up call per image size")
    p.add_argument("--clock", choices=("cpu", "wall"), default="wall",
                   help="wall (default) or cpu: CPU seconds of the process, so a shared, loaded CPU measures what an "
                        "idle core would take (with OMP_NUM_THREADS=1; CPU devices only)")
    p.add_argument("--memory-margin-gib", type=float, default=1.0, metavar="GIB",
                   help="refuse to build a --shape unless this much memory stays free beyond its estimate (default 1)")
    p.add_argument("--out", type=pathlib.Path, default=None, help="where to write profile.json (required without --preset)")
    p.add_argument("--plots-dir", type=pathlib.Path, default=None,
                   help="where to write components.png and crossover.png (default: <out stem>_plots/ beside --out)")
    p.add_argument("--no-plots", action="store_true", help="write profile.json only")
    p.add_argument("--crossover-m", type=_int_list("--crossover-m"), default=None, metavar="M,...",
                   help="small-model output lengths M for the crossovers N*(M), from the fit (default: the "
                        "--output-tokens above 1; larger M extrapolate the fitted decode line)")
    p.add_argument("--from", dest="from_profile", type=pathlib.Path, default=None, metavar="PROFILE_JSON",
                   help="re-analyse an existing profile.json (summary, crossovers, plots; --out rewrites it) "
                        "without measuring anything")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--budget-s", type=float, default=None, metavar="SECONDS",
                   help="with --preset: stop starting calls after this many seconds (the call in flight finishes), "
                        "keep the JSON written so far and exit 2; leave a margin below the machine's limit")
    p.add_argument("--dry-run", action="store_true",
                   help="with --preset: the same call sequence on the CPU (float32) with tiny stand-ins of the shapes; "
                        "records the calls and builds of every step and the GPU time they imply (docs/gpu.md)")
    return p


def default_plots_dir(out: pathlib.Path) -> pathlib.Path:
    """Where the plots go without --plots-dir: `<out stem>_plots/` beside --out (profile.json -> profile_plots/)."""
    return out.with_name(f"{out.stem}_plots")


def resolve_args(args) -> tuple[dict, list]:
    """Fill unset grid flags from the preset (if any), then from DEFAULTS; returns (preset, shapes)."""
    from .gpu_check import PRESETS

    preset = PRESETS[args.preset] if args.preset else {}
    for key, default in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, preset.get(key, default))
    if (args.dry_run or args.budget_s is not None) and not preset:
        raise ConfigError("The `--dry-run` and `--budget-s` flags belong to a preset run: add --preset gpu-check.")
    if args.budget_s is not None and args.budget_s <= 0:
        raise ConfigError(f"The `--budget-s` flag must be a positive number of seconds. Got {args.budget_s!r} instead.")
    if args.dry_run:
        args.device, args.dtype = "cpu", "float32"
        args.out = args.out or pathlib.Path(preset["out"]).with_name("dry-run.json")
        args.plots_dir = args.plots_dir or pathlib.Path(preset["plots_dir"]) / "dry-run"
    args.out = args.out or (pathlib.Path(preset["out"]) if preset else None)
    args.plots_dir = args.plots_dir or (pathlib.Path(preset["plots_dir"]) if preset else None)
    shapes = args.shape or list(preset.get("shapes", []))
    if args.from_profile is not None:
        if args.model or shapes:
            raise ConfigError("The `--from` flag re-analyses a saved profile; it cannot be combined with --model, "
                              "--shape or --preset.")
        return preset, shapes
    if preset and args.model:
        raise ConfigError("The `--model` flag cannot be combined with --preset; the preset profiles --shape models "
                          f"(default {', '.join(shapes)}).")
    if not args.model and not shapes:
        raise ConfigError("routedvlm profile needs at least one --model PATH_OR_ID or --shape NAME_OR_CONFIG "
                          "(shapes: qwen3-vl-2b, qwen3-vl-4b, qwen3-vl-8b).")
    if args.out is None:
        raise ConfigError("The `--out` flag is required: pass a file path such as profile.json (or use --preset).")
    if args.out.exists() and args.out.is_dir():
        raise ConfigError(f"The `--out` path {str(args.out)!r} is a folder; pass a file path such as profile.json.")
    return preset, shapes


def _summary(profile: dict) -> str:
    lines = [f"{'model':<24} {'params':>12} {'vision ms/img':>14} {'prefill ms/tok':>15} {'decode ms/tok':>14} "
             f"{'+ms per ctx tok':>16}  R² (vision/prefill/decode)  e2e MAPE"]
    for name, e in profile["models"].items():
        f, ref = e["fit"], e["reference"]
        vision = f["vision"]["intercept"] + f["vision"]["slope"] * ref["image_tokens"]
        r2 = "/".join("n/a" if f[c]["r2"] is None else f"{f[c]['r2']:.2f}" for c in ("vision", "prefill", "decode"))
        params = "remote" if e.get("parameters") is None else f"{e['parameters']:,}"
        lines.append(f"{name:<24} {params:>12} {vision:>14.3f} {f['prefill']['slope']:>15.4f} "
                     f"{f['decode']['intercept']:>14.3f} {f['decode']['slope']:>16.6f}  {r2:<27} "
                     f"{e.get('end_to_end_mape') or float('nan'):.1f}%")
    for name, e in profile["models"].items():
        if "seconds" in e:
            gpu = f", CUDA peak {e['cuda_peak_gib']:.1f} GiB" if "cuda_peak_gib" in e else ""
            lines.append(f"{name}: profiled in {e['seconds']:.0f} s, process peak RSS {e['peak_rss_gib']:.1f} GiB{gpu}")
    for cp in profile.get("crossovers", []):
        n = cp["large_tokens"]
        lines.append(f"crossover: {cp['large']} answering in <= {n} tokens is as fast as {cp['small']} producing "
                     f"{cp['m']} ({cp['small_ms']:.1f} ms)" if n else
                     f"crossover: {cp['large']} is slower than {cp['small']} producing {cp['m']} tokens even for 1 token")
    return "\n".join(lines)


def _progress_logging() -> None:
    """Show the profiler's progress lines (building a shape, each model done) on stderr."""
    import logging

    log = logging.getLogger("routedvlm.inference")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[profile] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _report(profile: dict, args) -> int:
    """Crossovers at --crossover-m (if given), the summary, --out and the plots of a measured or loaded profile."""
    from .crossover import crossover_points
    from .env import write_json

    if args.crossover_m:
        profile["crossovers"] = crossover_points(profile, args.crossover_m) if len(profile["models"]) > 1 else []
    print(_summary(profile))
    if args.out is not None:
        write_json(args.out, profile)
        print(f"wrote {args.out}")
    plots = args.plots_dir or (default_plots_dir(args.out) if args.out is not None else None)
    if plots is not None and not args.no_plots:
        from .plots import plot_components, plot_crossover

        for path in (plot_components(profile, plots / "components.png"),
                     plot_crossover(profile, plots / "crossover.png", args.crossover_m)):
            print(f"wrote {path}")
    return 0


def _gpu_check(args, settings, shapes: list, preset: dict) -> int:
    """The preset run (gpu_check.py): one line per step as it ends, the summary, and its exit status."""
    from .gpu_check import run_gpu_check, step_line, summary_lines

    if args.dry_run:
        from .dry_run import write_tiny_shapes

        shapes = write_tiny_shapes(shapes, args.out.parent / "dry-run-shapes")
    result, code = run_gpu_check(settings, shapes, args.out, args.plots_dir, preset["escalation"],
                                 show_progress=not args.no_progress, memory_margin_gib=args.memory_margin_gib,
                                 budget_s=args.budget_s, on_step=lambda rec: print(step_line(rec), flush=True),
                                 dry_run=args.dry_run)
    lines = [_summary(result)] if result["models"] else []
    print("\n".join(lines + summary_lines(result) + [f"wrote {p}" for p in [args.out, *(result.get("written") or [])]]))
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    preset, shapes = resolve_args(args)
    if args.from_profile is not None:
        from .latency_model import read_profile

        return _report(read_profile(args.from_profile), args)
    if args.threads < 0:
        raise ConfigError(f"The `--threads` flag must be an integer >= 0. Got {args.threads!r} instead.")
    from .env import write_json
    from .profiler import ProfileSettings, run_profile
    from ..vlm import set_threads

    set_threads(args.threads)

    settings = ProfileSettings(image_sizes=args.image_sizes, prompt_tokens=args.prompt_tokens,
                               output_tokens=args.output_tokens, repeats=args.repeats, device=args.device,
                               dtype=args.dtype, seed=args.seed, warmup=not args.no_warmup, clock=args.clock)
    _progress_logging()
    if preset:
        return _gpu_check(args, settings, shapes, preset)
    partial = args.out.with_name(args.out.stem + ".partial.json")
    profile = run_profile(args.model, settings, show_progress=not args.no_progress, shapes=shapes,
                          memory_margin_gib=args.memory_margin_gib, api_key=args.api_key, partial_path=partial)
    write_json(args.out, profile)
    partial.unlink(missing_ok=True)
    return _report(profile, args)


if __name__ == "__main__":
    sys.exit(main())
