"""The router as an MLflow pyfunc model (models-from-code: no pickle); also `log_router_model`.

MLflow executes this file to build the model, so it uses absolute imports only. The model carries everything it
needs to be rebuilt from the registry alone: the router folder (artifact `router`), routedvlm's own code
(`code/routedvlm`: the router package, plus the packages its router type's `code` names) and exact pins of
public packages only, so `mlflow models serve --env-manager virtualenv` (or `uv`) installs it anywhere. A signature
names the inputs (the policy's feature columns; a probe also reads `question` and `image`) and the outputs:
`strategy` (str), `keep_tokens` (int, null unless a `transfer_<K>`) and `p_correct` (strategy -> probability).
`predict` takes a DataFrame, a dict (one row of scalars, or columns of lists) or a list of row dicts.
"""

import json
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

from routedvlm.router.router_types import BASE_REQUIREMENTS, type_facts

ROUTER_ARTIFACT = "router"


def as_frame(model_input) -> pd.DataFrame:
    """A DataFrame from a DataFrame, a dict of scalars (one row), a dict of lists (columns) or a list of row dicts."""
    if isinstance(model_input, pd.DataFrame):
        return model_input
    if isinstance(model_input, dict) and not any(isinstance(v, (list, tuple, pd.Series)) for v in model_input.values()):
        return pd.DataFrame([model_input])
    return pd.DataFrame(model_input)


class RouterPyfunc(PythonModel):
    """Loads the router folder with `load_router`; one Decision per input row."""

    def load_context(self, context):
        from routedvlm.router.load import load_router

        self.router = load_router(context.artifacts[ROUTER_ARTIFACT])

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        frame = as_frame(model_input)
        decisions = self.router.decide_batch(frame)
        return pd.DataFrame(
            {
                "strategy": [d.strategy for d in decisions],
                "keep_tokens": pd.array([d.keep_tokens for d in decisions], dtype="Int64"),
                "p_correct": [{s: float(p) for s, p in d.p_correct.items()} for d in decisions],
            },
            index=frame.index,
        )


def router_signature(policy: dict):
    """Inputs: the feature columns (double), and the router type's `inputs` (strings; a probe's `question` and `image`, a file path);
    outputs: strategy, keep_tokens, p_correct."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, DataType, Map, Schema

    inputs = [ColSpec(DataType.double, name) for name in policy.get("features") or []]
    inputs += [ColSpec(DataType.string, name) for name in type_facts(policy.get("router_type")).inputs]
    outputs = [ColSpec(DataType.string, "strategy"), ColSpec(DataType.long, "keep_tokens", required=False),
               ColSpec(Map(DataType.double), "p_correct")]
    return ModelSignature(inputs=Schema(inputs) if inputs else None, outputs=Schema(outputs))


def input_example(policy: dict) -> pd.DataFrame | None:
    """One row of zeros for the signature's feature columns (none for a probe, which needs a real image)."""
    features = policy.get("features") or []
    if type_facts(policy.get("router_type")).inputs or not features:
        return None
    return pd.DataFrame([{name: 0.0 for name in features}])


def default_pip_requirements(router_type: str | None = None) -> list[str]:
    """Exact pins of the public packages loading a router needs (and no routedvlm pin: its code travels with the
    model); passing these also skips MLflow's slow requirement inference. A router type's `requirements` are added (a
    probe's torch, transformers, peft, ...; GPU users may override torch's build)."""
    from importlib.metadata import PackageNotFoundError, version

    reqs = []
    for name in BASE_REQUIREMENTS + type_facts(router_type).requirements:
        try:
            reqs.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            reqs.append(name)
    return reqs


def code_folder(router_type: str | None, dst: Path) -> Path:
    """`dst/routedvlm`: a copy of the installed routedvlm.errors and routedvlm.router packages (and
    the packages its router type's `code` names), which MLflow logs as the model's code and puts first on sys.path
    when it loads the model."""
    import importlib

    root = Path(dst) / "routedvlm"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text('"""routedvlm code logged with a router model (see router/mlflow_model.py)."""\n')
    packages = ["errors", "router", *type_facts(router_type).code]
    for name in packages:
        src = Path(importlib.import_module(f"routedvlm.{name}").__file__).parent
        shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def log_router_model(router_dir, name: str = "router", *, registered_model_name: str | None = None,
                     pip_requirements: list[str] | None = None, **kwargs):
    """Log the router folder as a pyfunc model (starts a run when none is active); returns ModelInfo."""
    from routedvlm.errors import RouterError
    from routedvlm.router.policy import POLICY_FILE

    router_dir = Path(router_dir)
    if not (router_dir / POLICY_FILE).is_file():
        raise RouterError(f"No {POLICY_FILE} in {str(router_dir)!r}; save the router (router.save(dir)) before logging it.")
    policy = _policy(router_dir)
    kwargs.setdefault("signature", router_signature(policy))
    example = input_example(policy)
    if example is not None:
        kwargs.setdefault("input_example", example)
    with tempfile.TemporaryDirectory(prefix="routedvlm-code-") as tmp, \
            nullcontext() if mlflow.active_run() else mlflow.start_run():
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=str(Path(__file__).resolve()),
            artifacts={ROUTER_ARTIFACT: str(router_dir.resolve())},
            code_paths=[str(code_folder(policy.get("router_type"), Path(tmp)))],
            pip_requirements=pip_requirements or default_pip_requirements(policy.get("router_type")),
            registered_model_name=registered_model_name,
            **kwargs,
        )


def _policy(router_dir: Path) -> dict:
    try:
        data = json.loads((router_dir / "policy.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


mlflow.models.set_model(RouterPyfunc())
