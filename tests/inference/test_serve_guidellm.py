"""routedvlm serve measured by guidellm as a user runs it (issue #38): its CLI with its defaults (backend
`openai_http`, which streams and sends `stream_options.continuous_usage_stats`), apart from the target, the model, a
small local prompt file, the synchronous profile (guidellm requires one) and a request cap. guidellm's pins conflict
with the project lock, so it runs in .venv-clients (`make clients-env`, which `make test` runs first); marked
`clients`. The report must count every request as successful, with TTFT and ITL measured from a real token stream."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from serve_helpers import KEY, QUESTIONS

pytestmark = pytest.mark.clients
ROOT = Path(__file__).resolve().parents[2]


def guidellm(served, model: str, data: Path, out: Path) -> dict:
    exe = ROOT / os.environ.get("CLIENTS_VENV", ".venv-clients") / "bin" / "guidellm"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build the clients venv with `make clients-env`")
    run = subprocess.run([str(exe), "run", "--backend", f"kind=openai_http,target={served['url']},model={model},api_key={KEY}",
                          "--profile", "kind=synchronous", "--data", f"kind=json_file,path={data}",
                          "--constraint", f"kind=max_requests,count={len(QUESTIONS)}",
                          "--output", f"kind=json,path={out}", "--disable-progress"],
                         capture_output=True, text=True, timeout=600, cwd=out.parent,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    return json.loads(out.read_text())["benchmarks"][0]


@pytest.mark.parametrize("model", ["routedvlm", "small"])
def test_guidellm_reports_every_request_with_token_timings(served, tmp_path, model):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in QUESTIONS))
    bench = guidellm(served, model, data, tmp_path / "report.json")
    metrics = bench["metrics"]
    assert metrics["request_totals"] == {"successful": len(QUESTIONS), "errored": 0, "incomplete": 0,
                                         "total": len(QUESTIONS)}
    ok = {k: metrics[k]["successful"] for k in ("time_to_first_token_ms", "inter_token_latency_ms", "output_token_count",
                                                "request_latency", "request_streaming_iterations_count")}
    assert ok["output_token_count"]["min"] >= 1 and ok["time_to_first_token_ms"]["count"] == len(QUESTIONS)
    # the first token comes before the end of the request, and the tokens after it came in more than one piece
    assert 0 < ok["time_to_first_token_ms"]["mean"] < ok["request_latency"]["mean"] * 1000
    assert ok["request_streaming_iterations_count"]["max"] > 1
    assert ok["inter_token_latency_ms"]["count"] > 0 and ok["inter_token_latency_ms"]["mean"] > 0
