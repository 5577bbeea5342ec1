"""Each router type declares its own settings dataclass; train-router's flags for them are generated from it, grouped
by type in --help, and every flag and keyword users' scripts pass keeps its spelling, default and meaning."""
import dataclasses

import pytest

from routedvlm.errors import ConfigError
from routedvlm.router.router_types import ROUTER_TYPES, trainable
from routedvlm.training.config import TrainConfig
from routedvlm.training.settings import settings_classes
from routedvlm.training.train_cli import build_parser

# every train-router flag before the settings were split by type (users' scripts pass them), with its default
OLD_DEFAULTS = {
    "data": None, "router": "lightgbm", "mode": "auto", "target_accuracy": None, "relative_loss": "difference",
    "difference_test": "betting", "min_accuracy": None, "max_latency_ms": None, "delta": 0.1, "chains": None,
    "strategies": None, "features": None, "with_small_direct": False, "fallback": None, "register_as": "vlm-router",
    "promote": False, "no_register": False, "no_mlflow": False, "no_pair_comparison": False, "tracking_uri": None,
    "experiment": "train-router", "output_dir": None, "calib_fraction": 0.2, "calibration_data": None,
    "test_fraction": 0.2, "num_boost_round": 200, "cv_folds": 5, "num_leaves": 15, "learning_rate": 0.05,
    "strict_features": False, "allow_constant_features": False, "allow_missing_features": False, "max_features": 256,
    "seed": 0, "dataset": None, "base": None, "epochs": 3, "lora_r": 8, "lr": 1e-3, "batch_size": 8, "resume": False,
    "large": None, "hidden_layers": None, "hidden_position": "all_mean"}


def test_every_old_flag_parses_with_its_old_default():
    args = vars(build_parser().parse_args([]))
    assert {k: args[k] for k in OLD_DEFAULTS} == OLD_DEFAULTS
    config = TrainConfig(**args)
    assert set(config.to_dict()) == set(OLD_DEFAULTS)  # MLflow logs `train.<name>` for the same names as before


def test_type_flags_land_in_their_types_settings():
    argv = ["--router", "lora-probe", "--num-leaves", "31", "--learning-rate", "0.1", "--epochs", "2", "--lora-r", "0",
            "--resume", "--dataset", "toy", "--hidden-layers", "1,-1", "--hidden-position", "prompt_last",
            "--calibration-share", "auto", "--output-dir", "out"]
    config = TrainConfig(**vars(build_parser().parse_args(argv)))
    lgb, lora, selfp = config.settings["lightgbm"], config.settings["lora-probe"], config.settings["self-probe"]
    assert (lgb.num_leaves, lgb.learning_rate, lgb.num_boost_round) == (31, 0.1, 200)
    assert (lora.epochs, lora.lora_r, lora.resume, lora.dataset) == (2, 0, True, "toy")
    assert (selfp.dataset, selfp.hidden_layers, selfp.hidden_position) == ("toy", [1, -1], "prompt_last")
    assert config.calib_fraction == "auto" and config.router == "lora-probe"
    assert config.num_leaves == 31 and config.epochs == 2  # the flat view older scripts read


def test_help_groups_each_types_generated_flags_under_its_name(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    classes = settings_classes()
    heads = sorted((out.index(f"--router {name}:"), name) for name in classes)
    sections = {name: out[start:(heads[i + 1][0] if i + 1 < len(heads) else len(out))]
                for i, (start, name) in enumerate(heads)}
    placed = set()
    for name, cls in classes.items():  # registry order: a field two types declare is under the first one
        assert sections[name].split("\n")[1].strip()  # the type's description from its settings' docstring
        for f in dataclasses.fields(cls):
            flag = "--" + f.name.replace("_", "-") + " "
            assert (flag in sections[name]) == (f.name not in placed), (name, flag)
            placed.add(f.name)
    lgb = out[out.index("--router lightgbm:"):out.index("--router lora-probe:")]
    assert "--num-leaves" in lgb and "(default: 15)" in lgb and "--epochs" not in lgb
    probe = out[out.index("--router lora-probe:"):out.index("--router self-probe:")]
    assert "--epochs" in probe and "(also for --router self-probe)" in " ".join(probe.split())  # --dataset: one flag
    assert "--router knn:" in out and "No settings of its own." in flat
    shared = out[out.index("every router type:"):out.index("--router lightgbm:")]
    assert "--target-accuracy" in shared and "--num-leaves" not in shared
    assert set(trainable()) <= set(settings_classes()) | {n for n, t in ROUTER_TYPES.items() if not t.config}


def test_keyword_settings_go_to_every_type_that_declares_them():
    config = TrainConfig(num_boost_round=60, cv_folds=0, dataset="toy", router="knn")
    assert config.settings["lightgbm"].num_boost_round == 60 and config.settings["lightgbm"].cv_folds == 0
    assert config.settings["lora-probe"].dataset == config.settings["self-probe"].dataset == "toy"
    copy = dataclasses.replace(config, promote=True, num_leaves=7)  # what the demo and the share simulation do
    assert copy.promote and copy.num_leaves == 7 and copy.num_boost_round == 60
    assert config.num_leaves == 15  # the copy's settings are its own
    copy.num_leaves = 9
    assert copy.settings["lightgbm"].num_leaves == 9 and config.num_leaves == 15
    given = TrainConfig(settings={"lightgbm": settings_classes()["lightgbm"](num_leaves=5)})
    assert given.num_leaves == 5 and given.settings["lora-probe"].epochs == 3  # the others at their defaults


def test_bad_settings_are_reported_together_with_the_shared_ones():
    with pytest.raises(ConfigError, match=r"^Invalid train-router configuration: `delta` must be in \(0, 1\); got 2; "
                                          r".*`num_leaves` must be a positive integer .*; got 1; .*`epochs` must be "
                                          r"an integer >= 1; got 0"):
        TrainConfig(delta=2, num_leaves=1, epochs=0)
    with pytest.raises(TypeError, match=r"unexpected setting\(s\) \['num_trees'\]: neither a shared train-router "
                                        r"setting nor a setting of a registered router type"):
        TrainConfig(num_trees=3)
    with pytest.raises(ConfigError, match=r"`settings\['lightgbm'\]` must be a LightGBMConfig; got dict"):
        TrainConfig(settings={"lightgbm": {"num_leaves": 5}})
