"""What each kind of damage in tests/damage_helpers.py does to a process that hands the file to LightGBM directly
(`lightgbm.Booster(model_file=...)` + one prediction, in a child process each), and to `load_router`.

    .venv/bin/python benchmarks/bench_lightgbm_damage.py
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
RAW = """
import sys, lightgbm, numpy as np
b = lightgbm.Booster(model_file=sys.argv[1])
b.predict(np.full((4, b.num_feature()), 0.9), num_threads=1)
"""


def _router(folder: pathlib.Path) -> pathlib.Path:
    import lightgbm
    import numpy as np

    from routedvlm.router import LightGBMRouter, Policy

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(300, 3))
    booster = lightgbm.train({"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
                             lightgbm.Dataset(x, (x[:, 1] > 0.5).astype(int)), num_boost_round=5)
    policy = Policy(router_type="lightgbm", mode="one-shot", strategies=["large_direct", "large_reason"], paid_stages=[],
                    features=[f"feat__prompt__x{i}" for i in range(3)], params={"constants": {"large_reason": 0.9}})
    return LightGBMRouter(policy, {"large_direct": booster}).save(folder)


def _raw(path: pathlib.Path) -> str:
    try:
        r = subprocess.run([sys.executable, "-c", RAW, str(path)], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "hangs (prediction never returns; killed after 20 s)"
    if r.returncode < 0:
        import signal

        return f"process killed by {signal.Signals(-r.returncode).name}"
    return "loads" if r.returncode == 0 else "raises " + r.stderr.decode(errors="replace").strip().splitlines()[-1][:60]


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from damage_helpers import LIGHTGBM, damaged_copy, rehash

    from routedvlm.router import load_router

    with tempfile.TemporaryDirectory() as tmp:
        folder = _router(pathlib.Path(tmp) / "router")
        print(f"{'damage':28s} {'LightGBM directly':55s} load_router (format 2 / format 1 / format 2, sha256 recomputed)")
        for kind, damage in LIGHTGBM.items():
            row = []
            for legacy in (False, True, "rehash"):
                dst = damaged_copy(folder, pathlib.Path(tmp) / f"{kind}-{legacy}", "model_large_direct.txt", damage,
                                   legacy=legacy is True)
                if legacy == "rehash":
                    rehash(dst)
                try:
                    load_router(dst)
                    row.append("loads")
                except Exception as exc:  # noqa: BLE001 - reported
                    why = "not a tree" if "is not a tree" in str(exc) else ""
                    row.append(type(exc).__name__ + (f" ({why})" if why else ""))
            raw = _raw(pathlib.Path(tmp) / f"{kind}-False" / "model_large_direct.txt")
            print(f"{kind:28s} {raw:55s} {' / '.join(row)}")


if __name__ == "__main__":
    main()
