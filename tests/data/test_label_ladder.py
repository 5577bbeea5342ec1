"""`routedvlm label` with a ladder of three models (tiny random VLMs; small, small, large as small, mid, large):
schema version 2, the bounded grid, per-model and agreement features, resume and its refusals, the printed cost
estimate, and the pair spelled as a two-model ladder."""
import pytest
from label_world import ladder_args, label, make_world, same_labels

from routedvlm.errors import ConfigError

N = 3
LADDER_IDS = ["small_direct", "mid_direct", "large_direct", "small_reason", "mid_reason", "large_reason",
              "transfer_small_mid_2", "transfer_small_mid_all", "transfer_2", "transfer_all",
              "transfer_mid_large_2", "transfer_mid_large_all"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("ladder"), N)


@pytest.fixture(scope="module")
def ladder_run(world):
    out = world.root / "full" / "labels.parquet"
    assert label(*ladder_args(world, out)) == 0
    return out


def _cfg(**kw):
    from routedvlm.data.labelling.config import LabelConfig

    return LabelConfig(**{"dataset": "d", "out": "o.parquet", **kw})


def test_a_ladder_writes_schema_version_2_with_every_strategy(ladder_run):
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.data.labels.validate import validate_labels

    df, meta = read_labels(ladder_run)
    assert meta["schema_version"] == 2 and meta["ladder"] == ["small", "mid", "large"]
    assert sorted(meta["models"]) == ["large", "mid", "small"] and meta["strategies"] == LADDER_IDS
    for sid in LADDER_IDS:
        assert {f"answer__{sid}", f"correct__{sid}", f"latency_ms__{sid}", f"output_tokens__{sid}"} <= set(df.columns)
    assert {"latency_ms__escalate_small_mid_2", "latency_ms__escalate_mid_large_all", "latency_ms__escalate_2",
            "latency_ms__escalate_all"} <= set(df.columns)
    assert validate_labels(ladder_run) == []
    ok = df[df["error"].isna()]
    assert len(ok) == N
    # the increment after mid_direct leaves out mid's prefix: cheaper than the standalone transfer
    assert (ok["latency_ms__escalate_small_mid_2"] < ok["latency_ms__transfer_small_mid_2"]).all()


def test_the_aliases_of_a_labels_set(ladder_run):
    from routedvlm.data.labels import ladder_of, read_labels, schema_version_for

    df, meta = read_labels(ladder_run)
    assert ladder_of(meta) == ("small", "mid", "large") == ladder_of({}, df)
    assert ladder_of({}) == ("small", "large") and schema_version_for({}) == 1 and schema_version_for(meta) == 2


def test_ladder_features_are_per_model_and_pairwise(ladder_run):
    from routedvlm.data.labels.schema import read_labels

    df, _ = read_labels(ladder_run)
    feats = {c for c in df.columns if c.startswith("feat__")}
    for m in ("small", "mid", "large"):
        assert f"feat__{m}_direct__logprob_mean" in feats and f"feat__{m}_direct__parsed" in feats
    assert {"feat__mid_direct+small_direct__agree", "feat__large_direct+small_direct__agree",
            "feat__large_direct+mid_direct__agree"} <= feats
    ok = df[df["error"].isna()]
    # small and mid are the same checkpoint: their greedy direct answers agree on every sample
    assert (ok["answer__small_direct"] == ok["answer__mid_direct"]).all()
    assert (ok["feat__mid_direct+small_direct__agree"] == 1.0).all()


def test_labels_validate_cli_accepts_a_ladder_and_rejects_a_wrong_version(ladder_run, tmp_path, capsys):
    from routedvlm.data.labels.schema import read_labels, write_labels
    from routedvlm.data.labels.validate import validate_labels
    from routedvlm.cli import main

    assert main(["labels", "validate", str(ladder_run)]) == 0
    df, meta = read_labels(ladder_run)
    assert any("schema_version must be 2, got 1" in p for p in validate_labels(df, {**meta, "schema_version": 1}))
    no_ladder = {k: v for k, v in meta.items() if k != "ladder"}
    write_labels(df, tmp_path / "bare.parquet", no_ladder)
    problems = validate_labels(tmp_path / "bare.parquet")
    assert any("strategies of models ['mid'] need metadata `ladder`" in p for p in problems)


def test_a_bounded_grid_labels_only_its_strategies(world, tmp_path):
    from routedvlm.data.labels.schema import read_labels

    out = tmp_path / "bounded.parquet"
    assert label(*ladder_args(world, out, "--transfer-pairs", "small:mid", "--reason-models", "none", "--limit", "1")) == 0
    df, meta = read_labels(out)
    assert meta["strategies"] == ["small_direct", "mid_direct", "large_direct", "transfer_small_mid_2",
                                  "transfer_small_mid_all"]
    assert not any(c.endswith("_reason") for c in df.columns)


def test_resume_of_a_ladder_with_other_settings_is_refused(world, ladder_run, tmp_path):
    with pytest.raises(ConfigError, match=r"^--resume needs the same settings .*transfer_pairs"):
        label(*ladder_args(world, ladder_run, "--resume", "--transfer-pairs", "small:mid"))
    with pytest.raises(ConfigError, match=r"^--resume needs the same settings .*models"):
        label(*ladder_args(world, ladder_run, "--resume", models=[world.small, world.large, world.large]))
    assert label(*ladder_args(world, ladder_run, "--resume")) == 0  # the same settings: already complete


def test_a_killed_ladder_run_resumes_to_the_same_labels(world, ladder_run, tmp_path, monkeypatch):
    """The run stops after its first flushed part (a side's outage); --resume labels the rest."""
    from routedvlm.data.labelling import per_sample
    from routedvlm.data.labels.schema import read_labels
    from routedvlm.errors import SideUnavailableError

    out = tmp_path / "resumed.parquet"
    real, calls = per_sample.label_sample, []

    def failing(pipe, sample, *a, **kw):
        calls.append(sample.sample_id)
        if len(calls) == 2:
            raise SideUnavailableError("the mid server is down")
        return real(pipe, sample, *a, **kw)

    monkeypatch.setattr(per_sample, "label_sample", failing)
    with pytest.raises(SideUnavailableError, match="--resume"):
        label(*ladder_args(world, out, "--flush-every", "1"))
    monkeypatch.setattr(per_sample, "label_sample", real)
    assert label(*ladder_args(world, out, "--resume")) == 0
    same_labels(read_labels(out)[0], read_labels(ladder_run)[0])


def test_ladder_shards_merge_to_the_single_run(world, ladder_run, tmp_path):
    from routedvlm.data.labelling.merge import merge_label_files
    from routedvlm.data.labels.schema import read_labels

    parts = [tmp_path / f"part{i}.parquet" for i in range(2)]
    for i, part in enumerate(parts):
        assert label(*ladder_args(world, part, "--shard", f"{i}/2")) == 0
    merged = merge_label_files(tmp_path / "merged.parquet", parts)
    same_labels(merged, read_labels(ladder_run)[0])
    assert read_labels(tmp_path / "merged.parquet")[1]["ladder"] == ["small", "mid", "large"]


def test_the_cost_estimate_counts_calls_per_model_by_hand():
    from routedvlm.data.labelling.estimate import calls_per_sample

    pair = ["small_direct", "large_direct", "small_reason", "large_reason", "transfer_2", "transfer_all"]
    # small: one reasoning run + its answer-closing call + its direct answer; large: prefix + direct + 2 transfers,
    # and its own reasoning (+ closing call)
    assert calls_per_sample(pair, ("small", "large")) == {"small": 3, "large": 6}
    assert calls_per_sample(LADDER_IDS, ("small", "mid", "large")) == {
        "small": 3,            # reasoning (+ closing) for small_reason and its transfers, direct
        "mid": 2 + 1 + 1 + 2,  # reasoning (+ closing) for mid_reason and its transfers, prefix, direct, 2 transfers in
        "large": 1 + 1 + 4 + 2,  # prefix, direct, 4 transfers in, large_reason (+ closing)
    }
    served = calls_per_sample(["large_direct", "transfer_2"], ("small", "large"), remote=("large",))
    assert served == {"small": 1, "large": 1 + 3}  # direct; a transfer = seed + two-stage + cold call


def test_model_time_counts_each_call_once_worked_example():
    """Two strategies share a prefix call c1 and a reasoning call c2 (one of them sees it truncated): 10 + 50 + 7 + 3."""
    from types import SimpleNamespace

    from routedvlm.data.labelling.estimate import model_ms

    def rec(model, stage, ms, **kw):
        return {"model": model, "stage": stage, "vision_ms": 0.0, "prefill_ms": 0.0, "decode_ms": ms, **kw}

    prefix, full, cut = rec("mid", "mid_prefix", 10, call="c1"), rec("small", "small_reason", 50, call="c2"), \
        rec("small", "small_reason", 20, call="c2", composed=True)
    results = {"transfer_small_mid_2": SimpleNamespace(trace=[cut, prefix, rec("mid", "mid_transfer", 7, call="c3")]),
               "transfer_small_mid_all": SimpleNamespace(trace=[full, prefix, rec("mid", "mid_transfer", 3, call="c4")])}
    assert model_ms(results) == 70.0
    assert model_ms(results, lambda model, r: 1.0 if model == "small" else 2.0) == 1 + 2 + 2 + 2


def test_the_grid_is_printed_before_the_run_and_estimate_only_writes_nothing(world, tmp_path, capsys):
    out = tmp_path / "never.parquet"
    assert label(*ladder_args(world, out, "--estimate-only", "--limit", "2")) == 0
    captured = capsys.readouterr()
    assert "labelling 3 models ['small', 'mid', 'large']: 12 strategies (3 direct, 3 reasoning, 6 transfers" in captured.err
    assert "small:mid, small:large, mid:large" in captured.err
    assert "per sample about 17 model calls (small 3, mid 6, large 8)" in captured.err
    assert "estimate: loading the models took" in captured.out and "2 selected sample(s)" in captured.out
    assert not out.exists() and not any(tmp_path.iterdir())


def test_two_models_as_a_ladder_are_the_pair():
    pair, listed = _cfg(small="a", large="b"), _cfg(models="a,b", reasoners=("small=r",))
    assert (listed.small, listed.large, listed.models, listed.small_reasoner) == ("a", "b", None, "r")
    assert listed.settings() == {**pair.settings(), "small_reasoner": "r"}
    assert listed.strategies == pair.strategies and not listed.is_ladder
    three = _cfg(models=("a", "m", "b"), reasoners=("mid=mr",))
    assert three.aliases == ("small", "mid", "large") and three.ladder_reasoners() == {"mid": "mr"}
    assert three.settings()["models"] == ["a", "m", "b"]


def test_a_resolved_ladder_config_rebuilds_from_its_fields():
    """What a Ray worker does: LabelConfig(**fields of the driver's config) is the same run."""
    from dataclasses import fields

    cfg = _cfg(models="a,m,b", transfer_pairs="small:mid", reason_models="mid", k_grid="2,4", reasoners=("mid=r",))
    again = _cfg(**{f.name: getattr(cfg, f.name) for f in fields(cfg)})
    assert again.settings() == cfg.settings() and again.strategies == cfg.strategies
    assert cfg.strategies == ("small_direct", "mid_direct", "large_direct", "mid_reason", "transfer_small_mid_2",
                              "transfer_small_mid_4", "transfer_small_mid_all")


@pytest.mark.parametrize("kw, message", [
    ({"small": "x", "large": "b", "models": ("a", "m", "b")}, r"^Pass the models either as --small/--large"),
    ({"small": "a"}, r"^Name the models to label: --small A --large B"),
    ({"models": ("a",)}, r"^The `models` setting must list 2 to 10 models"),
    ({"models": ("a", "m", "b"), "reasoners": ("mid2=x",)}, r"^The `reasoners` setting names model 'mid2'"),
    ({"models": ("a", "m", "b"), "reasoners": ("mid",)}, r"^The `reasoners` setting takes ALIAS=VALUE items"),
    ({"models": ("a", "m", "b"), "transfer_pairs": "mid:small"}, r"^The `transfer_pairs` setting takes FROM:TO pairs"),
    ({"models": ("a", "m", "b"), "reason_models": "huge"}, r"^The `reason_models` setting names \['huge'\]"),
    ({"models": ("a", "m", "b"), "strategies": "mid_direct", "transfer_pairs": "small:mid"}, r"^Pass either --strategies"),
    ({"small": "a", "large": "b", "strategies": "mid_direct"}, r"^The `strategies` setting runs model\(s\) \['mid'\]"),
])
def test_ladder_settings_errors_name_the_setting(kw, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(**kw)


def test_label_help_teaches_the_ladder(capsys):
    with pytest.raises(SystemExit):
        label("--help")
    text = capsys.readouterr().out
    for flag in ("--model SPEC", "--models A,B,C", "--reasoner ALIAS=SPEC", "--transfer-pairs", "--reason-models",
                 "--estimate-only", "--cost-model ALIAS=NAME", "grows with N^2"):
        assert flag in text, flag
