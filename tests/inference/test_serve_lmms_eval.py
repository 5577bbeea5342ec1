"""routedvlm serve evaluated by lmms-eval as a user runs it (issue #38): its `openai` model type on a small local task
(integrations/clients/lmms_task: a YAML task, `dataset_path: json` with `data_files`, doc_to_visual / doc_to_text /
process_results in utils.py, passed with `--include_path`), built from toy images. lmms-eval's dependency set is
large (torch, datasets, ...) and conflicts with the project lock, so it runs in its own venv (.venv-lmms, built by
`make lmms-env`); its CLI runs through integrations/clients/lmms_eval_cpu.py (`python -m lmms_eval` plus the torchvision
import shim that CPU torch needs); marked `lmms` (`make test-lmms`).

The reported metric must be what the served answers give: the test first asks the server the task's questions
itself (the same text + PNG image lmms-eval sends), makes every other sample's gold answer the served answer and the
rest a wrong one, and expects lmms-eval's exact match to be exactly that fraction, with its logged responses equal to
the served answers."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from serve_helpers import KEY, data_url, post

pytestmark = pytest.mark.lmms
ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = {"square": "What colour is the square?", "wide": "How many boxes are there?",
             "tall": "Which bar is tallest?", "square2": "Is it red?"}


def served_answer(served, image, question) -> str:
    body = {"model": "routedvlm", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": question},
                                                       {"type": "image_url", "image_url": {"url": data_url(image)}}]}]}
    resp = post(served["url"], body)
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["message"]["content"]


def test_lmms_eval_openai_model_scores_the_served_answers(served, images, tmp_path):
    python = ROOT / os.environ.get("LMMS_VENV", ".venv-lmms") / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: build lmms-eval's venv with `make lmms-env`")
    rows, answers = [], []
    for i, (name, question) in enumerate(QUESTIONS.items()):
        image = images[name.rstrip("2")]
        path = tmp_path / f"{name}.png"
        image.save(path)
        answer = served_answer(served, image, question)
        answers.append(answer)
        rows.append({"image": str(path), "question": question, "answer": answer if i % 2 == 0 else answer + " (not)"})
    (tmp_path / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "results"
    run = subprocess.run(
        [str(python), str(ROOT / "integrations" / "clients" / "lmms_eval_cpu.py"), "--model", "openai",
         "--model_args", f"model_version=routedvlm,base_url={served['url']}/v1,api_key={KEY},num_concurrent=1",
         "--tasks", "routedvlm_toy", "--include_path", str(ROOT / "integrations" / "clients" / "lmms_task"),
         "--batch_size", "1", "--output_path", str(out), "--log_samples"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OPENAI_API_KEY": KEY})
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    result = json.loads(next(out.rglob("*_results.json")).read_text())["results"]["routedvlm_toy"]
    assert result["exact_match,none"] == pytest.approx(sum(i % 2 == 0 for i in range(len(rows))) / len(rows))
    logged = [json.loads(line) for f in out.rglob("*_samples_routedvlm_toy.jsonl") for line in f.read_text().splitlines()]
    by_doc = {s["doc_id"]: s["filtered_resps"] if isinstance(s["filtered_resps"], str) else s["filtered_resps"][0]
              for s in logged}
    assert [by_doc[i] for i in range(len(rows))] == answers
