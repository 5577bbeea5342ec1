"""The demo trains on the bundled labels only when they are exactly what it would label (the default run); every
other run labels its `label` split itself."""
import pytest

from routedvlm.data.labels.schema import read_labels
from routedvlm.training.demo.label_source import bundled_labels, training_labels
from routedvlm.training.demo.toy import DemoConfig


def test_the_default_run_trains_on_the_bundled_labels_without_labelling(tmp_path, monkeypatch):
    import routedvlm.training.demo.label_source as source

    monkeypatch.setattr(source, "label_split", lambda *a, **k: pytest.fail("the default run must not label"))
    said = []
    out = training_labels(DemoConfig(out=str(tmp_path)), said.append)
    df, meta = read_labels(out)
    bundled, bundled_meta = read_labels(bundled_labels(DemoConfig(out=str(tmp_path))))
    assert out == tmp_path / "labels-label.parquet" and len(df) == 1000
    assert meta["content_hash"] == bundled_meta["content_hash"] and df.equals(bundled)
    assert "the bundled labels" in said[0] and "--full" in said[0]


@pytest.mark.parametrize("settings", [{"full": True}, {"quick": True}, {"seed": 1}, {"n_label": 400},
                                      {"checkpoints": "CHECKPOINTS_MID"}])
def test_other_runs_label_their_own_split(tmp_path, monkeypatch, settings):
    import routedvlm.training.demo.label_source as source
    from routedvlm.data.toyworld.make_labels import toyworld_dir

    if settings.get("checkpoints") == "CHECKPOINTS_MID":  # a pair whose weights differ from the labels' (mid as small)
        pair = tmp_path / "pair"
        pair.mkdir()
        (pair / "small").symlink_to(toyworld_dir() / "checkpoints" / "mid")
        (pair / "large").symlink_to(toyworld_dir() / "checkpoints" / "large")
        settings = {"checkpoints": str(pair)}
    cfg = DemoConfig(out=str(tmp_path / "out"), **settings)
    assert bundled_labels(cfg) is None
    monkeypatch.setattr(source, "label_split", lambda cfg, split, n, say: (None, f"labelled {split} {n}"))
    assert training_labels(cfg, lambda msg: None) == f"labelled label {cfg.n_label}"
