"""Several binary LightGBM models as one LightGBM model with one output per model, so one C call scores them all.

LightGBM sums a multiclass model's trees per class in iteration order (`GBDT::PredictRaw`: output[k] += tree[i*N+k]),
and a binary model's probability is `1 / (1 + exp(-sigmoid * raw))` (`BinaryLogloss::ConvertOutput`). So the trees of N
binary boosters, interleaved as the classes of one N-class model (a booster with fewer trees padded with single-leaf
trees of value 0, an exact +0.0), give each booster's raw score from one walk, in the order each booster sums them;
the sigmoid is then applied here, as LightGBM applies it. The merged text is built from the boosters' own
`model_to_string` (trees LightGBM parsed and `trees.tree_problem` passed); the caller parses it with LightGBM and checks
LightGBM's parse again. Boosters of another objective than `binary` are not merged (None).
"""
from __future__ import annotations

ZERO_TREE = ("num_leaves=1\nnum_cat=0\nsplit_feature=\nsplit_gain=\nthreshold=\ndecision_type=\nleft_child=\n"
             "right_child=\nleaf_value=0\nleaf_weight=\nleaf_count=\ninternal_value=\ninternal_weight=\n"
             "internal_count=\nis_linear=0\nshrinkage=1")


def sigmoid_of(model_text: str) -> float | None:
    """The `sigmoid` of a binary model's `objective=binary sigmoid:<s>` line; None for any other objective."""
    for line in model_text.split("\nTree=", 1)[0].splitlines():
        if line.startswith("objective="):
            kind, *options = line[len("objective="):].split()
            params = dict(o.split(":", 1) for o in options if ":" in o)
            if kind != "binary":
                return None
            try:
                return float(params.get("sigmoid", "1"))
            except ValueError:
                return None
    return None


def _split(model_text: str) -> tuple[str, list[str]]:
    """(header, tree bodies without their `Tree=i` line) of a LightGBM model string."""
    head, _, rest = model_text.partition("\nTree=")
    trees = rest.split("\nend of trees", 1)[0].split("\nTree=") if rest else []
    return head, [t.split("\n", 1)[1].strip("\n") if "\n" in t else "" for t in trees]


def merged_text(model_texts: list[str]) -> tuple[str, list[float]] | None:
    """(one N-output model string, the sigmoid of each input) for N binary model strings over the same features, or
    None when one is not a binary model or the headers disagree on the feature count."""
    sigmoids = [sigmoid_of(t) for t in model_texts]
    if not model_texts or any(s is None for s in sigmoids):
        return None
    parts = [_split(t) for t in model_texts]
    heads = [dict(line.split("=", 1) for line in h.splitlines() if "=" in line) for h, _ in parts]
    if len({h.get("max_feature_idx") for h in heads}) != 1:
        return None
    n = len(model_texts)
    header = []
    for line in parts[0][0].splitlines():
        key = line.split("=", 1)[0]
        if key == "tree_sizes":
            continue  # LightGBM then reads the trees one after another
        header.append({"num_class": f"num_class={n}", "num_tree_per_iteration": f"num_tree_per_iteration={n}",
                       "objective": f"objective=multiclass num_class:{n}"}.get(key, line))
    out = ["\n".join(header).rstrip("\n") + "\n"]
    rounds = max(len(trees) for _, trees in parts)
    for i in range(rounds):
        for k, (_, trees) in enumerate(parts):
            out.append(f"Tree={i * n + k}\n{trees[i] if i < len(trees) else ZERO_TREE}\n")
    return "\n".join(out) + "\nend of trees\n", [float(s) for s in sigmoids]
