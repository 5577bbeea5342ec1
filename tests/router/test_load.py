"""load_router from folders, rule names, strategy ids and the MLflow registry; the no-torch guarantee."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from routedvlm.router import FixedRouter, MutualVerificationRouter, RouterError, load_router


def test_load_folder_and_rules(lgbm_router, feature_table, tmp_path):
    folder = lgbm_router.save(tmp_path / "r")
    assert sorted(p.name for p in folder.iterdir()) == [
        "model_large_direct.txt", "model_transfer_16.txt", "model_transfer_64.txt", "policy.json"]
    loaded = load_router(str(folder))
    assert [d.strategy for d in loaded.decide_batch(feature_table)] == [d.strategy for d in lgbm_router.decide_batch(feature_table)]
    mv = load_router("mutual-verification")
    assert isinstance(mv, MutualVerificationRouter) and mv.policy.strategies == ["large_direct", "transfer_64"]
    assert load_router("mutual-verification:16").policy.fallback == "transfer_16"
    assert load_router("mutual-verification:all").policy.fallback == "transfer_all"
    fixed = load_router("transfer_32")
    assert isinstance(fixed, FixedRouter) and fixed.decide({}).keep_tokens == 32


def test_load_errors(lgbm_router, tmp_path):
    with pytest.raises(RouterError, match=r"^Cannot load a router from '.*nowhere': no such folder"):
        load_router(str(tmp_path / "nowhere"))
    with pytest.raises(RouterError, match=r"^No policy.json in '.*empty'"):
        (tmp_path / "empty").mkdir()
        load_router(tmp_path / "empty")
    folder = lgbm_router.save(tmp_path / "r")
    (folder / "policy.json").write_text("{not json")
    with pytest.raises(RouterError, match=r"policy.json is not readable JSON"):
        load_router(folder)
    folder = lgbm_router.save(tmp_path / "typed")
    data = json.loads((folder / "policy.json").read_text()) | {"router_type": "random-forest"}
    (folder / "policy.json").write_text(json.dumps(data))
    with pytest.raises(RouterError, match=r"^Unknown router_type 'random-forest'; valid types are 'fixed', 'knn', 'lightgbm', 'lightgbm-pca', 'lora-probe', 'mf', 'mutual-verification' or 'self-probe'"):
        load_router(folder)
    folder = lgbm_router.save(tmp_path / "partial")
    (folder / "model_transfer_16.txt").unlink()
    with pytest.raises(RouterError, match=r"lacks model file\(s\) \['model_transfer_16.txt'\]"):
        load_router(folder)
    with pytest.raises(RouterError, match=r"keep-token count after ':' must be a positive integer or 'all'. Got 'x'"):
        load_router("mutual-verification:x")


@pytest.mark.slow
def test_mlflow_log_register_alias_load(lgbm_router, feature_table, tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    from routedvlm.router import CHAMPION_ALIAS, DEFAULT_MODEL_NAME, log_router_model
    from routedvlm.router.tracking import get_or_create_experiment

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    (tmp_path / "mlruns").mkdir()
    mlflow.set_experiment(experiment_id=get_or_create_experiment("router-test", uri))
    folder = lgbm_router.save(tmp_path / "router")
    info = log_router_model(folder, registered_model_name=DEFAULT_MODEL_NAME)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_latest_versions(DEFAULT_MODEL_NAME)[0].version
    client.set_registered_model_alias(DEFAULT_MODEL_NAME, CHAMPION_ALIAS, version)
    assert (tmp_path / "mlruns" / "artifacts").is_dir()  # artifacts stay beside the sqlite store

    expected = [d.to_dict() for d in lgbm_router.decide_batch(feature_table)]
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    for source in (f"models:/{DEFAULT_MODEL_NAME}@{CHAMPION_ALIAS}", f"models:/{DEFAULT_MODEL_NAME}/{version}", info.model_uri):
        loaded = load_router(source, tracking_uri=uri)
        assert [d.to_dict() for d in loaded.decide_batch(feature_table)] == expected, source
    assert not list(scratch.glob("routedvlm-router-*"))  # each download's temp folder removed once loaded
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    pyfunc = mlflow.pyfunc.load_model(f"models:/{DEFAULT_MODEL_NAME}@{CHAMPION_ALIAS}")
    out = pyfunc.predict(feature_table.head(5))
    assert list(out.columns) == ["strategy", "keep_tokens", "p_correct"]
    assert list(out["strategy"]) == [d["strategy"] for d in expected[:5]]
    assert list(out["p_correct"]) == [d["p_correct"] for d in expected[:5]]  # a real column of dicts, not JSON text
    assert [None if k is pd.NA else int(k) for k in out["keep_tokens"]] == [d["keep_tokens"] for d in expected[:5]]
    row = feature_table.iloc[0].to_dict()
    for given in (row, {k: [v] for k, v in row.items()}, [row]):  # one row as a dict, columns of lists, row dicts
        assert pyfunc.predict(given)["strategy"].tolist() == [expected[0]["strategy"]]
    sig = pyfunc.metadata.signature
    assert sig.inputs.input_names() == list(lgbm_router.policy.features)
    assert sig.outputs.input_names() == ["strategy", "keep_tokens", "p_correct"]
    model_dir = Path(mlflow.artifacts.download_artifacts(f"models:/{DEFAULT_MODEL_NAME}/{version}", dst_path=str(tmp_path / "dl")))
    requirements = (model_dir / "requirements.txt").read_text().split()
    assert not any(r.startswith("routedvlm") for r in requirements) and all("==" in r for r in requirements)
    assert (model_dir / "code" / "routedvlm" / "router" / "load.py").is_file()  # the code travels with the model
    with pytest.raises(RouterError, match=r"^Cannot download router 'models:/vlm-router@nobody'"):
        load_router(f"models:/{DEFAULT_MODEL_NAME}@nobody", tracking_uri=uri)


@pytest.mark.slow
def test_lightgbm_path_imports_no_torch_or_peft(lgbm_router, feature_table, tmp_path):
    folder = lgbm_router.save(tmp_path / "r")
    code = textwrap.dedent(f"""
        import sys
        import routedvlm.router
        from routedvlm.router import load_router
        r = load_router({str(folder)!r})
        d = r.decide({json.dumps(feature_table.iloc[0].to_dict())})
        heavy = sorted(m for m in ("torch", "peft", "transformers", "mlflow") if m in sys.modules)
        print(d.strategy, heavy)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(" []"), out.stdout
