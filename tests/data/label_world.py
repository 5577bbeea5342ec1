"""Helpers of the labelling tests: a tiny model pair + a local parquet data set, CLI arguments, label comparison."""
import io
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pandas as pd


def png(color) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), color).save(buf, format="PNG")
    return buf.getvalue()


def make_world(root, n_rows: int, broken=()) -> SimpleNamespace:
    """Tiny random model pair and `n_rows` samples (ids s000...; rows in `broken` get bytes that are no image)."""
    from routedvlm.inference import build_tiny_pair

    small, large = build_tiny_pair(root / "models")
    rows = [{"sample_id": f"s{i:03d}", "question": f"What color is bar {i}?", "answer": ["red"],
             "image": png((20 * i % 256, 120, 60))} for i in range(n_rows)]
    for i in broken:
        rows[i]["image"] = b"not an image"
    data = root / "bars.parquet"
    pd.DataFrame(rows).to_parquet(data)
    return SimpleNamespace(root=root, small=str(small), large=str(large), data=str(data), n=n_rows,
                           ids=[r["sample_id"] for r in rows])


def label_args(world, out, *extra) -> list:
    return ["--small", world.small, "--large", world.large, "--dataset", world.data, "--out", str(out),
            "--k-grid", "2,4", "--max-new-tokens", "3", "--min-new-tokens", "2", "--max-reason-tokens", "6",
            "--min-reason-tokens", "6", "--device", "cpu", "--no-progress", *extra]


def ladder_args(world, out, *extra, models=None) -> list:
    """`label_args` for a three-model ladder: small, small (as mid), large unless `models` are given."""
    models = models or [world.small, world.small, world.large]
    return [*(x for m in models for x in ("--model", m)), "--dataset", world.data, "--out", str(out), "--k-grid", "2",
            "--max-new-tokens", "3", "--min-new-tokens", "2", "--max-reason-tokens", "6", "--min-reason-tokens", "6",
            "--device", "cpu", "--no-progress", *extra]


def label(*argv) -> int:
    from routedvlm.data.labelling.cli import main

    return main(list(argv))


def label_cli(*argv) -> int:
    """The `routedvlm` entry point (errors become `error: ...` on stderr and exit 2)."""
    from routedvlm.cli import main

    return main(["label", *argv])


def start_label_process(world, out, *extra) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "routedvlm.cli", "label", *label_args(world, out, *extra)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})


def wait_for_parts(store, proc, n: int = 1, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while len(store.part_files()) < n and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)


def kill(proc, sig=signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=120)


def same_labels(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal answers, correctness, output tokens, features and failed samples (latencies are wall clock)."""
    cols = [c for c in a.columns if c.startswith(("answer__", "correct__", "output_tokens__", "feat__"))]
    cols += ["sample_id", "question", "reference"]
    assert sorted(cols) == sorted(c for c in b.columns if c in cols)

    def canon(df):
        out = df[cols].assign(failed=df["error"].notna()).sort_values("sample_id")
        return out.reset_index(drop=True)

    pd.testing.assert_frame_equal(canon(a), canon(b), check_exact=False, rtol=1e-6)
