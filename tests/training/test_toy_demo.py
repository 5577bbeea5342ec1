"""`routedvlm demo` on the embedded toy world, reduced (`--quick`), end to end on the shipped checkpoints; the bundled
toy labels and `train-router` without `--data`."""
import json

import pytest

from routedvlm.data.toyworld.make_labels import TOY_K_GRID, checkpoint_pair, default_checkpoints
from routedvlm.errors import ConfigError, ModelLoadError
from routedvlm.router.strategies import default_strategies
from routedvlm.training.labels_io import embedded_labels_path

STRATEGIES = default_strategies(TOY_K_GRID)


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    """The reduced demo run once into tmp folders, with a tmp MLflow store: (out folder, stdout, tracking uri)."""
    import contextlib
    import io

    from routedvlm.training.demo import cli as demo

    root = tmp_path_factory.mktemp("demo")
    uri = f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"
    (root / "mlruns").mkdir()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = demo.main(["--quick", "--out", str(root / "out"), "--tracking-uri", uri, "--no-progress"])
    assert rc == 0
    return root / "out", buf.getvalue(), uri


ROUTERS = ["lightgbm cascade", "lightgbm one-shot", "lora-probe cascade", "lora-probe one-shot"]
LIVE = ["champion (RoutedVLM)", "binary large_direct/large_reason (RoutedVLM)", "mutual verification K=16 (RoutedVLM)",
        "large_reason (RoutedVLM)"]


@pytest.mark.slow
def test_quick_demo_prints_and_writes_the_side_by_side_table(quick_demo):
    out, stdout, _ = quick_demo
    table = json.loads((out / "table.json").read_text())
    names = [r["name"] for r in table["rows"]]
    assert names[:4] == LIVE and names[4] == f"champion: {table['champion']} (replayed)"
    assert [n.split(":")[0] for n in names[5:9]] == ROUTERS  # every router type in both modes, replayed on eval
    assert names[9].startswith("binary large_direct/large_reason (replayed, ")
    assert names[10:] == ["mutual verification K=16 (replayed)", *STRATEGIES, "oracle"]
    for row in table["rows"]:
        assert 0.0 <= row["accuracy"] <= 1.0, row
        assert row["mean_latency_ms"] > 0 and row["p90_latency_ms"] >= 0, row
        assert row["source"] == ("live" if "RoutedVLM" in row["name"] else "labels")
        assert abs(sum(row["mix"].values()) - 1.0) < 1e-3
        met = row["accuracy"] >= table["eval_target"]["required"] - 1e-12
        assert row["target_met"] is met and row["verdict"].startswith("met (+" if met else "missed by "), row
        assert "SE 0.1" in row["verdict"], row
    assert table["n_eval"] == 24 and table["n_label"] == 80 and table["live_fallbacks"] == 0
    cert = table["certificate"]  # each router tested at delta / 4; what holds for the champion: delta (issue 27)
    assert cert["feasible"] and cert["delta_each"] == pytest.approx(0.1 / 4) and cert["routers_compared"] == 4
    assert cert["delta_after_selection"] == pytest.approx(0.1) and cert["statement"].startswith(
        "with probability >= 0.9 over the calibration draw (after choosing among 4 routers")
    # --quick certifies a relative target (0.7 of the best strategy's) end to end, and the champion meets what the
    # certificate promises on the eval samples, live and replayed
    assert cert["bound_meaning"].startswith(f"accuracy >= accuracy({cert['reference']})")
    ref_accuracy = next(r["accuracy"] for r in table["rows"] if r["name"] == cert["reference"])
    assert table["eval_target"]["required"] == pytest.approx(ref_accuracy - cert["bound"])
    assert table["rows"][0]["target_met"] and table["rows"][4]["target_met"]
    assert "latency = sum of the wall-clock ms" in table["latency_note"]
    assert (out / "plot.png").stat().st_size > 10_000 and (out / "plot.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "table.md").read_text()
    assert all(f"| {n} |" in md for n in names) and "certificate (champion " in md
    flat = " ".join(stdout.split())  # the certificate's lines wrap where its numbers end
    for text in ("[1/4] labelling 80 toy `label` samples", ": champion (--promote)", "champion (RoutedVLM)",
                 "oracle", "note: latency = sum", "certificate (champion ", "x 4 routers compared = "
                 "delta_after_selection 0.1: the level that holds for the champion",
                 "on the eval split that promises accuracy >= accuracy("):
        assert text in flat, text


@pytest.mark.slow
def test_quick_demo_registers_the_champion_routedvlm_loaded(quick_demo):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.router import load_router

    out, _, uri = quick_demo
    router = load_router("models:/vlm-router@champion", tracking_uri=uri)
    _, meta = read_labels(out / "labels-label.parquet")
    assert router.policy.training_data_hash == meta["content_hash"] and router.policy.certificate["feasible"]
    assert router.policy.certificate["delta_after_selection"] == pytest.approx(0.1)  # the level after the choice
    table = json.loads((out / "table.json").read_text())
    assert set(table["rows"][0]["mix"]) <= set(router.policy.strategies) | {router.policy.fallback}
    assert table["router"] == "models:/vlm-router@champion" and table["version"] == str(len(ROUTERS))
    eval_df, eval_meta = read_labels(out / "labels-eval.parquet")  # measured interleaved with the live rows
    assert len(eval_df) == 24 and eval_meta["strategies"] == STRATEGIES and eval_df["error"].isna().all()
    assert eval_meta["models"]["large"]["revision"] == meta["models"]["large"]["revision"]
    live, replay = table["rows"][0], table["rows"][4]
    assert (live["accuracy"], live["mix"]) == (replay["accuracy"], replay["mix"])  # same decisions, live and replayed


def test_demo_config_needs_enough_label_samples_for_train_router():
    from routedvlm.training.demo.toy import DemoConfig

    with pytest.raises(ConfigError, match=r"^The `n_label` setting must be at least 80 .* Got 20 instead\.$"):
        DemoConfig(n_label=20)
    with pytest.raises(ConfigError, match=r"^The `target_accuracy` setting must be in \(0, 1\).* Got 1\.5 instead\.$"):
        DemoConfig(target_accuracy=1.5)
    with pytest.raises(ConfigError, match=r"^The `routers` setting must list router types from 'lightgbm' or "
                                          r"'lora-probe', comma-separated\. Got 'svm' instead\.$"):
        DemoConfig(routers="svm")
    quick = DemoConfig(quick=True)  # a relative target for the quick run too: its 20 calibration rows certify 0.7
    assert (DemoConfig().target_accuracy, quick.target_accuracy, quick.min_accuracy) == (0.95, 0.7, None)
    assert (DemoConfig(quick=True).n_label, DemoConfig(quick=True).n_eval) == (80, 24)
    assert (DemoConfig().n_label, DemoConfig().n_eval) == (1000, 150)
    # the default run trains LightGBM only (minutes); --full keeps the old run's LoRA probes, --quick tests them in CI
    assert (DemoConfig().routers, DemoConfig(full=True).routers, quick.routers) == (
        "lightgbm", "lightgbm,lora-probe", "lightgbm,lora-probe")
    assert DemoConfig(routers="lora-probe", full=True).routers == "lora-probe"


def test_missing_checkpoints_name_the_folder_and_the_next_step(tmp_path):
    with pytest.raises(ModelLoadError, match=r"^The toy checkpoints must be folders `small/` and `large/`.*train_models"):
        checkpoint_pair(tmp_path)


def test_shipped_checkpoints_and_bundled_labels_exist():
    small, large = checkpoint_pair()
    assert small.parent == default_checkpoints()
    path = embedded_labels_path()
    assert path.is_file() and path.stat().st_size < 2_000_000


def test_bundled_labels_are_valid_toy_labels():
    from routedvlm.data.labels import check_labels, read_labels

    df, meta = read_labels(embedded_labels_path())
    check_labels(df, meta)
    assert len(df) >= 300 and set(df["dataset"]) == {"toyworld"}
    assert meta["k_grid"] == list(TOY_K_GRID) and meta["strategies"] == STRATEGIES
    assert all(f"correct__{s}" in df.columns for s in STRATEGIES)


def test_bundled_labels_were_made_with_the_shipped_checkpoints():
    """Retrain the toy models -> relabel: python -m routedvlm.data.toyworld.make_labels --out <bundled labels>."""
    from routedvlm.data.labelling.metadata import model_revision
    from routedvlm.data.labels.schema import read_labels

    _, meta = read_labels(embedded_labels_path())
    for side, path in zip(("small", "large"), checkpoint_pair()):
        assert meta["models"][side]["revision"] == model_revision(path), f"{side}: bundled labels are stale"


@pytest.mark.slow
def test_train_router_without_data_trains_on_the_bundled_labels_and_says_so(tmp_path, capsys, caplog):
    from routedvlm.training import train_cli

    rc = train_cli.main(["--no-mlflow", "--output-dir", str(tmp_path / "r"),
                         "--num-boost-round", "50"])
    err = capsys.readouterr().err
    assert rc == 0
    from routedvlm.router.checkpoints import portable_path

    assert f"from the embedded toy labels {portable_path(embedded_labels_path())}" in err
    assert "dropping feature columns that are constant on the 600 training rows: ['feat__prompt__" in caplog.text
    assert (tmp_path / "r" / "router" / "policy.json").is_file()


def test_toy_data_sets_are_read_by_the_toyworld_adapter_with_the_bare_question(tmp_path):
    from routedvlm.data.loading import load_samples_with_source
    from routedvlm.data.toyworld.make_labels import write_split
    from routedvlm.data.toyworld.task import make_samples

    path = write_split("eval", 3, 0, tmp_path)
    samples, source = load_samples_with_source(str(path))  # detected from its columns
    truth = make_samples("eval", 3, 0)
    assert source.adapter == "toyworld" and [s.prompt for s in samples] == [t.question for t in truth]
    assert [s.references for s in samples] == [[t.answer] for t in truth]
    assert samples[0].score(truth[0].answer) == 1.0 and samples[0].score("0") == 0.0


@pytest.mark.slow
def test_make_labels_cli_labels_a_toy_split_with_the_toy_settings(tmp_path, capsys):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld import make_labels

    out = tmp_path / "eval-labels.parquet"
    rc = make_labels.main(["--out", str(out), "--split", "eval", "--n", "3", "--workdir", str(tmp_path / "data"),
                           "--no-progress"])
    assert rc == 0 and f"wrote 3 samples to {out}" in capsys.readouterr().out
    df, meta = read_labels(out)
    assert list(df["sample_id"]) == [f"toy-eval-0-{i:06d}" for i in range(3)]
    assert meta["strategies"] == STRATEGIES and meta["sample_source"]["adapter"] == "toyworld"
    assert (tmp_path / "data" / "toy-eval-n3-seed0.parquet").is_file()
    with pytest.raises(ConfigError, match=r"^The `n` setting must be a positive number of samples\. Got 0 instead\.$"):
        make_labels.main(["--out", str(tmp_path / "x.parquet"), "--n", "0"])


def _cost_profile(path, small_vision_ms=100.0, large_vision_ms=1000.0):
    """A two-model profile.json with flat costs: vision per image, 1 ms per prefill token, 10 / 40 ms per decode step."""
    def fits(vision, decode):
        return {"vision": {"x": "image_tokens", "intercept": vision, "slope": 0.0},
                "prefill": {"x": "tokens", "intercept": 0.0, "slope": 1.0},
                "decode": {"x": "context_len", "intercept": decode, "slope": 0.0}}

    models = {"shape-2b": {"parameters": 2, "fit": fits(small_vision_ms, 10.0), "reference": {"image_tokens": 64}},
              "shape-8b": {"parameters": 8, "fit": fits(large_vision_ms, 40.0), "reference": {"image_tokens": 64}}}
    path.write_text(json.dumps({"format_version": 1, "settings": {"output_tokens": [1, 4]}, "models": models}))
    return path


def test_demo_cost_profile_prices_labels_and_live_answers(tmp_path):
    """--cost: labels and live records are priced by the profile (bigger model = large side), not the wall clock."""
    from types import SimpleNamespace

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.make_labels import label_dataset, write_split
    from routedvlm.training.demo.toy import DemoConfig, cost_header, live_one, stage_cost

    profile = _cost_profile(tmp_path / "profile.json")
    cfg = DemoConfig(cost=str(profile), out=str(tmp_path / "out"))
    stage_ms, meta = stage_cost(cfg)
    assert meta["cost_models"] == {"small": "shape-2b", "large": "shape-8b"}
    assert cost_header(cfg)["latency_source"].startswith("cost-model (simulated economics")
    rec = {"stage": "large_direct", "model": "large", "vision_ms": 3.0, "prefill_ms": 9.0, "prefill_tokens": 20,
           "cached_tokens": 0, "decode_ms": 5.0, "decode_tokens": 3}
    assert stage_ms("large", rec) == pytest.approx(1000 + 20 + 2 * 40)  # first token from the prefill
    out = SimpleNamespace(text="12", strategy="large_direct", fallback=False, overhead_ms=0.5, latency_ms=17.5,
                          trace=[rec, {"stage": "decision", "features_ms": 0.2, "decision_ms": 0.3}])
    routed = SimpleNamespace(generate=lambda image, question: out)
    sample = SimpleNamespace(sample_id="s", images=[None], question="q", prompt="q", score=lambda answer: 1.0)
    assert live_one(routed, sample)["latency_ms"] == 17.5  # wall clock by default
    assert live_one(routed, sample, stage_ms)["latency_ms"] == pytest.approx(0.5 + 1100)

    dataset = write_split("eval", 3, 0, tmp_path / "data")
    label_dataset(dataset, tmp_path / "labels.parquet", progress=False, cost=profile)
    df, labels_meta = read_labels(tmp_path / "labels.parquet")
    assert labels_meta["latency_source"] == "cost-model" and labels_meta["cost_models"] == meta["cost_models"]
    assert (df["latency_ms__large_direct"] >= 1000).all() and (df["latency_ms__small_direct"] < 1000).all()


def test_demo_with_a_missing_cost_profile_fails_before_labelling(tmp_path):
    from routedvlm.training.demo.toy import DemoConfig, run_toy_demo

    cfg = DemoConfig(cost=str(tmp_path / "missing.json"), out=str(tmp_path / "out"), quick=True)
    with pytest.raises(ConfigError, match=r"^The profile file .*missing\.json' does not exist"):
        run_toy_demo(cfg)
    assert not (tmp_path / "out").exists()
