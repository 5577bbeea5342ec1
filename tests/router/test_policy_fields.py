"""Issue 39: policy.json fields checked against their meaning: the certificate's `risk_limit` (5, -1, NaN),
`reference` (transfer_999999, or a model off the ladder), `p_value` (7), a binary rule whose escalate is its
accept; and K of transfer_<K> bounded the same way in strategy ids, the K grid and a loaded policy."""
import json
import math

import pytest

from routedvlm.errors import ConfigError, RouterLoadError, UnknownStrategyError
from routedvlm.router import Policy, load_router
from routedvlm.router.strategies import MAX_KEEP_TOKENS, parse_k_grid, parse_strategy

CERT = {"bound": 0.04, "delta": 0.1, "method": "ltt", "n": 200, "loss": "regret vs large_reason",
        "reference": "large_reason", "risk_limit": 0.05, "p_value": 0.01}


def _policy(**cert):
    return {"router_type": "fixed", "mode": "one-shot", "strategies": ["large_direct"], "fallback": "large_direct",
            "rule": {"name": "fixed", "param": None, "strategy": "large_direct"}, "certificate": {**CERT, **cert}}


def _load(tmp_path, data):
    folder = tmp_path / "router"
    folder.mkdir(exist_ok=True)
    (folder / "policy.json").write_text(json.dumps(data, allow_nan=True))
    return load_router(str(folder))


def test_a_sound_certificate_loads(tmp_path):
    assert _load(tmp_path, _policy()).policy.certificate["risk_limit"] == 0.05


@pytest.mark.parametrize("field,value,message", [
    ("risk_limit", 5, r"`certificate\['risk_limit'\]` \(the promised error or regret rate\) must be a number in \[0, 1\]"),
    ("risk_limit", -1, r"`certificate\['risk_limit'\]`"),
    ("risk_limit", math.nan, r"`certificate\['risk_limit'\]`"),
    ("p_value", 7, r"`certificate\['p_value'\]` must be None or a number in \[0, 1\]. Got 7"),
    ("reference", "transfer_999999", r"`certificate\['reference'\]` must be a strategy id of the router's ladder"),
    ("reference", "mid_reason", r"`certificate\['reference'\]` 'mid_reason' runs models outside the ladder"),
])
def test_a_certificate_field_against_its_meaning(tmp_path, field, value, message):
    with pytest.raises(RouterLoadError, match=message):
        _load(tmp_path, _policy(**{field: value}))


def test_a_binary_rule_that_cannot_escalate_is_refused():
    with pytest.raises(Exception, match=r"`rule\['escalate'\]` of a 'binary' rule must differ from its `accept`"):
        Policy(router_type="lightgbm", mode="cascade", strategies=["large_direct", "large_reason"],
               paid_stages=["large_direct"], fallback="large_reason",
               rule={"name": "binary", "param": 0.5, "accept": "large_direct", "escalate": "large_direct"})


def test_k_is_bounded_the_same_everywhere(tmp_path):
    assert parse_strategy(f"transfer_{MAX_KEEP_TOKENS}").keep_tokens == MAX_KEEP_TOKENS
    for bad in ("transfer_999999", "transfer_" + "9" * 5000, "transfer_small_mid_999999"):
        with pytest.raises(UnknownStrategyError, match=r"K an integer in \[1, 65536\]"):
            parse_strategy(bad)
    with pytest.raises(ConfigError, match=r"^The K grid's values must be at most 65536"):
        parse_k_grid("16,999999999")
    with pytest.raises(ConfigError, match=r"^The K grid must be comma-separated positive integers"):
        parse_k_grid("1" * 5000)
    data = _policy()
    data.update(strategies=["transfer_999999"], fallback="transfer_999999",
                rule={"name": "fixed", "param": None, "strategy": "transfer_999999"})
    with pytest.raises(RouterLoadError, match="unknown strategy ids"):
        _load(tmp_path, data)


@pytest.mark.parametrize("flags", [["--k-grid", "999999999"], ["--strategies", "transfer_999999"]])
def test_label_refuses_a_k_no_router_could_load_before_any_work(tmp_path, capsys, flags):
    from routedvlm.cli import main

    out = tmp_path / "labels.parquet"
    code = main(["label", "--small", "s", "--large", "l", "--dataset", str(tmp_path / "none.parquet"), "--out", str(out),
                 *flags])
    err = capsys.readouterr().err
    assert code != 0 and "65536" in err and err.startswith("error: ") and not out.exists()
    assert not (tmp_path / "labels.parquet.parts").exists()


def test_a_models_lookup_in_a_missing_store_creates_nothing(tmp_path, monkeypatch):
    """Issue 39: load_router('models:/...', tracking_uri='sqlite:///<missing dir>/mlflow.db') made the folder and an
    empty 954 KB store, then said 'model not found'."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    missing = tmp_path / "nowhere" / "mlflow.db"
    with pytest.raises(RouterLoadError, match=r"there is no MLflow store at .*nowhere/mlflow.db' \(nothing was created\)"):
        load_router("models:/vlm-router@champion", tracking_uri=f"sqlite:///{missing}")
    with pytest.raises(RouterLoadError, match=r"there is no MLflow store at .*mlruns/mlflow.db"):
        load_router("models:/vlm-router@champion")  # the default store under the working folder
    assert list(tmp_path.iterdir()) == []  # no folder, no store
