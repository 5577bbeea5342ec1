"""MLflow's own serving of the champion router: `mlflow models serve -m models:/vlm-router@champion` answers
/invocations with real columns, from an environment in which routedvlm is not installed (the model carries its
code), with the local env manager (offline, seconds; the virtualenv / uv managers build the same environment
from the registry: README, "Serving the router with MLflow")."""
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bare_env(root: Path) -> Path:
    """A venv that sees this environment's packages but not routedvlm (its editable finder is a .pth file, which a
    plain path entry does not run): what `--env-manager virtualenv` builds from requirements.txt, offline. Its bin
    holds `uvicorn`, which `--env-manager local` runs from PATH."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = root / "bin" / "python"
    uvicorn = root / "bin" / "uvicorn"
    uvicorn.write_text(f"#!{python}\nimport sys\nfrom uvicorn.main import main\nsys.exit(main())\n")
    uvicorn.chmod(0o755)
    probe = subprocess.run([str(python), "-c", "import mlflow, lightgbm, uvicorn\nimport routedvlm.router"],
                           capture_output=True, text=True)
    assert "No module named 'routedvlm'" in probe.stderr, probe.stderr  # only the model's own copy can serve
    return root


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _wait_ready(url: str, proc, log: Path, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlflow models serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/ping", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow models serve did not answer /ping within {seconds} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_mlflow_models_serve_answers_for_the_champion_trained_on_pandas_filtered_labels(labels_path, tmp_path,
                                                                                         monkeypatch):
    from mlflow import MlflowClient

    from routedvlm.data.labels.schema import content_hash, read_labels
    from routedvlm.router.load import load_router
    from routedvlm.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    df, _ = read_labels(labels_path)
    filtered = df[df["dataset"].notna()].iloc[:600]
    filtered.to_parquet(tmp_path / "filtered.parquet")  # pandas: no routedvlm metadata
    assert main(["train", "--data", "filtered.parquet", "--num-boost-round", "30", "--output-dir", "r"]) == 0
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    champion = client.get_model_version_by_alias("vlm-router", "champion")
    dataset = client.get_run(champion.run_id).inputs.dataset_inputs[0].dataset
    assert dataset.digest == content_hash(filtered)[:16]  # the digest MLflow records is computed on load

    bare, port = _bare_env(tmp_path / "bare"), _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PATH": f"{bare / 'bin'}:{os.environ['PATH']}"}
    log = tmp_path / "serve.log"
    cmd = [str(bare / "bin" / "python"), "-m", "mlflow", "models", "serve", "-m", "models:/vlm-router@champion",
           "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc, log)
        router = load_router(tmp_path / "r" / "router")
        rows = filtered[router.policy.features].head(5)
        expected = router.decide_batch(rows)
        got = _post(f"{url}/invocations", {"dataframe_records": rows.to_dict(orient="records")})["predictions"]
        assert [g["strategy"] for g in got] == [d.strategy for d in expected]
        assert [g["keep_tokens"] for g in got] == [d.keep_tokens for d in expected]
        for g, d in zip(got, expected):
            assert g["p_correct"] == pytest.approx(d.p_correct)  # an object, not a JSON string inside the JSON
        one = _post(f"{url}/invocations", {"inputs": rows.iloc[0].to_dict()})["predictions"]
        assert [p["strategy"] for p in one] == [expected[0].strategy]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
