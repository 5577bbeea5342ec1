"""A router type is its units plus one registry line: a type written outside routedvlm, registered with one call,
trains through the generic `train-router` path with a flag generated from its settings and loads with `load_router`;
and no type's name is spelled in product code outside its units and the registry."""
import ast
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from routedvlm.cli import main
from routedvlm.data.labels.schema import compute_labels, strategies_in, write_labels
from routedvlm.router import load_router
from routedvlm.router.router_types import ROUTER_TYPES, RouterType, register_router_type, trainable
from routedvlm.training.synthetic import make_synthetic_labels

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("errors", "router", "inference", "data", "training", "routedvlm")

# A router type that lives in a user's module: P(correct) of a strategy is its training accuracy, pulled toward 1/2
# by its one setting, `shrink`. Nothing in routedvlm knows it.
BASE_RATE = '''
from dataclasses import dataclass

import numpy as np
import pandas as pd

from routedvlm.router.base import Router
from routedvlm.training.settings import RouterSettings, setting

NAME = "base-rate"


@dataclass
class BaseRateConfig(RouterSettings):
    """P(correct) of a strategy is its accuracy on the training rows, pulled toward 1/2."""

    shrink: float = setting(0.0, "share of the way from the training accuracy to 1/2")

    def problems(self):
        return [] if 0.0 <= self.shrink <= 1.0 else [f"`shrink` must be in [0, 1]; got {self.shrink!r}"]


class BaseRateRouter(Router):
    def predict_proba(self, features):
        rates = self.policy.params[NAME]["rates"]
        return pd.DataFrame({s: np.full(len(features), rates[s]) for s in self.policy.strategies}, index=features.index)


def train(config, labels, metadata):
    from routedvlm.training.labels_io import content_hash
    from routedvlm.training.split import split_labels
    from routedvlm.training.steps import base_policy, certify_and_evaluate, finish, plan

    own = config.settings[NAME]
    labels_hash = metadata.get("content_hash") or content_hash(labels)
    candidates, features, paid = plan(config, labels, metadata)
    split = split_labels(labels, config.calib_fraction, config.test_fraction, config.seed)
    rates = {s: (1 - own.shrink) * float(split.train[f"correct__{s}"].mean()) + own.shrink * 0.5 for s in candidates}
    policy = base_policy(config, split, candidates, features, paid, labels_hash, NAME,
                         {NAME: {"rates": rates, "shrink": own.shrink}})
    router = BaseRateRouter(policy)
    return finish(config, router, certify_and_evaluate(config, router, split), split, metadata, labels_hash)
'''


@pytest.fixture
def base_rate_type(tmp_path, monkeypatch):
    (tmp_path / "base_rate_type.py").write_text(BASE_RATE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield register_router_type(RouterType("base-rate", "base_rate_type:BaseRateRouter", "base_rate_type:train", "none",
                                          "base_rate_type:BaseRateConfig"))  # the one registry line
    ROUTER_TYPES.pop("base-rate", None)
    sys.modules.pop("base_rate_type", None)


@pytest.fixture
def labels_path(tmp_path):
    df = make_synthetic_labels(400, seed=5)
    df["label"] = compute_labels(df, strategies_in(df)).to_numpy()
    return write_labels(df, tmp_path / "labels.parquet",
                        {"k_grid": sorted(int(s.split("_")[1]) for s in strategies_in(df)
                                          if s.startswith("transfer_") and s != "transfer_all")})


def test_a_type_registered_with_one_call_trains_and_loads_through_the_generic_path(base_rate_type, labels_path,
                                                                                    tmp_path, capsys):
    assert "base-rate" in trainable()
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--router base-rate: P(correct) of a strategy is its accuracy on the training rows" in out
    assert "--shrink SHRINK share of the way from the training accuracy to 1/2 (default: 0.0)" in out

    rc = main(["train", "--router", "base-rate", "--shrink", "0.5", "--data", str(labels_path), "--no-mlflow",
               "--mode", "one-shot", "--output-dir", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr().err
    router = load_router(tmp_path / "run" / "router")
    assert type(router).__name__ == "BaseRateRouter" and router.policy.router_type == "base-rate"
    params = router.policy.params["base-rate"]
    assert params["shrink"] == 0.5
    assert all(0.25 <= r <= 0.75 for r in params["rates"].values())  # half way to 1/2 from an accuracy in [0, 1]
    proba = router.predict_proba(make_synthetic_labels(10, seed=9)[router.policy.features])
    assert np.allclose(proba.to_numpy(), [[params["rates"][s] for s in router.policy.strategies]] * 10)

    rc = main(["train", "--router", "base-rate", "--shrink", "2", "--data", str(labels_path), "--no-mlflow",
               "--output-dir", str(tmp_path / "bad")])
    assert rc == 2 and "error: Invalid train-router configuration: `shrink` must be in [0, 1]; got 2.0" in capsys.readouterr().err


def test_a_registered_name_cannot_be_taken_twice(base_rate_type):
    from routedvlm.errors import RouterLoadError

    with pytest.raises(RouterLoadError, match=r"^Router type 'base-rate' is already registered; choose another name\.$"):
        register_router_type(base_rate_type)


def _unit(target: str) -> Path:
    """The folder (or, for a module at a package's top, the file) of a registry entry's "module:attribute"."""
    parts = target.partition(":")[0].split(".")[1:]
    path = ROOT.joinpath(*parts)
    return path if path.is_dir() else path.parent if len(parts) >= 3 else path.with_suffix(".py")


def _spelled(source: str, name: str) -> list[int]:
    """The lines of the string literals in `source` that are exactly `name`."""
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and n.value == name]


def test_no_trainable_type_name_is_spelled_outside_its_units_and_the_registry():
    """A string literal equal to a type's name, anywhere in the product code but the registry and the type's own
    folders (its runtime, trainer and settings, as its registry entry names them): such a literal is a dispatch on the
    type that a new type would have to extend. (`fixed` and `mutual-verification` are also decision-rule names, the
    rule family's vocabulary, and are not checked here.)"""
    found = []
    for name in trainable():
        entry = ROUTER_TYPES[name]
        units = {_unit(t) for t in (entry.runtime, entry.trainer, entry.config) if t}
        for pkg in PRODUCT:
            for path in (ROOT / pkg).rglob("*.py"):
                if path == ROOT / "router" / "router_types.py" or any(path == u or u in path.parents for u in units):
                    continue
                found += [f"{path.relative_to(ROOT)}:{line}: {name!r}" for line in _spelled(path.read_text(), name)]
    assert not found, "router type names outside their units (ask router_types' facts instead):\n" + "\n".join(found)


def test_the_name_check_finds_a_spelled_name():
    """The check above can fail: a dispatch on a type's name is found; its name in prose or a longer string is not."""
    code = textwrap.dedent('''
        """Prices a lightgbm router."""
        def cost(kind):
            return 2.0 if kind == "lightgbm" else 1.0 if kind == "lightgbm-v2" else 0.5
    ''')
    assert _spelled(code, "lightgbm") == [4]


def test_the_demo_and_the_checkpoint_check_ask_the_registry(base_rate_type):
    from routedvlm.errors import ConfigError
    from routedvlm.router.router_types import is_rule
    from routedvlm.training.demo.routers import DEFAULT_ROUTERS, FULL_ROUTERS, parse_routers
    from routedvlm.training.demo.toy import DemoConfig

    assert DEFAULT_ROUTERS == DemoConfig().routers == "lightgbm"  # demo_default: a run of minutes
    assert FULL_ROUTERS == DemoConfig(full=True).routers == "lightgbm,lora-probe"  # in_demo: --full, --quick
    assert parse_routers("lora-probe, lightgbm") == ["lora-probe", "lightgbm"]
    with pytest.raises(ConfigError, match=r"^The `routers` setting must list router types from 'lightgbm' or "
                                          r"'lora-probe', comma-separated\. Got 'base-rate' instead\.$"):
        parse_routers("base-rate")  # registered, but not marked in_demo
    assert [is_rule(n) for n in ("fixed", "mutual-verification", "lightgbm", "base-rate", "unregistered")] == [
        True, True, False, False, False]  # an unregistered type is warned about like a learned one
