"""The labelling job around the per-sample code of `per_sample.py`: one run per output, resume, finish.

A run takes the output's lock (lock.py), removes temp files a killed write left, checks what a resume may
continue (same settings, same latency source, same cost profile), labels the samples not yet stored (plain or
threaded: runner.py; on Ray: ray_pool.py) and writes `--out` only once the intact parts hold every
selected sample. `--resume` on a finished output trusts it only when it verifies and holds the selection.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from routedvlm.errors import ConfigError, SideUnavailableError
from ..labels.schema import ERROR_COLUMN, read_labels, write_labels
from .config import LabelConfig, every_side
from .metadata import build_metadata
from .models import load_pipeline, stage_cost
from .parts import PartStore, is_outage
from .sources import open_source
from .table import build_table, scorers_of

log = logging.getLogger(__name__)


@dataclass
class LabelSummary:
    """What a labelling run did."""

    out: str
    samples: int = 0
    labelled_now: int = 0
    errors: int = 0
    error_examples: list = field(default_factory=list)
    seconds: float = 0.0
    label_seconds: float = 0.0
    outages: int = 0  # rows an earlier run stored for a side's outage, labelled again in this run

    def line(self) -> str:
        rate = self.labelled_now / self.label_seconds if self.label_seconds > 0 else 0.0
        text = (f"wrote {self.samples} samples to {self.out} ({self.labelled_now} labelled in this run, "
                f"{rate:.2f} samples/s); {self.outages} stored side outage(s) labelled again; {self.errors} failed "
                "(the sample's own failure)")
        return text + (f": {'; '.join(self.error_examples)}" if self.error_examples else "")


def _finish(cfg: LabelConfig, store: PartStore, metadata: dict, wanted_ids: set, labelled: int, t0: float,
            label_seconds: float) -> LabelSummary:
    """Merge the intact parts into `cfg.out` once they hold every selected sample (never a partial file)."""
    from routedvlm.errors import LabelsError
    from routedvlm.router.provenance import now_iso

    rows = store.read_parts()
    stored = set(rows["sample_id"].astype(str)) if len(rows) else set()
    missing = sorted(wanted_ids - stored)
    if missing:
        raise LabelsError(f"{len(missing)} of the {len(wanted_ids)} selected samples are not in {store.dir} "
                          f"(first: {missing[:3]}); rerun the same command with --resume to label them.")
    stray = ~rows["sample_id"].isin(wanted_ids) if len(rows) else None
    if stray is not None and stray.any():
        log.warning("ignoring %d stored rows whose samples are no longer selected", int(stray.sum()))
        rows = rows[~stray]
    table = build_table(rows, cfg.strategies)
    failed = table[table[ERROR_COLUMN].notna()]
    meta = {**metadata, "scorers": scorers_of(rows), "n_samples": len(table), "n_errors": len(failed),
            "completed_at": now_iso()}
    _write_out(table, store.out, meta, store)  # the resolved path: a symlinked output keeps its link
    store.remove()
    examples = [f"{i}: {e}" for i, e in zip(failed["sample_id"][:3], failed[ERROR_COLUMN][:3])]
    return LabelSummary(str(cfg.out), len(table), labelled, len(failed), examples, time.time() - t0, label_seconds,
                        outages=store.outages)


def _write_out(table, out, meta: dict, store: PartStore) -> None:
    from routedvlm.errors import RoutedVLMError
    from .lock import storage_error

    try:
        write_labels(table, out, meta)
    except OSError as exc:
        if isinstance(exc, RoutedVLMError):
            raise
        raise storage_error(out, exc, kept=f"Every labelled sample is kept in {store.dir}.") from None


def _already_done(cfg: LabelConfig, store: PartStore, settings: dict, t0: float) -> LabelSummary:
    """`--resume` on a finished output: trusted only when it verifies and holds exactly the selected samples."""
    from routedvlm.errors import LabelsError
    from ..labels.schema import content_hash

    df, meta = read_labels(cfg.out)
    store.check_settings(settings, meta.get("run_settings"), str(cfg.out))
    if meta.get("content_hash") != content_hash(df):
        raise LabelsError(f"{cfg.out} does not match its content hash (it changed or was damaged after it was "
                          "written) and no parts are left to rebuild it from; remove it and label again.")
    _, keyed, _ = open_source(cfg)
    wanted = {sid for p, sid in keyed if p % cfg.shard_count == cfg.shard_index}
    have = set(df["sample_id"].astype(str))
    if have != wanted:
        raise LabelsError(f"{cfg.out} holds {len(have & wanted)} of the {len(wanted)} selected samples (and "
                          f"{len(have - wanted)} others) and no parts are left to finish from; remove it and label "
                          "again, or label the missing samples to another file and `routedvlm label merge` them.")
    if ERROR_COLUMN in df.columns and df[ERROR_COLUMN].map(is_outage).any():
        _reopen(store, settings, df, meta, keyed)
        return None
    n_err = int(df[ERROR_COLUMN].notna().sum()) if ERROR_COLUMN in df.columns else 0
    log.info("%s is already complete; nothing to do", cfg.out)
    return LabelSummary(str(cfg.out), len(df), 0, n_err, [], time.time() - t0)


def _reopen(store: PartStore, settings: dict, df, meta: dict, keyed) -> None:
    """A finished output holding rows that recorded a side's outage (written before SideUnavailableError): its rows
    become the first part of a resumed run, which labels those samples again (`parts.is_outage`)."""
    from .parts import ORDER_COLUMN
    from .table import METRIC_COLUMN

    position, scorers = {sid: p for p, sid in keyed}, meta.get("scorers") or {}
    rows = df.assign(**{ORDER_COLUMN: df["sample_id"].astype(str).map(position),
                        METRIC_COLUMN: df["dataset"].map(lambda d: scorers.get(d) if isinstance(scorers.get(d), str)
                                                         else None)})
    finished = ("scorers", "n_samples", "n_errors", "completed_at", "content_hash", "schema_version")
    store.write_manifest(settings, {k: v for k, v in meta.items() if k not in finished})
    store.write_part(rows.to_dict("records"))
    log.warning("%s holds %d row(s) that recorded a side's outage, not an answer; labelling those samples again",
                store.out, int(df[ERROR_COLUMN].map(is_outage).sum()))


def check_latency_source(metadata: dict, cost_meta: dict, where) -> None:
    """Refuse to resume a run whose stored latencies mean something else (or were priced by another profile)."""
    old, new = metadata.get("latency_source"), cost_meta.get("latency_source")
    if old != new:
        raise ConfigError(f"--resume: the samples stored in {where} have latency_source {old!r}, this run would "
                          f"record {new!r} (set by --cost, --concurrency and Ray workers against servers); resume "
                          "with the original flags so one file never mixes the two meanings, or start over.")
    if metadata.get("cost_profile_sha256") != cost_meta.get("cost_profile_sha256"):
        raise ConfigError(f"--resume: the --cost profile's content changed since the run that wrote {where} "
                          "started (its sha256 differs); resume with the original profile or start over.")


def _open_run(cfg: LabelConfig, store: PartStore, settings: dict):
    """(manifest metadata or None, stage_ms, cost metadata) of a run about to label, after every resume check."""
    from routedvlm.errors import LabelsError
    from .runner import BATCHED, latency_source

    manifest = store.manifest() if cfg.resume else None
    if manifest is None and store.part_files():
        raise LabelsError(f"{store.dir} holds parts but no manifest.json; remove the folder to start over.")
    store.check_settings(settings, manifest and manifest.get("settings"), str(store.dir))
    stage_ms, cost_meta = stage_cost(cfg, latency_source(cfg, every_side(cfg, "batching")))
    if cost_meta["latency_source"] == BATCHED:
        log.warning("several samples in flight on the servers or engines: latency_ms__ columns will be batched "
                    "times (metadata latency_source %r), not standalone latencies; for standalone ones pass --cost "
                    "profile.json (`routedvlm profile --model URL#ID ...` against the same servers)", BATCHED)
    metadata = (manifest or {}).get("metadata")
    if metadata is not None:
        check_latency_source(metadata, cost_meta, store.dir)
    return metadata, stage_ms, cost_meta


def _label_missing(cfg, store, settings, metadata, source, todo, load, stage_ms, cost_meta, pipe=None) -> tuple[dict, float]:
    """Label `todo` (plain or on Ray), writing the manifest first on a new run; (metadata, seconds). pipe: a pipeline
    already loaded from cfg's sides (else loaded here)."""
    if cfg.ray:
        from .ray_pool import RayLabeller

        with RayLabeller(cfg) as ray_run:  # the workers load the models; the first one describes them
            if metadata is None:
                metadata = ray_run.metadata(source, cost_meta)
                store.write_manifest(settings, metadata)
            return metadata, ray_run.label(store, todo)
    if pipe is not None:  # the caller's pipeline: the caller starts and closes it
        return _label_with(pipe, cfg.device, cfg, store, settings, metadata, source, todo, load, stage_ms, cost_meta)
    pipe, device = load_pipeline(cfg)
    try:
        pipe.start()  # every side of the ladder (an engine side builds its engine now, before the first sample)
        return _label_with(pipe, device, cfg, store, settings, metadata, source, todo, load, stage_ms, cost_meta)
    finally:
        pipe.close()


def _label_with(pipe, device, cfg, store, settings, metadata, source, todo, load, stage_ms, cost_meta):
    from .runner import label_todo

    if metadata is None:
        metadata = build_metadata(cfg, pipe, device, source, cost_meta)
        store.write_manifest(settings, metadata)
    return metadata, label_todo(pipe, cfg, store, todo, load, stage_ms)


def _run_locked(cfg: LabelConfig, store: PartStore, settings: dict, t0: float, pipe=None) -> LabelSummary:
    store.clean_temp()
    store.check_start(cfg.resume)  # again, under the lock: another run may have finished in between
    if cfg.resume and store.out.exists() and not store.has_work():
        done = _already_done(cfg, store, settings, t0)
        if done is not None:
            return done
    metadata, stage_ms, cost_meta = _open_run(cfg, store, settings)
    source, keyed, load = open_source(cfg)
    mine = [(p, sid) for p, sid in keyed if p % cfg.shard_count == cfg.shard_index]
    done = store.done_ids()
    todo = [(p, sid) for p, sid in mine if sid not in done]
    log.info("%d samples selected, %d already stored, %d to label", len(mine), len(mine) - len(todo), len(todo))
    seconds = 0.0
    if todo or metadata is None:
        try:
            metadata, seconds = _label_missing(cfg, store, settings, metadata, source, todo, load, stage_ms, cost_meta,
                                               pipe)
        except SideUnavailableError as exc:
            kept = len(store.done_ids())
            raise SideUnavailableError(f"{exc} The run stopped: {kept} labelled sample(s) are kept in {store.dir}; "
                                       "rerun the same command with --resume once the server answers.") from None
    return _finish(cfg, store, metadata, {sid for _, sid in mine}, len(todo), t0, seconds)


def run_labelling(cfg: LabelConfig, *, pipe=None) -> LabelSummary:
    """Run (or with `cfg.resume`, finish) a labelling job and write `cfg.out`; see the module docstring.
    One run per output at a time (a lock in the parts folder); a second one refuses while the first is alive.
    pipe: a `CollaborativePipeline` already holding cfg's sides (`models.load_pipeline(cfg)`), reused instead of
    loading them again (a benchmark or a test with in-process engines); not with --ray."""
    t0, store, settings = time.time(), PartStore(cfg.out), cfg.settings()
    store.check_start(cfg.resume)
    with store.lock:
        try:
            return _run_locked(cfg, store, settings, t0, pipe)
        finally:
            if not store.has_work():
                store.remove()  # only our lock was there: leave no empty folder behind
