"""Per-request prompt features: computed together (one thumbnail, its statistics once) against each image feature
computing its own statistics from a thumbnail made by `convert("RGB")` + `thumbnail` (the code before; now an RGB image
is not copied first), side by side in one run, on toy-world charts (the bundled labels' images) and on 640x480 and
1920x1080 noise (photo sizes). Values are checked equal before timing; the two codes take turns every round.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_features.py [--repeats 300]
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np


def before(question, images, names):
    """The previous computation: text features, then each image feature reading the thumbnails on its own."""
    from routedvlm.inference.features import FEATURES, FeatureContext

    ctx = FeatureContext(question=question, images=list(images))
    out = {n: FEATURES[n](ctx) for n in names if "image_" not in n or n.endswith(("count", "megapixels", "aspect"))}

    thumbs = []
    for im in images:  # the thumbnails as they were made
        t = im.convert("RGB")
        t.thumbnail((64, 64))
        thumbs.append(np.asarray(t, dtype=np.float32) / 255.0)

    def mean(fn):
        vals = [fn(a) for a in thumbs]
        return float(sum(vals) / len(vals)) if vals else 0.0

    def edges(a):
        g = a.mean(axis=2)
        return 0.0 if min(g.shape) < 2 else (abs(g[1:, :] - g[:-1, :]).mean() + abs(g[:, 1:] - g[:, :-1]).mean()) / 2

    def hasler(a):
        rg, yb = a[..., 0] - a[..., 1], 0.5 * (a[..., 0] + a[..., 1]) - a[..., 2]
        return math.hypot(rg.std(), yb.std()) + 0.3 * math.hypot(rg.mean(), yb.mean())

    def distinct(a):
        q = (a * 7.999).astype(np.int32)
        return float(len(np.unique(q[..., 0] * 64 + q[..., 1] * 8 + q[..., 2])))

    out["feat__prompt__image_gray_std"] = mean(lambda a: a.mean(axis=2).std())
    out["feat__prompt__image_edge_density"] = mean(edges)
    out["feat__prompt__image_colorfulness"] = mean(hasler)
    out["feat__prompt__image_distinct_colors"] = mean(distinct)
    return out


def timed(fns, cases, repeats):
    """[ms per call] for each of `fns`, the functions taking turns every round (a load change falls on all alike)."""
    out = [[] for _ in fns]
    for _ in range(repeats):
        for fn, times in zip(fns, out):
            for q, im in cases:
                t0 = time.perf_counter()
                fn(q, [im])
                times.append((time.perf_counter() - t0) * 1000)
    return out


def main(argv=None) -> None:
    from PIL import Image

    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference.features import compute_features, feature_names

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=300)
    args = ap.parse_args(argv)
    names = feature_names(("prompt",))
    rng = np.random.default_rng(0)
    sets = {"toy-world charts (48x32)": [(s.question, s.image) for s in make_samples("label", 20, 0)],
            "640x480 RGB": [("How many bars are taller than 3?",
                             Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8))) for _ in range(5)],
            "1920x1080 RGB": [("How many bars are taller than 3?",
                               Image.fromarray(rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8))) for _ in range(3)]}
    print(f"{'images':28s} {'before p50 ms':>14s} {'now p50 ms':>11s} {'now p99 ms':>11s} {'now / before':>13s}")
    for label, cases in sets.items():
        for q, im in cases:
            assert compute_features(q, [im], {}, names) == before(q, [im], names)
        old, new = timed([lambda q, ims: before(q, ims, names), lambda q, ims: compute_features(q, ims, {}, names)],
                         cases, max(1, args.repeats // len(cases)))
        a, b = statistics.median(old), statistics.median(new)
        print(f"{label:28s} {a:14.3f} {b:11.3f} {float(np.percentile(new, 99)):11.3f} {b / a:13.2f}")


if __name__ == "__main__":
    main()
