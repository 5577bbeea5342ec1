"""PNG plots of a `routedvlm profile` result: where each model's time goes, and where a large model wins.

`plot_components` stacks preprocess / vision / prefill / decode per model and image size; `plot_crossover` draws
end-to-end latency against output tokens for every model, with the crossover points N*(M) of
`crossover.crossover_tokens` marked. matplotlib (Agg backend) is imported inside the functions.
"""
from __future__ import annotations

import pathlib
import statistics

from .crossover import crossover_points
from .latency_model import LatencyModel, models_by_size

COMPONENT_COLORS = {"preprocess": "#bbbbbb", "vision": "#4c72b0", "prefill": "#dd8452", "decode": "#55a868"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _median_setting(values) -> int:
    values = sorted(values)
    return int(values[(len(values) - 1) // 2])


def _mean_ms(rows, **where) -> float:
    vals = [r["ms"] for r in rows if all(r.get(k) == v for k, v in where.items())]
    return statistics.fmean(vals) if vals else 0.0


def component_table(profile: dict, decode_tokens: int | None = None) -> list[dict]:
    """Rows {model, image_size, preprocess, vision, prefill, decode} in ms, at each model's reference prompt length.

    preprocess, vision and prefill are measured means; decode is the fitted cost of `decode_tokens` tokens
    (default: the median output-token setting).
    """
    settings = profile["settings"]
    n_out = int(decode_tokens or _median_setting(settings["output_tokens"]))
    rows = []
    for name, entry in profile["models"].items():
        meas, ref = entry["measurements"], entry["reference"]
        lm = LatencyModel.load(profile, model=name)
        for size in settings["image_sizes"]:
            prefill_rows = [r for r in meas["prefill"] if r["image_size"] == size and r["prompt_tokens"] == ref["prompt_tokens"]]
            context = int(statistics.fmean(r["tokens"] for r in prefill_rows)) if prefill_rows else ref["prefill_tokens"]
            rows.append({
                "model": name, "image_size": size,
                "preprocess": _mean_ms(meas.get("preprocess", []), image_size=size),
                "vision": _mean_ms(meas["vision"], image_size=size),
                "prefill": statistics.fmean(r["ms"] for r in prefill_rows) if prefill_rows else 0.0,
                "decode": lm.decode_ms(n_out, context),
            })
    return rows


def plot_components(profile: dict, path, decode_tokens: int | None = None) -> pathlib.Path:
    """Stacked bars: one bar per (model, image size), one segment per component. Returns the PNG path."""
    plt = _pyplot()
    rows = component_table(profile, decode_tokens)
    n_out = int(decode_tokens or _median_setting(profile["settings"]["output_tokens"]))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(rows) + 3.5), 3.6), dpi=90)
    labels = [f"{r['model']}\n{r['image_size']}px" for r in rows]
    bottom = [0.0] * len(rows)
    for comp, color in COMPONENT_COLORS.items():
        vals = [r[comp] for r in rows]
        label = f"decode ({n_out} tokens, fit)" if comp == "decode" else comp
        ax.bar(range(len(rows)), vals, bottom=bottom, color=color, label=label, width=0.7)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("ms")
    ax.set_title("Where the time goes (per model and image size)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig, plt, path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_crossover(profile: dict, path, m_values=None) -> pathlib.Path:
    """End-to-end ms vs output tokens (fit: lines, measured: dots) per model; crossovers N*(M) marked."""
    plt = _pyplot()
    points = crossover_points(profile, m_values)
    ends = list(profile["settings"]["output_tokens"]) + [p["m"] for p in points]
    n_max = int(max(ends + [p["large_tokens"] or 1 for p in points] + [2]) * 1.5)
    xs = sorted({max(1, round(1.25 ** k)) for k in range(0, 200) if 1.25 ** k <= n_max} | {n_max})
    fig, ax = plt.subplots(figsize=(6.0, 4.0), dpi=90)
    colors = {}
    for name in models_by_size(profile):
        entry = profile["models"][name]
        lm, ref = LatencyModel.load(profile, name), entry["reference"]
        ys = [lm.end_to_end_ms(x, ref["prefill_tokens"], ref["image_tokens"]) for x in xs]
        (line,) = ax.plot(xs, ys, label=f"{name} (fit)")
        colors[name] = line.get_color()
        pts = [r for r in entry["measurements"].get("end_to_end", [])
               if r["image_size"] == ref["image_size"] and r["prompt_tokens"] == ref["prompt_tokens"]]
        ax.scatter([r["output_tokens"] for r in pts], [r["ms"] for r in pts], s=10, color=line.get_color())
    for cp in points:
        ax.axhline(cp["small_ms"], color=colors[cp["small"]], lw=0.6, ls=":")
        ax.plot([cp["m"]], [cp["small_ms"]], "o", mfc="none", color=colors[cp["small"]])
        if cp["large_tokens"] is not None:
            ax.plot([cp["large_tokens"]], [cp["small_ms"]], "x", color=colors[cp["large"]])
            ax.annotate(f"N*({cp['m']})={cp['large_tokens']}", (cp["large_tokens"], cp["small_ms"]),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("output tokens")
    ax.set_ylabel("end-to-end ms (one image, reference prompt)")
    ax.set_title("Large model answering in N tokens vs small model producing M (o = M, x = N*(M))", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, plt, path)
