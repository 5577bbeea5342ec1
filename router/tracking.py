"""Where MLflow keeps runs and registered routers by default: a sqlite store under ./mlruns.

MLflow 3's file store is deprecated, so the local default is `sqlite:///<cwd>/mlruns/mlflow.db` with
artifacts in `<cwd>/mlruns/artifacts`. `import mlflow` happens only inside `setup_mlflow`.
A sqlite store is created or migrated under a file lock beside it (`<db>.lock`, `store_lock`), which train-router
also holds while it logs, registers and promotes; a server store relies on the server's own semantics.
"""
from __future__ import annotations

import os
import threading
from contextlib import nullcontext
from pathlib import Path

from routedvlm.errors import TrackingStoreError

DEFAULT_TRACKING_DIR = "mlruns"
DEFAULT_MODEL_NAME = "vlm-router"
CHAMPION_ALIAS = "champion"
DEFAULT_EXPERIMENT = "routedvlm"


def resolve_tracking_uri(uri: str | None = None, *, create: bool = True) -> str:
    """`uri` if given (also $MLFLOW_TRACKING_URI), else the local sqlite store (its folder created unless `create`
    is False: a lookup creates nothing)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    folder = Path.cwd().resolve() / DEFAULT_TRACKING_DIR
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def default_artifact_location(uri: str | None = None) -> str:
    """Artifact folder beside a local sqlite store (`<store folder>/artifacts`), else `<cwd>/mlruns/artifacts`."""
    if uri and uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///"):]).resolve().parent / "artifacts")
    return str(Path.cwd().resolve() / DEFAULT_TRACKING_DIR / "artifacts")


LOCK_TIMEOUT_S = 900.0
_LOCKS: dict[str, object] = {}
_LOCKS_GUARD = threading.Lock()


def sqlite_path(uri: str | None) -> Path | None:
    """The database file of a `sqlite:///` URI (None for any other store)."""
    if not uri or not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?", 1)[0]).resolve()


def store_lock(uri: str | None):
    """A reentrant, process-exclusive file lock beside a local sqlite store (`<db>.lock`; released by the OS when
    the holder dies); a no-op context for any other store. One lock object per store in a process."""
    path = sqlite_path(uri)
    if path is None:
        return nullcontext()
    import inspect

    from filelock import FileLock

    key = str(path) + ".lock"
    with _LOCKS_GUARD:
        if key not in _LOCKS:
            path.parent.mkdir(parents=True, exist_ok=True)
            # an OS lock only: a "soft" lock file would outlive a killed holder and block every later run
            hard = {"fallback_to_soft": False} if "fallback_to_soft" in inspect.signature(FileLock).parameters else {}
            _LOCKS[key] = FileLock(key, timeout=LOCK_TIMEOUT_S, **hard)
        return _LOCKS[key]


def setup_mlflow(uri: str | None = None) -> str:
    """Point MLflow tracking and registry at `uri` (default: the local sqlite store); returns the URI.
    A sqlite store is created (or its schema checked) now, under `store_lock`, so concurrent processes never
    create or migrate one store at the same time."""
    import mlflow

    uri = resolve_tracking_uri(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    path = sqlite_path(uri)
    if path is not None:
        with store_lock(uri):
            try:
                _create_sqlite_store(path)
                client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
                client.search_experiments(max_results=1)  # opens the store: checks its schema
                client.search_registered_models(max_results=1)
            except Exception as exc:  # noqa: BLE001 - MlflowException, SQLAlchemy, alembic, OSError: one message
                raise TrackingStoreError(
                    f"The MLflow store {str(path)!r} cannot be opened ({type(exc).__name__}: {one_line(exc)}). If an "
                    f"older routedvlm was interrupted while it created this store and it holds nothing you need, "
                    f"delete it and run again; an out-of-date schema is upgraded with `mlflow db upgrade {uri}`."
                ) from None
    return uri


def _create_sqlite_store(path: Path) -> None:
    """Create a missing (or empty) sqlite store atomically: its tables are made in a temporary file beside it, which
    then replaces it, so a process killed during creation or migration leaves no half-made store behind."""
    if path.is_file() and path.stat().st_size > 0:
        return
    try:
        import sqlalchemy
        from mlflow.store.db.utils import _initialize_tables
    except ImportError:  # another MLflow layout: MLflow creates the store in place (still under the lock)
        return
    for stale in path.parent.glob(f".{path.name}.creating-*"):
        stale.unlink(missing_ok=True)  # left by a process killed while creating (we hold the lock)
    tmp = path.with_name(f".{path.name}.creating-{os.getpid()}")
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
    os.replace(tmp, path)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """The first meaningful line of an exception's message (SQLAlchemy's [SQL: ...] and links dropped)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith(("[SQL:", "(Background"))]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def get_or_create_experiment(name: str = DEFAULT_EXPERIMENT, uri: str | None = None) -> str:
    """Experiment id of `name`, created with a local artifact location when the store is sqlite. Another process
    creating it at the same moment is fine: the one that exists is returned."""
    import mlflow
    from mlflow.exceptions import MlflowException

    uri = setup_mlflow(uri)
    with store_lock(uri):
        exp = mlflow.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        location = default_artifact_location(uri) if uri.startswith("sqlite:") else None
        if location:
            location = Path(location).as_uri()
        try:
            return mlflow.create_experiment(name, artifact_location=location)
        except MlflowException:
            exp = mlflow.get_experiment_by_name(name)  # a server store: created by a concurrent run
            if exp is None:
                raise
            return exp.experiment_id
