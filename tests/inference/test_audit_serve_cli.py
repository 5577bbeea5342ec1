"""`routedvlm serve --audit-*` flags become the AuditConfig RoutedVLM gets (the log opened with its lock)."""
import pytest

from routedvlm.errors import ConfigError
from routedvlm.inference.serving.cli import ServeConfig, _audit_config, build_parser

BASE = ["--small", "s", "--large", "l"]


def config(*flags):
    return ServeConfig(**vars(build_parser().parse_args([*BASE, *flags])))


def test_audit_flags_make_the_audit_config(tmp_path):
    cfg = config("--audit-rate", "0.05", "--audit-log", str(tmp_path / "audit.parquet"), "--audit-store-inputs",
                 "--audit-alpha", "0.1", "--audit-window", "500")
    audit = _audit_config(cfg)
    try:
        assert (audit.rate, audit.alpha, audit.window, audit.store_inputs) == (0.05, 0.1, 500, True)
        assert audit.log.store_inputs and (tmp_path / "audit.parquet.parts" / "lock").exists()
    finally:
        audit.log.close()
    assert _audit_config(config()) is None  # off by default


def test_a_bad_audit_rate_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"^The `--audit-rate` flag must be a number in \[0, 1\]"):
        config("--audit-rate", "1.5")


def test_a_replica_writes_its_own_parts_and_shutdown_flushes_them(tmp_path, monkeypatch):
    import types

    from routedvlm.data.audit import read_log
    from routedvlm.inference.serving.cli import _close_audit

    monkeypatch.setenv("ROUTEDVLM_REPLICA_ID", "ignored-when-the-flag-is-given")
    cfg = config("--audit-rate", "1", "--audit-log", str(tmp_path / "audit.parquet"), "--audit-replica", "pod-7")
    audit = _audit_config(cfg)
    audit.log({"kind": "audit", "request_id": "req-1", "time": 1.0, "agree": True})
    closed = []
    _close_audit(types.SimpleNamespace(auditor=types.SimpleNamespace(sink=audit.log, close=lambda: closed.append(1))))
    assert closed == [1] and (tmp_path / "audit.parquet.replica-pod-7.parts").is_dir()
    assert list(read_log(tmp_path / "audit.parquet")["replica"]) == ["pod-7"]  # flushed at shutdown
    with pytest.raises(ConfigError, match="replica"):
        _audit_config(config("--audit-rate", "1", "--audit-log", str(tmp_path / "b.parquet"), "--audit-replica", "a/b"))
