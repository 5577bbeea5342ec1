"""Load any router: a folder with policy.json, an MLflow `models:/` or `runs:/` URI, a rule name, or a strategy id.

Folders are read by `folder.py` (router types by name, imported lazily, so a LightGBM router never imports torch).
MLflow URIs download the router folder artifact; nothing is unpickled.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from routedvlm.errors import RouterError, RouterLoadError, one_of

from .base import Router
from .folder import load_folder
from .policy import POLICY_FILE
from .strategies import is_strategy

log = logging.getLogger(__name__)

RULE_NAMES = ("mutual-verification",)
MLFLOW_SCHEMES = ("models:/", "runs:/")
ROUTER_ARTIFACT = "router"


def load_router(path_or_uri, *, tracking_uri: str | None = None) -> Router:
    """A router from a folder, `models:/name@alias`, `models:/name/version`, `runs:/<id>/<path>`,
    `mutual-verification` (also `mutual-verification:<K>`), or a strategy id (a fixed policy).
    An existing folder wins over a rule name or strategy id of the same spelling."""
    if isinstance(path_or_uri, Router):
        return path_or_uri
    text = str(path_or_uri)
    if text.startswith(MLFLOW_SCHEMES):  # downloaded into a temp folder, removed once loaded (routers load eagerly)
        dst = tempfile.mkdtemp(prefix="routedvlm-router-")
        try:
            return load_folder(download_router(text, tracking_uri=tracking_uri, dst=dst))
        finally:
            shutil.rmtree(dst, ignore_errors=True)
    if Path(text).is_dir():
        return load_folder(text)
    rule, _, k = text.partition(":")
    if rule in RULE_NAMES:
        from .baselines import make_rule_router

        kw = {}
        if k:
            kw["keep_tokens"] = None if k == "all" else _positive_int(k, text)
        return make_rule_router(rule, **kw)
    if is_strategy(text):
        from .baselines import FixedRouter

        return FixedRouter(text)
    raise RouterLoadError(
        f"Cannot load a router from {text!r}: no such folder, and it is not an MLflow URI "
        f"(models:/name@alias, models:/name/version, runs:/...), a rule ({one_of(RULE_NAMES)}) or a strategy id "
        "(e.g. 'large_direct'). Pass the folder train-router wrote."
    )


def _positive_int(k: str, text: str) -> int:
    if k.isdigit() and int(k) > 0:
        return int(k)
    raise RouterError(f"In {text!r} the keep-token count after ':' must be a positive integer or 'all'. Got {k!r}.")


def download_router(uri: str, *, tracking_uri: str | None = None, dst: str | None = None) -> Path:
    """Download a logged router model and return the local router folder (the one with policy.json)."""
    import mlflow

    from .tracking import resolve_tracking_uri, setup_mlflow, sqlite_path

    store = sqlite_path(resolve_tracking_uri(tracking_uri, create=False))
    if store is not None and (not store.is_file() or store.stat().st_size == 0):  # a lookup never creates a store
        raise RouterLoadError(f"Cannot load router {uri!r}: there is no MLflow store at {str(store)!r} (nothing was "
                              "created). Pass --tracking-uri / tracking_uri= of the store train-router registered it "
                              "in, or the router folder itself.")
    dst = dst or tempfile.mkdtemp(prefix="routedvlm-router-")
    try:
        setup_mlflow(tracking_uri)
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=dst))
    except Exception as exc:  # MlflowException, OSError...: report uniformly
        raise RouterLoadError(f"Cannot download router {uri!r} from MLflow ({type(exc).__name__}: {exc}).") from None
    return _router_dir(local, uri)


def _router_dir(local: Path, uri: str) -> Path:
    if (local / POLICY_FILE).is_file():
        return local
    try:
        from mlflow.models import Model

        conf = Model.load(str(local)).flavors["python_function"]["artifacts"][ROUTER_ARTIFACT]
        candidate = local / conf["path"]
        if (candidate / POLICY_FILE).is_file():
            return candidate
    except Exception as exc:
        log.debug("MLmodel of %s names no router artifact: %s", uri, exc)
    found = sorted(local.rglob(POLICY_FILE))
    if not found:
        raise RouterLoadError(f"The MLflow model {uri!r} contains no {POLICY_FILE}; it was not logged by log_router_model.")
    return found[0].parent
