"""`routedvlm profile`: measure where each model's latency goes, fit a latency model, write profile.json + plots.

Only argparse at import time (no torch), so `--help` is fast; the measurement lives in `profiler.py`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from routedvlm.router.errors import ConfigError

EPILOG = """example:
  routedvlm profile --model ./small --model ./large --image-sizes 224,448 --prompt-tokens 32,256 \\
      --output-tokens 1,16,64,256 --repeats 3 --out profile.json --plots-dir plots/
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="routedvlm profile", description="Measure preprocess / vision / prefill / decode latency per model on "
        "simulated inputs and fit a latency model.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="PATH_OR_ID",
                   help="checkpoint folder or hub id; repeat for several models")
    p.add_argument("--image-sizes", type=_size_list, default=[224, 448, 896], metavar="PX,...",
                   help="random-image sizes: a side in pixels (square) or WxH, e.g. 224,448,96x16 (default 224,448,896)")
    p.add_argument("--prompt-tokens", type=_int_list("--prompt-tokens"), default=[32, 256, 1024], metavar="N,...",
                   help="synthetic question lengths in tokens (default 32,256,1024)")
    p.add_argument("--output-tokens", type=_int_list("--output-tokens"), default=[1, 16, 64, 256, 1024], metavar="N,...",
                   help="output lengths; decode runs to the largest (default 1,16,64,256,1024)")
    p.add_argument("--repeats", type=int, default=3, help="measurements per grid point (default 3)")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 ... (default cpu)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: the checkpoint's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random images (default 0)")
    p.add_argument("--out", required=True, type=pathlib.Path, help="where to write profile.json")
    p.add_argument("--plots-dir", type=pathlib.Path, default=None,
                   help="where to write components.png and crossover.png (default: <out stem>_plots/ beside --out)")
    p.add_argument("--no-plots", action="store_true", help="write profile.json only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def default_plots_dir(out: pathlib.Path) -> pathlib.Path:
    """Where the plots go without --plots-dir: `<out stem>_plots/` beside --out (profile.json -> profile_plots/)."""
    return out.with_name(f"{out.stem}_plots")


def _write_json(path: pathlib.Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _summary(profile: dict) -> str:
    lines = [f"{'model':<24} {'params':>12} {'vision ms/img':>14} {'prefill ms/tok':>15} {'decode ms/tok':>14} "
             f"{'+ms per ctx tok':>16}  R² (vision/prefill/decode)  e2e MAPE"]
    for name, e in profile["models"].items():
        f, ref = e["fit"], e["reference"]
        vision = f["vision"]["intercept"] + f["vision"]["slope"] * ref["image_tokens"]
        r2 = "/".join("n/a" if f[c]["r2"] is None else f"{f[c]['r2']:.2f}" for c in ("vision", "prefill", "decode"))
        lines.append(f"{name:<24} {e['parameters']:>12,} {vision:>14.3f} {f['prefill']['slope']:>15.4f} "
                     f"{f['decode']['intercept']:>14.3f} {f['decode']['slope']:>16.6f}  {r2:<27} "
                     f"{e.get('end_to_end_mape') or float('nan'):.1f}%")
    for cp in profile.get("crossovers", []):
        n = cp["large_tokens"]
        lines.append(f"crossover: {cp['large']} answering in <= {n} tokens is as fast as {cp['small']} producing "
                     f"{cp['m']} ({cp['small_ms']:.1f} ms)" if n else
                     f"crossover: {cp['large']} is slower than {cp['small']} producing {cp['m']} tokens even for 1 token")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.out.exists() and args.out.is_dir():
        raise ConfigError(f"The `--out` path {str(args.out)!r} is a folder; pass a file path such as profile.json.")
    from .profiler import ProfileSettings, run_profile

    settings = ProfileSettings(image_sizes=args.image_sizes, prompt_tokens=args.prompt_tokens,
                               output_tokens=args.output_tokens, repeats=args.repeats, device=args.device,
                               dtype=args.dtype, seed=args.seed)
    profile = run_profile(args.model, settings, show_progress=not args.no_progress)
    _write_json(args.out, profile)
    print(_summary(profile))
    print(f"wrote {args.out}")
    if not args.no_plots:
        from .profile_plots import plot_components, plot_crossover

        plots = args.plots_dir or default_plots_dir(args.out)
        for path in (plot_components(profile, plots / "components.png"),
                     plot_crossover(profile, plots / "crossover.png")):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
