"""The structural check of LightGBM trees, run on LightGBM's own re-serialization of what its parser read.

LightGBM's parser accepts child links that loop (its prediction then never returns) and reads integers loosely
(`0.0`, `0x1f` and `7abc` all parse, as their leading digits), so a check of the file's own text can disagree with
the engine. `tree_problem` therefore reads the text LightGBM writes back from its parsed model
(`Booster.model_to_string`, C `LGBM_BoosterSaveModelToString`: canonical integers, written from the arrays the
engine walks) and requires every tree to be a tree: child indices in range, every node reached exactly once from the
root, `num_leaves` leaves. Standard library only: the load-time child process (router/integrity.py) runs it too.
"""
from __future__ import annotations


def tree_problem(model_text: str) -> str | None:
    """None when every tree of `model_text` (LightGBM's own model string) is a tree, else why not (one line)."""
    for block in model_text.split("\nTree=")[1:]:
        name = "Tree=" + block.split("\n", 1)[0]
        kv = dict(line.split("=", 1) for line in block.split("\nend of trees", 1)[0].splitlines()[1:] if "=" in line)
        try:
            n = int(kv["num_leaves"])
            kids = [[int(v) for v in kv[k].split()] for k in ("left_child", "right_child")] if n > 1 else [[], []]
        except (KeyError, ValueError) as exc:
            return f"{name} cannot be checked ({type(exc).__name__}: {str(exc)[:80]})"
        if n < 1 or any(len(k) != n - 1 for k in kids):
            return f"{name} is not a tree ({n} leaves but {len(kids[0])}/{len(kids[1])} child links)"
        seen, todo = set(), [0] if n > 1 else []
        while todo:
            node = todo.pop()
            if node in seen or not -n <= node < n - 1:
                return f"{name} is not a tree (a child link loops or points nowhere)"
            seen.add(node)
            if node >= 0:
                todo += [kids[0][node], kids[1][node]]
        if n > 1 and len(seen) != 2 * n - 1:
            return f"{name} is not a tree (nodes unreachable from its root)"
    return None
