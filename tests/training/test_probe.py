"""train-router --router lora-probe on a tiny Qwen2-VL: the probe learns an image-colour signal, saves and loads to
the same decisions, checkpoints every epoch and resumes, and reports its cost beside a LightGBM router."""
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from routedvlm.errors import TrainingError
from routedvlm.router import RouterError, load_router
from routedvlm.training.config import TrainConfig

STRATEGIES = ["large_direct", "transfer_64", "large_reason"]
N = 80


def _colour(ok: bool, i: int):
    shade = (i * 37) % 40
    return (215 + shade, 30, 30) if ok else (30, 30, 215 + shade)


@pytest.fixture(scope="session")
def probe_data(tmp_path_factory):
    """Synthetic labels whose `large_direct` correctness shows in the image colour (red: correct, blue: wrong), a
    local JSONL data set with the PNGs (the labels' sample_source), and a tiny base checkpoint."""
    import torch
    from PIL import Image

    from routedvlm.data.labels.schema import write_labels
    from routedvlm.inference import build_tiny_vlm
    from routedvlm.training.synthetic import make_synthetic_labels, synthetic_metadata

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("probe-data")
    df = make_synthetic_labels(N, seed=3)
    (root / "images").mkdir()
    with open(root / "samples.jsonl", "w") as fh:
        for i, (sid, q, ok) in enumerate(zip(df["sample_id"], df["question"], df["correct__large_direct"])):
            Image.new("RGB", (32, 32), _colour(bool(ok), i)).save(root / "images" / f"{sid}.png")
            fh.write(json.dumps({"sample_id": sid, "question": q, "answer": "1", "image": f"images/{sid}.png"}) + "\n")
    base = build_tiny_vlm("qwen2_vl", root / "base", seed=0, size="tiny")
    meta = synthetic_metadata(df, 3)
    meta["models"]["small"]["name"] = str(base)
    meta["sample_source"] = {"dataset": str(root / "samples.jsonl")}
    labels = write_labels(df, root / "labels.parquet", meta)
    return {"labels": labels, "base": base, "root": root}


def _config(out, data, **kw):
    # 20 calibration rows certify an absolute 0.5 accuracy target (at most 5 errors), not a relative one
    base = dict(router="lora-probe", data=str(data["labels"]), output_dir=str(out), no_mlflow=True, epochs=2,
                lora_r=4, lr=3e-3, batch_size=4, strategies=STRATEGIES, num_boost_round=20, calib_fraction=0.25,
                test_fraction=0.25, min_accuracy=0.5)
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="session")
def probe_run(probe_data, tmp_path_factory):
    """Trained through `train_router(config)`, the one entry point every router type goes through."""
    from routedvlm.training.pipeline import train_router

    out = tmp_path_factory.mktemp("probe-run")
    return train_router(_config(out, probe_data))


@pytest.mark.slow
def test_train_router_trains_the_configured_type(probe_run):
    """Regression: train_router(TrainConfig(router="lora-probe")) used to fit a LightGBM router silently."""
    from routedvlm.router import load_router
    from routedvlm.router.lora_probe import LoRAProbeRouter

    assert isinstance(probe_run.router, LoRAProbeRouter) and probe_run.router.policy.router_type == "lora-probe"
    assert isinstance(load_router(probe_run.output_dir / "router"), LoRAProbeRouter)
    assert "probe" in probe_run.evaluation  # the probe's own training record, not a LightGBM run


@pytest.mark.slow
def test_probe_learns_the_image_signal(probe_run):
    probe = probe_run.evaluation["probe"]
    assert probe["final_train_loss"] < probe["initial_train_loss"] - 0.1
    test = probe_run.test
    p = probe_run.router.predict_proba(test)["large_direct"].to_numpy()
    ok = test["correct__large_direct"].to_numpy(bool)
    # held-out ranking: P(large_direct correct) is higher on (red) correct samples than on (blue) wrong ones
    pairs = (p[ok][:, None] > p[~ok][None, :]).mean()
    assert pairs > 0.9, pairs


@pytest.mark.slow
def test_save_load_same_decisions(probe_run):
    folder = probe_run.output_dir / "router"
    assert {p.name for p in folder.iterdir()} >= {"policy.json", "adapter", "head.safetensors"}
    assert not list(folder.rglob("*.pt")) and not list(folder.rglob("*.pkl")) and not list(folder.rglob("*.bin"))
    loaded = load_router(folder)
    assert type(loaded).__name__ == "LoRAProbeRouter" and loaded.policy == probe_run.router.policy
    rows = probe_run.test.head(12)
    assert [d.to_dict() for d in loaded.decide_batch(rows)] == [d.to_dict() for d in probe_run.router.decide_batch(rows)]
    one = rows.iloc[0].to_dict()
    assert loaded.decide(one) == probe_run.router.decide(one)


@pytest.mark.slow
def test_table_side_by_side_with_the_probe_cost(probe_run):
    from routedvlm.router.decision_rules import uses_model
    from routedvlm.training.costs import realized_latency
    from routedvlm.training.calibration.rule_family import with_agreement

    ev = probe_run.evaluation
    names = [r["name"] for r in ev["rows"]]
    assert names[-1].startswith("chosen: ") and names[-2].startswith("lightgbm chosen: ")
    assert ev["certificate"]["feasible"] and "lightgbm" in ev["comparison"]
    cost, test, router = ev["probe"]["cost_ms_mean"], with_agreement(probe_run.test), probe_run.router
    assert cost > 0
    model_rows = [r for r in ev["rows"] if r["kind"] in ("rule", "learned") and uses_model(r["rule"])]
    assert model_rows  # the probe's own cost is charged exactly to the rules that read it
    for r in model_rows:
        m = r["calibration"]
        without = realized_latency(test, router.choices(test, r["rule"]), m["mode"], m["paid_stages"]).mean()
        assert r["mean_latency_ms"] == pytest.approx(without + cost), r["name"]
    assert ev["probe"]["shared_max_abs_diff"] < 1e-4  # the shared pass gives the probe's own P(correct)
    assert "probe: " in probe_run.table and "lightgbm on the same split chose" in probe_run.table


@pytest.mark.slow
def test_probe_is_charged_its_pass_on_the_labels_clock(probe_run, probe_data):
    """Issue 37: the probe's pass is charged at its cost measured side by side with a stage the labels measured (their
    small_direct, re-run through the labeller's pipeline), scaled to the labels' latency of it - not the time of the
    pass in train-router's process alone, and not a constant."""
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.split import split_labels

    ev, policy = probe_run.evaluation, probe_run.router.policy
    clock = ev["probe"]["clock"]
    assert clock["reference_stage"] == "small_direct" and clock["rows"] > 0
    train = split_labels(load_labels(probe_data["labels"])[0], 0.25, 0.25, 0).train
    assert clock["reference_labels_ms"] == pytest.approx(float(np.median(train["latency_ms__small_direct"])))
    assert clock["ratio"] == pytest.approx(clock["own_ms_here"] / clock["reference_ms_here"])
    assert ev["probe"]["cost_ms_mean"] == pytest.approx(clock["ratio"] * clock["reference_labels_ms"])
    assert policy.metrics["probe_cost_ms_mean"] == pytest.approx(ev["probe"]["cost_ms_mean"])
    assert policy.params["probe_ms"]["charged"] == pytest.approx(ev["probe"]["cost_ms_mean"])
    assert "on the labels' clock" in probe_run.table


def test_probe_cost_arithmetic_on_a_hand_clock():
    """Worked example: the probe takes 3 ticks where the reference stage takes 10 (ratio 0.3); the labels measured the
    reference at a median 200 ms, so the probe is charged 60 ms, and 600 ms on labels measured 10x slower."""
    import pandas as pd

    from routedvlm.training.probe.cost import charged_ms, reference_stage, timed_side_by_side

    now = [0.0]

    def clock():
        return now[0]

    def advance(ticks):
        return lambda row: now.__setitem__(0, now[0] + ticks / 1000)

    own, ref = timed_side_by_side(advance(3), advance(10), range(5), clock=clock)
    assert list(own) == pytest.approx([3] * 5) and list(ref) == pytest.approx([10] * 5)
    ratio = float(np.median(own) / np.median(ref))
    labels = pd.DataFrame({"latency_ms__small_direct": [100.0, 200.0, 300.0, float("nan")]})
    assert reference_stage(labels) == "small_direct"
    assert charged_ms(ratio, labels, "small_direct") == pytest.approx(60.0)
    slow = labels * 10
    assert charged_ms(ratio, slow, "small_direct") == pytest.approx(600.0)
    assert reference_stage(pd.DataFrame({"latency_ms__large_direct": [1.0]})) is None


def test_probe_cost_uses_the_clock_when_it_has_one():
    from types import SimpleNamespace

    from routedvlm.training.probe.evaluate import probe_cost

    own = np.array([4.0, 5.0, 6.0])
    one_shot, shared = SimpleNamespace(paid_stages=[]), SimpleNamespace(paid_stages=["small_direct"])
    clock = {"reference_stage": "small_direct", "own_charged_ms": 60.0, "shared_charged_ms": 7.0}
    assert list(probe_cost(one_shot, own, 2.0, clock)) == [60.0] * 3
    assert list(probe_cost(shared, own, 2.0, clock)) == [7.0] * 3
    assert list(probe_cost(one_shot, own, 2.0, {"reference_stage": None})) == [5.0] * 3  # timed here, said so


@pytest.mark.slow
def test_checkpoints_and_resume(probe_run, probe_data, tmp_path):
    from routedvlm.training.probe.lora_probe import train_probe

    ckpt = probe_run.output_dir / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-001", "epoch-002"]
    out = tmp_path / "run"
    shutil.copytree(probe_run.output_dir, out)
    with pytest.raises(TrainingError, match=r"^The checkpoint .*epoch-002 was made with other \['lora_r'\]"):
        train_probe(_config(out, probe_data, lora_r=2, resume=True))
    resumed = train_probe(_config(out, probe_data, epochs=3, resume=True))
    probe = resumed.evaluation["probe"]
    assert probe["resumed_from"] == "epoch-002" and len(probe["train_losses"]) == 3
    assert probe["train_losses"][:2] == probe_run.evaluation["probe"]["train_losses"]
    assert (out / "checkpoints" / "epoch-003" / "optimizer.safetensors").is_file()


@pytest.mark.slow
def test_load_errors(probe_run, probe_data, tmp_path, monkeypatch):
    from routedvlm.inference import build_tiny_vlm
    from routedvlm.router.lora_probe import BASE_ENV

    folder = tmp_path / "router"
    shutil.copytree(probe_run.output_dir / "router", folder)
    other = build_tiny_vlm("qwen2_vl", tmp_path / "other", seed=1, size="tiny")
    monkeypatch.setenv(BASE_ENV, str(other))
    with pytest.raises(RouterError, match=r"^The lora-probe router's base small VLM: '.*other' \(from \$ROUTEDVLM_PROBE_BASE\) has weights "
                                          r"sha256:.*, but weights sha256:.* were recorded, and only identical weights"):
        load_router(folder)
    monkeypatch.setenv(BASE_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(RouterError, match=r"^The lora-probe router's base small VLM must be a local checkpoint folder; "
                                          r"'.*nowhere' \(from \$ROUTEDVLM_PROBE_BASE\) does not exist"):
        load_router(folder)
    monkeypatch.delenv(BASE_ENV)
    (folder / "head.safetensors").unlink()
    with pytest.raises(RouterError, match=r"^The router folder .* lacks model file\(s\) \[.head.safetensors.\]"):
        load_router(folder)


@pytest.mark.slow
def test_decide_needs_the_sample(probe_run):
    row = probe_run.test.iloc[0].to_dict()
    with pytest.raises(RouterError, match=r"^The lora-probe router needs the sample's \['image'\]"):
        probe_run.router.decide({k: v for k, v in row.items() if k != "image"})
    with pytest.raises(RouterError, match=r"^The lora-probe router reads the sample itself"):
        probe_run.router.decide({**row, "question": "  "})
    as_list = {**{k: v for k, v in row.items() if k != "image"}, "images": [row["image"]]}
    assert probe_run.router.decide(as_list) == probe_run.router.decide(row)


def test_samples_need_a_source():
    from routedvlm.training.probe.data import attach_samples, sample_source

    labels = pd.DataFrame({"sample_id": ["a"], "question": ["q"]})
    with pytest.raises(TrainingError, match=r"^The labels' metadata records no `sample_source`"):
        attach_samples(labels, {})
    src = sample_source({"sample_source": {"dataset": "x.jsonl", "split": "train", "limit": 5}}, "x.jsonl")
    assert (src.split, src.limit) == ("train", 5)
    assert sample_source({"sample_source": {"dataset": "x.jsonl", "split": "train"}}, "y.jsonl").split is None


def test_probe_config_validation():
    from routedvlm.errors import ConfigError

    with pytest.raises(ConfigError, match=r"`router` must be 'knn', 'lightgbm', 'lightgbm-pca', 'lora-probe', 'mf' or 'self-probe'; got 'svm'.*`epochs` must be an "
                                          r"integer >= 1; got 0.*`lr` must be in \(0, 1\]; got 2"):
        TrainConfig(router="svm", epochs=0, lr=2.0)
    assert np.isclose(TrainConfig(router="lora-probe").lr, 1e-3)


@pytest.mark.slow
def test_cli_trains_registers_and_loads_the_probe(probe_data, tmp_path, monkeypatch, capsys):
    from mlflow import MlflowClient

    from routedvlm.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["train", "--router", "lora-probe", "--data", str(probe_data["labels"]), "--base", str(probe_data["base"]),
            "--dataset", str(probe_data["root"] / "samples.jsonl"), "--epochs", "1", "--lora-r", "2",
            "--strategies", ",".join(STRATEGIES), "--num-boost-round", "20", "--calib-fraction", "0.25",
            "--test-fraction", "0.25", "--output-dir", "run", "--register-as", "probe-router", "--min-accuracy", "0.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "\nchosen: " in out and "lightgbm chosen: " in out and "probe: " in out
    assert "registered probe-router version 1 (champion: no champion yet)" in out
    assert (tmp_path / "run" / "checkpoints" / "epoch-001" / "state.json").is_file()
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    run_id = MlflowClient(tracking_uri=uri).get_model_version("probe-router", "1").run_id
    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["routedvlm.router_type"] == "lora-probe"
    champion = load_router("models:/probe-router@champion", tracking_uri=uri)
    local = load_router(tmp_path / "run" / "router")
    rows = probe_data_rows(probe_data, 6)
    assert [d.to_dict() for d in champion.decide_batch(rows)] == [d.to_dict() for d in local.decide_batch(rows)]
    import mlflow

    reqs = open(mlflow.pyfunc.get_model_dependencies("models:/probe-router/1")).read()
    assert "peft==" in reqs and "torch==" in reqs and "lightgbm==" in reqs


@pytest.mark.slow
def test_registry_compares_a_challenger_with_a_lora_probe_champion(probe_data, tmp_path, monkeypatch, capsys):
    """Issue 37: a LightGBM challenger registered under a LoRA-probe champion is compared with it (it used to fail:
    "needs the sample's image"), on rows neither router was trained or calibrated on, the images reloaded."""
    from mlflow import MlflowClient

    from routedvlm.cli import main
    from routedvlm.router.load import load_router
    from routedvlm.training.champion import comparison_rows
    from routedvlm.training.labels_io import load_labels
    from routedvlm.training.pipeline import train_router
    from routedvlm.training.split import split_labels

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    common = ["--data", str(probe_data["labels"]), "--strategies", ",".join(STRATEGIES), "--num-boost-round", "20",
              "--calib-fraction", "0.25", "--test-fraction", "0.25", "--register-as", "mixed", "--min-accuracy", "0.5"]
    assert main(["train", "--router", "lora-probe", "--base", str(probe_data["base"]), "--epochs", "1", "--lora-r", "2",
                 "--output-dir", "probe", *common]) == 0
    assert "registered mixed version 1 (champion: no champion yet)" in capsys.readouterr().out
    assert main(["train", "--seed", "1", "--output-dir", "lgbm", *common]) == 0
    out = capsys.readouterr().out
    assert "registered mixed version 2 (" in out and "re-evaluated on" in out and "not comparable" not in out
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    decision = MlflowClient(tracking_uri=uri).get_model_version("mixed", "2").tags["routedvlm.champion_decision"]
    assert "neither router was trained or calibrated on" in decision and "'image'" in decision

    # the rows: in this run's test split and in the champion's (seed 0), never in either's train/calibration rows
    labels = load_labels(probe_data["labels"])[0]
    challenger = train_router(_config(tmp_path / "again", probe_data, router="lightgbm", seed=1))
    champ = load_router("models:/mixed@champion", tracking_uri=uri)
    rows, where = comparison_rows(champ, challenger)
    theirs, mine = split_labels(labels, 0.25, 0.25, 0), split_labels(labels, 0.25, 0.25, 1)
    ids = set(rows["sample_id"])
    assert ids and ids <= set(theirs.test["sample_id"]) & set(mine.test["sample_id"])
    assert ids == set(theirs.test["sample_id"]) & set(mine.test["sample_id"])
    assert rows["image"].notna().all() and len(champ.choices(rows)) == len(rows)


def probe_data_rows(probe_data, n):
    from routedvlm.training.labels_io import load_labels

    labels, _ = load_labels(probe_data["labels"])
    rows = labels.head(n).copy()
    rows["image"] = [str(probe_data["root"] / "images" / f"{sid}.png") for sid in rows["sample_id"]]
    return rows


def test_bundled_toy_labels_reload_their_images_on_a_fresh_machine(tmp_path, monkeypatch):
    """Regression: the bundled labels record their samples as `runs/toyworld/toy-label-n1000-seed0.parquet`, a
    file no fresh clone has; the probe regenerates that toy split (deterministic) instead of failing."""
    import numpy as np

    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.training.labels_io import embedded_labels_path
    from routedvlm.training.probe.data import attach_samples

    monkeypatch.chdir(tmp_path)
    df, meta = read_labels(embedded_labels_path())
    recorded = meta["sample_source"]["dataset"]
    assert not (tmp_path / recorded).exists()
    rows = df.iloc[[0, 7, 500]]
    out = attach_samples(rows, meta)
    assert (tmp_path / recorded).is_file()
    n = int(recorded.split("-n")[1].split("-")[0])
    truth = {s.sample_id: s for s in make_samples("label", n, 0)}
    for sid, image, question in zip(out["sample_id"], out["image"], out["question"]):
        assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(truth[sid].image.convert("RGB")))
        assert question == truth[sid].question


def test_missing_non_toy_source_still_asks_for_dataset(tmp_path, monkeypatch):
    from routedvlm.data.toyworld.make_labels import rebuild_split_file
    from routedvlm.training.probe.data import attach_samples

    monkeypatch.chdir(tmp_path)
    assert rebuild_split_file(tmp_path / "mine.parquet") is None
    labels = pd.DataFrame({"sample_id": ["a"], "question": ["q"]})
    with pytest.raises(TrainingError, match="--dataset"):
        attach_samples(labels, {"sample_source": {"dataset": "gone/toy-label-n5-seed0.jsonl", "adapter": "toyworld"}})
    assert not (tmp_path / "gone").exists()


@pytest.mark.parametrize("same_weights", [True, False])
def test_embedded_labels_find_the_shipped_models_wherever_installed(tmp_path, monkeypatch, same_weights):
    """Regression: the bundled labels recorded the toy models by the absolute path of the machine that labelled them;
    on another clone the probe's base must be the shipped checkpoint with the same weights, never another one."""
    import routedvlm.training.labels_io as io
    from routedvlm.data.labels.schema import read_labels, write_labels
    from routedvlm.data.toyworld.make_labels import default_checkpoints
    from routedvlm.errors import ConfigError
    from routedvlm.training.probe.lora_probe import resolve_base

    df, meta = read_labels(io.embedded_labels_path())
    gone = str(tmp_path / "elsewhere" / "checkpoints" / "small")
    small = meta["models"]["small"]
    small["name"], small["modes"]["direct"]["checkpoint"] = gone, gone
    if not same_weights:
        small["revision"] = small["weights_hash"] = "sha256:" + "0" * 64
    path = write_labels(df.head(50), tmp_path / "toy.parquet", meta)
    monkeypatch.setattr(io, "embedded_labels_path", lambda: path)
    for data in (None, path):  # embedded or given with --data: the same rule
        _, loaded = io.load_labels(data)
        assert loaded["models"]["small"]["name"] == gone  # the record is kept as written
        config = TrainConfig(router="lora-probe", no_mlflow=True)
        if same_weights:
            assert resolve_base(config, loaded) == (default_checkpoints() / "small").resolve()
        else:
            with pytest.raises(ConfigError, match=r"\(weights sha256:000000000000…, recorded at .*which does not "
                                                  r"exist here\) was not found.*Pass --base FOLDER"):
                resolve_base(config, loaded)
