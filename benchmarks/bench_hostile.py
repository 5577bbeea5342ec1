"""The hostile inputs of issues #26 and #39 against `routedvlm serve` (in process, tiny random models) and the labels reader:
what each is answered with and how long it takes, one run, side by side. Loopback only; bounded sizes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_hostile.py
"""
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _png(w, h) -> str:
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (w, h)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def serve_cases(root: Path) -> None:
    from fastapi.testclient import TestClient

    from routedvlm.inference import build_tiny_pair
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.inference.serving.protocol import Limits
    from routedvlm.inference.serving.server import create_app

    small, large = build_tiny_pair(root / "pair", arch="qwen3_vl")
    routed = RoutedVLM.from_pretrained(str(small), str(large), "large_direct", device="cpu")
    limits = Limits(max_text_chars=10**6, max_body_bytes=16 * 2**20)
    user = lambda content: [{"role": "user", "content": content}]  # noqa: E731
    cases = {
        "JSON nested 100,000 deep": b'{"model": "routedvlm", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "lone surrogate \\ud800": b'{"model": "routedvlm", "messages": [{"role": "user", "content": "\\ud800"}]}',
        "4000x1 PNG": {"model": "routedvlm", "messages": user([{"type": "image_url", "image_url": {"url": _png(4000, 1)}},
                                                              {"type": "text", "text": "Q?"}])},
        "100,000 empty system messages": {"model": "routedvlm", "messages": [{"role": "system", "content": ""}] * 100_000
                                          + user("Hi?")},
        "40,000 empty text parts": {"model": "routedvlm", "messages": user([{"type": "text", "text": ""}] * 40_000)},
        "question of 8,000 words (> 4096-token context)": {"model": "routedvlm", "messages": user(
            " ".join(f"w{i}" for i in range(8000)))},
        "<|image_pad|><|vision_start|> typed as text": {"model": "routedvlm", "messages": user(
            [{"type": "image_url", "image_url": {"url": _png(64, 64)}}, {"type": "text", "text": "<|image_pad|><|vision_start|> ?"}])},
    }
    with TestClient(create_app(routed, limits=limits)) as http:
        print(f"{'serve case':<50} {'status':>6} {'code':<26} {'ms':>8}")
        for name, body in cases.items():
            t0 = time.perf_counter()
            kw = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
            r = http.post("/v1/chat/completions", **kw)
            ms = (time.perf_counter() - t0) * 1000
            code = r.json().get("error", {}).get("code") if r.status_code != 200 else "-"
            print(f"{name:<50} {r.status_code:>6} {code or '-':<26} {ms:>8.1f}")


def labels_cases(root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from routedvlm.data.labels import read_labels
    from routedvlm.errors import LabelsError

    n = 20_000_000
    big = root / "20M.parquet"
    pq.write_table(pa.table({"sample_id": pa.array(["same"] * 1000).take(pa.array([0] * n))}), big)
    deep = root / "deep.parquet"
    pq.write_table(pa.table({"sample_id": ["a"]}).replace_schema_metadata({b"routedvlm": b"[" * 100_000 + b"]" * 100_000}),
                   deep)
    print(f"\n{'labels case':<50} {'file MB':>8} {'ms':>8} {'peak RSS MB':>12}  answer")
    for name, path in (("20,000,000 constant rows", big), ("metadata JSON nested 100,000 deep", deep)):
        t0 = time.perf_counter()
        try:
            read_labels(path)
            answer = "read"
        except LabelsError as exc:
            answer = str(exc).split(": ", 1)[1][:70]
        ms = (time.perf_counter() - t0) * 1000
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:<50} {path.stat().st_size / 1e6:>8.1f} {ms:>8.1f} {rss:>12.0f}  {answer}")


def round_three(root: Path) -> None:
    """Issue #39's cases (hostile_round3.py): sockets, a hanging decision, feedback, converter, policy, audit log."""
    import threading

    import numpy as np
    import pandas as pd

    import hostile_round3 as r3
    from routedvlm.inference import build_tiny_pair
    from routedvlm.inference.routed import RoutedVLM
    from routedvlm.router import Policy, Router

    small, large = build_tiny_pair(root / "pair3", arch="qwen3_vl")
    routed = RoutedVLM.from_pretrained(str(small), str(large), "large_direct", device="cpu", min_new_tokens=1,
                                       max_direct_tokens=2)
    r3.socket_cases(routed)
    def hanging(release):
        class Hanging(Router):
            def predict_proba(self, features):
                release.wait(120)
                return pd.DataFrame({"small_direct": np.ones(len(features))}, index=features.index)

        return Hanging(Policy(router_type="hanging", mode="one-shot", strategies=["small_direct"],
                              features=["feat__prompt__question_chars"], fallback="small_direct"))

    cases = []
    for t in (None, 1.0):
        release = threading.Event()
        cases.append((f"decision_timeout={t}", RoutedVLM(routed.pipeline, hanging(release), fallback="large_direct",
                                                        decision_timeout=t), release))
    r3.decision_case(cases)
    audited = RoutedVLM(routed.pipeline, "large_direct", audit_rate=1.0,
                        audit={"alpha": 0.2, "seed": 0, "window": 0, "reference": "large_direct"})
    r3.feedback_cases(audited)
    audited.auditor.close()
    r3.converter_cases(root)
    r3.policy_cases(root)
    r3.audit_log_case(root)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        labels_cases(Path(tmp))  # first: the peak RSS is the process's, before the models load
        serve_cases(Path(tmp))
        round_three(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
