"""The router as an MLflow pyfunc model (models-from-code: no pickle); also `log_router_model`.

MLflow executes this file to build the model, so it uses absolute imports only. The model's artifact
`router` is the router folder; `predict` returns strategy, keep_tokens and p_correct (JSON) per row.
"""

import json
from contextlib import nullcontext
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

ROUTER_ARTIFACT = "router"


class RouterPyfunc(PythonModel):
    """Loads the router folder with `load_router`; one Decision per input row."""

    def load_context(self, context):
        from routedvlm.router.load import load_router

        self.router = load_router(context.artifacts[ROUTER_ARTIFACT])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        if not isinstance(model_input, pd.DataFrame):
            model_input = pd.DataFrame(model_input)
        decisions = self.router.decide_batch(model_input)
        return pd.DataFrame(
            {
                "strategy": [d.strategy for d in decisions],
                "keep_tokens": pd.array([d.keep_tokens for d in decisions], dtype="Int64"),
                "p_correct": [json.dumps(d.p_correct) for d in decisions],
            },
            index=model_input.index,
        )


PROBE_REQUIREMENTS = ("torch", "transformers", "peft", "safetensors", "pillow")


def default_pip_requirements(router_type: str | None = None) -> list[str]:
    """Pinned versions of what loading a router needs (passing these skips MLflow's slow inference); a
    lora-probe router also needs torch, transformers, peft, safetensors and pillow."""
    from importlib.metadata import PackageNotFoundError, version

    reqs = []
    names = ("routedvlm", "lightgbm", "pandas", "numpy", "pyarrow")
    for name in names + (PROBE_REQUIREMENTS if router_type == "lora-probe" else ()):
        try:
            reqs.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            reqs.append(name)
    return reqs


def log_router_model(router_dir, name: str = "router", *, registered_model_name: str | None = None,
                     pip_requirements: list[str] | None = None, **kwargs):
    """Log the router folder as a pyfunc model (starts a run when none is active); returns ModelInfo."""
    from routedvlm.router.errors import RouterError
    from routedvlm.router.policy import POLICY_FILE

    router_dir = Path(router_dir)
    if not (router_dir / POLICY_FILE).is_file():
        raise RouterError(f"No {POLICY_FILE} in {str(router_dir)!r}; save the router (router.save(dir)) before logging it.")
    with nullcontext() if mlflow.active_run() else mlflow.start_run():
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=str(Path(__file__).resolve()),
            artifacts={ROUTER_ARTIFACT: str(router_dir.resolve())},
            pip_requirements=pip_requirements or default_pip_requirements(_router_type(router_dir)),
            registered_model_name=registered_model_name,
            **kwargs,
        )


def _router_type(router_dir: Path) -> str | None:
    try:
        return json.loads((router_dir / "policy.json").read_text()).get("router_type")
    except (OSError, ValueError, AttributeError):
        return None


mlflow.models.set_model(RouterPyfunc())
