"""Router folders are verified before any parser sees them: sha256 per model file, paths inside the folder;
damaged LightGBM files end in a RouterLoadError, never in a dead process (format version 1 included)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from damage_helpers import LIGHTGBM, LOOSE_LOOPS, as_v1

from routedvlm.errors import RouterError, RouterLoadError
from routedvlm.router import load_router
from routedvlm.router.integrity import sha256_file

HARNESS = Path(__file__).with_name("damage_harness.py")
MODEL = "model_large_direct.txt"
LEGACY_KINDS = ("truncated", "nan_thresholds", "wrong_num_leaves", "empty", "child_cycle")


def _harness(folder, scratch, cases) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(HARNESS), str(folder), str(scratch), json.dumps(cases)],
                       capture_output=True, text=True, timeout=600, env=env)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    done = len(lines)
    assert r.returncode == 0, (f"the loading process died (rc {r.returncode}) at case {cases[done] if done < len(cases) else '?'}"
                               f":\n{r.stderr[-2000:]}")
    return lines


def test_policy_records_the_sha256_of_every_model_file(lgbm_router, tmp_path):
    folder = lgbm_router.save(tmp_path / "r")
    policy = json.loads((folder / "policy.json").read_text())
    assert policy["format_version"] == 3
    files = sorted(policy["params"]["model_files"].values())
    assert sorted(policy["model_sha256"]) == files and files
    assert all(policy["model_sha256"][f] == sha256_file(folder / f) for f in files)


def test_every_kind_of_damage_is_a_clean_load_error(lgbm_router, tmp_path):
    folder = lgbm_router.save(tmp_path / "r")
    cases = [[kind, MODEL, False] for kind in LIGHTGBM] + [[kind, MODEL, True] for kind in LEGACY_KINDS]
    results = _harness(folder, tmp_path / "scratch", cases)
    assert len(results) == len(cases)
    for r in results[: len(LIGHTGBM)]:  # format 2: the digest differs, nothing is parsed
        assert r.get("error") == "RouterLoadError", r
        assert f"model file '{MODEL}' has sha256" in r["message"] and "nothing was parsed" in r["message"], r
    legacy = {r["kind"]: r for r in results[len(LIGHTGBM):]}  # format 1: parsed in a child process first
    for kind, r in legacy.items():
        assert r.get("error") == "RouterLoadError", r
        assert r["message"].startswith(f"The model file '{folder.parent / 'scratch'}"), r
        assert ("crashed LightGBM's parser (SIG" in r["message"] or "is not a readable LightGBM text model" in r["message"]), r
        assert "records no sha256" in r["message"]
    # a child link that loops loads in LightGBM, whose prediction then never returns: refused as not a tree
    assert "Tree=0 is not a tree (a child link loops" in legacy["child_cycle"]["message"]


def test_damage_with_recomputed_digests_is_parsed_in_the_child_check_too(lgbm_router, tmp_path):
    """The digest proves integrity, not sanity: a format-2 router whose damaged LightGBM file carries a matching
    sha256 is parsed in the child process first, so no kind of damage kills or hangs the loading process."""
    folder = lgbm_router.save(tmp_path / "r")
    results = {r["kind"]: r for r in _harness(folder, tmp_path / "scratch", [[k, MODEL, "rehash"] for k in LIGHTGBM])}
    assert len(results) == len(LIGHTGBM)
    refused = {k for k, r in results.items() if r.get("error") == "RouterLoadError"}
    assert refused >= {"truncated", "empty", "binary_garbage", "child_cycle", "child_index_out_of_range",
                       "split_feature_out_of_range", "huge_num_leaves", "wrong_tree_sizes", "deleted_line",
                       *LOOSE_LOOPS}, results
    assert all(r.get("loaded") or k in refused for k, r in results.items()), results
    for kind in ("child_cycle", *LOOSE_LOOPS):  # checked on LightGBM's parse: `0.0`, `0x0`, `0abc` all read as 0
        assert "Tree=0 is not a tree (a child link loops" in results[kind]["message"], results[kind]
        # regression (issue 39): the message gave a format-1 reason ("records no sha256") for a hashed router
        assert "records no sha256" not in results[kind]["message"], results[kind]
        assert "a matching sha256 proves only" in results[kind]["message"], results[kind]


def test_paths_that_leave_the_router_folder_are_refused_before_reading(lgbm_router, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not a model")
    for n, name in enumerate([str(outside), "../outside.txt", "sub/../../outside.txt", "link.txt"]):
        folder = lgbm_router.save(tmp_path / f"r{n}")
        (folder / "link.txt").symlink_to(outside)
        data = json.loads((folder / "policy.json").read_text())
        data["params"]["model_files"]["large_direct"] = name
        data["model_sha256"] = {**data["model_sha256"], name: sha256_file(outside)}
        data["model_sha256"].pop(MODEL)
        (folder / "policy.json").write_text(json.dumps(data))
        with pytest.raises(RouterLoadError, match=r"fails its integrity check; nothing was parsed:\n  - model file "
                                                  r"'(.*outside|link).txt' (is an absolute path|climbs out of the folder with "
                                                  r"'\.\.'|leads outside the folder)"):
            load_router(folder)
    folder = lgbm_router.save(tmp_path / "escape-dir")
    (folder / "sub").symlink_to(tmp_path, target_is_directory=True)
    data = json.loads((folder / "policy.json").read_text())
    data["params"]["model_files"]["large_direct"] = "sub/outside.txt"
    (folder / "policy.json").write_text(json.dumps(data))
    with pytest.raises(RouterLoadError, match=r"'sub/outside.txt' leads outside the folder"):
        load_router(as_v1(folder))  # the containment check holds in format version 1 too


def test_format_2_needs_every_digest_format_1_loads_without(lgbm_router, feature_table, tmp_path):
    folder = lgbm_router.save(tmp_path / "r")
    data = json.loads((folder / "policy.json").read_text())
    del data["model_sha256"][MODEL]
    (folder / "policy.json").write_text(json.dumps(data))
    with pytest.raises(RouterLoadError, match=rf"model file '{MODEL}' has no sha256 in `model_sha256` \(required since "
                                              "format version 2\)"):
        load_router(folder)
    legacy = load_router(as_v1(folder))  # v1: no digests; the files are parsed in a child process first
    assert legacy.policy.format_version == 1
    assert [d.strategy for d in legacy.decide_batch(feature_table)] == [d.strategy for d in lgbm_router.decide_batch(feature_table)]
    data = json.loads((folder / "policy.json").read_text()) | {"model_sha256": {MODEL: "x" * 64}}
    (folder / "policy.json").write_text(json.dumps(data))
    with pytest.raises(RouterError, match=r"`model_sha256` values must be 64 lowercase hex digits"):
        load_router(folder)


@pytest.mark.parametrize("text", ['{"router_type": "lightgbm", "strategies": 5}', "[" * 100000 + "]" * 100000,
                                  '{"router_type": "lightgbm", "strategies": ["large_direct"], "params": {"model_files": 3}}'])
def test_malformed_policy_json_is_a_load_error(tmp_path, text):
    (tmp_path / "policy.json").write_text(text)
    with pytest.raises(RouterLoadError):
        load_router(tmp_path)


PROBE_FILES = ("head.safetensors", "adapter/adapter_model.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("file", PROBE_FILES)
def test_damaged_probe_files_are_clean_load_errors(probe_router, tmp_path, file):
    from damage_helpers import SAFETENSORS, damaged_copy

    folder = probe_router.save(tmp_path / "probe")
    assert sorted(probe_router.policy.model_sha256) == ["adapter/adapter_config.json", *sorted(PROBE_FILES)]
    for kind, damage in SAFETENSORS.items():
        with pytest.raises(RouterLoadError, match=rf"nothing was parsed:\n  - model file '{file}' has sha256 "):
            load_router(damaged_copy(folder, tmp_path / f"{kind}", file, damage))
        # format 1 (no digests): safetensors refuses bad files itself; names, shapes and values are checked after
        with pytest.raises(RouterLoadError, match=r"^The probe's weights do not load \((SafetensorError|ValueError|RuntimeError)"):
            load_router(damaged_copy(folder, tmp_path / f"{kind}-v1", file, damage, legacy=True))


def test_damaged_self_probe_head_is_a_clean_load_error(self_probe_router, tmp_path):
    from damage_helpers import SAFETENSORS, damaged_copy

    folder = self_probe_router.save(tmp_path / "self-probe")
    assert sorted(self_probe_router.policy.model_sha256) == ["head.safetensors"]
    for kind, damage in SAFETENSORS.items():
        with pytest.raises(RouterLoadError, match=r"nothing was parsed:\n  - model file 'head.safetensors' has sha256 "):
            load_router(damaged_copy(folder, tmp_path / kind, "head.safetensors", damage))
        # format 1 (no digests): safetensors refuses a broken file itself; shapes and values are checked after
        with pytest.raises(RouterLoadError, match=r"head.safetensors (is not a readable safetensors head|holds non-finite)"
                                                  r"|^The self-probe head does not fit its policy"):
            load_router(damaged_copy(folder, tmp_path / f"{kind}-v1", "head.safetensors", damage, legacy=True))
