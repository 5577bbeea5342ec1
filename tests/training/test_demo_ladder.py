"""`routedvlm demo --ladder` / benchmarks/bench_ladder.py: the ladder's certified policy against every two-model
sub-pair's, certified at the same absolute target and replayed on fresh labelled samples none of them tuned on.
On synthetic ladder labels (training/synthetic_ladder.py: a useful middle model) the comparison is checkable."""
import pytest


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    from routedvlm.training.demo.ladder import LadderDemoConfig, compare_ladder
    from routedvlm.training.synthetic_ladder import write_ladder_labels

    out = tmp_path_factory.mktemp("ladder")
    train, fresh = out / "train.parquet", out / "eval.parquet"
    write_ladder_labels(train, n=1200, seed=0)
    write_ladder_labels(fresh, n=600, seed=1)
    cfg = LadderDemoConfig(out=str(out), n_label=1200, n_eval=600, min_accuracy=0.85, delta=0.1)
    return compare_ladder(cfg, train, fresh)


def test_every_sub_pair_gets_its_own_policy_over_only_its_models_strategies(compared):
    from routedvlm.router.strategies import parse_strategy

    rows = compared["policies"]
    assert list(rows) == ["ladder", "small+mid", "small+large", "mid+large"]
    for name, row in rows.items():
        models = {m for s in row["strategies"] for m in parse_strategy(s).models}
        assert models == ({"small", "mid", "large"} if name == "ladder" else set(name.split("+")))
        assert set(row.get("mix", {})) <= set(row["strategies"])


def test_the_ladder_and_the_best_pair_are_replayed_on_the_fresh_samples_and_meet_the_target(compared):
    rows = compared["policies"]
    assert compared["n_eval"] == 600 and rows["ladder"]["certified"]
    best = rows[compared["best_pair"]]
    assert best["certified"] and compared["best_pair"] != "ladder"
    # the best pair is the fastest certified pair on the fresh samples
    pairs = [r for n, r in rows.items() if n != "ladder" and "accuracy" in r]
    assert best["mean_latency_ms"] == min(r["mean_latency_ms"] for r in pairs)
    assert compared["latency_ratio_ladder_vs_best_pair"] == pytest.approx(
        rows["ladder"]["mean_latency_ms"] / best["mean_latency_ms"])
    for r in (rows["ladder"], best):  # certified at 0.85 (delta 0.1): on 600 fresh rows, within 3 SE of the promise
        assert r["accuracy"] >= 0.85 - 3 * (0.85 * 0.15 / 600) ** 0.5


def test_the_table_names_the_best_pair_and_every_single_strategy(compared):
    from routedvlm.training.demo.ladder import table

    text = table(compared)
    assert f"| {compared['best_pair']} (best pair) | yes |" in text
    assert "| mid_direct |" in text and "| transfer_mid_large_all |" in text


def test_demo_ladder_refuses_too_few_samples_before_labelling_anything(tmp_path):
    from routedvlm.errors import ConfigError
    from routedvlm.training.demo.cli import main

    with pytest.raises(ConfigError, match=r"^The `n_label` setting must be at least 80"):
        main(["--ladder", "--n-label", "10", "--out", str(tmp_path / "d")])
    assert not (tmp_path / "d").exists()


def test_the_ladder_demo_needs_the_mid_checkpoint(tmp_path):
    import shutil

    from routedvlm.data.toyworld.make_labels import checkpoint_pair
    from routedvlm.errors import ModelLoadError
    from routedvlm.training.demo.ladder import ladder_checkpoints

    assert [p.name for p in ladder_checkpoints()] == ["small", "mid", "large"]
    for p in checkpoint_pair():
        shutil.copytree(p, tmp_path / p.name)
    with pytest.raises(ModelLoadError, match=r"^The toy ladder needs a `mid/` checkpoint .*--sides mid"):
        ladder_checkpoints(tmp_path)
