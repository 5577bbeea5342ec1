"""Where MLflow keeps runs and registered routers by default: a sqlite store under ./mlruns.

MLflow 3's file store is deprecated, so the local default is `sqlite:///<cwd>/mlruns/mlflow.db` with
artifacts in `<cwd>/mlruns/artifacts`. `import mlflow` happens only inside `setup_mlflow`.
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_TRACKING_DIR = "mlruns"
DEFAULT_MODEL_NAME = "vlm-router"
CHAMPION_ALIAS = "champion"
DEFAULT_EXPERIMENT = "routedvlm"


def resolve_tracking_uri(uri: str | None = None) -> str:
    """`uri` if given (also $MLFLOW_TRACKING_URI), else the local sqlite store (folder created)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    folder = Path.cwd().resolve() / DEFAULT_TRACKING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def default_artifact_location(uri: str | None = None) -> str:
    """Artifact folder beside a local sqlite store (`<store folder>/artifacts`), else `<cwd>/mlruns/artifacts`."""
    if uri and uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///"):]).resolve().parent / "artifacts")
    return str(Path.cwd().resolve() / DEFAULT_TRACKING_DIR / "artifacts")


def setup_mlflow(uri: str | None = None) -> str:
    """Point MLflow tracking and registry at `uri` (default: the local sqlite store); returns the URI."""
    import mlflow

    uri = resolve_tracking_uri(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return uri


def get_or_create_experiment(name: str = DEFAULT_EXPERIMENT, uri: str | None = None) -> str:
    """Experiment id of `name`, created with a local artifact location when the store is sqlite."""
    import mlflow

    uri = setup_mlflow(uri)
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = default_artifact_location(uri) if uri.startswith("sqlite:") else None
    if location:
        location = Path(location).as_uri()
    return mlflow.create_experiment(name, artifact_location=location)
