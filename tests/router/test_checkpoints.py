"""Finding a recorded checkpoint on another machine: given folder, recorded path, shipped toy checkpoint by weights
hash, else one line naming the hash and the flag (issue: labels made elsewhere named folders that do not exist)."""
import shutil

import pytest

from routedvlm.errors import ConfigError
from routedvlm.router.checkpoints import locate_checkpoint, portable_path, shipped_checkpoints, weights_hash


@pytest.fixture(scope="module")
def shipped():
    folders = {p.name: p for p in shipped_checkpoints()}
    assert set(folders) >= {"small", "large"}
    return folders


def test_a_missing_recorded_path_is_found_by_its_weights_among_the_shipped_checkpoints(shipped):
    expected = weights_hash(shipped["large"])
    found = locate_checkpoint("/nonexistent/wt/vllm/data/toyworld/checkpoints/large", expected, flag="--large",
                              what="the labels' large model")
    assert found == shipped["large"].resolve()


def test_other_weights_and_no_folder_name_the_hash_and_the_flag():
    with pytest.raises(ConfigError, match=r"^the labels' large model \(weights sha256:deadbeef.*does not exist here"
                                          r".*Pass --large FOLDER"):
        locate_checkpoint("/nonexistent/large", "sha256:" + "deadbeef" * 8, flag="--large",
                          what="the labels' large model")


def test_a_given_folder_wins_and_a_missing_one_says_it_does_not_exist(shipped, tmp_path):
    assert locate_checkpoint("/nonexistent", None, given=str(shipped["small"]), flag="--large", what="x") == \
        shipped["small"].resolve()
    with pytest.raises(ConfigError, match=r"^x must be a local checkpoint folder; '/nope' \(from --large\) does not exist"):
        locate_checkpoint(None, None, given="/nope", flag="--large", what="x")
    with pytest.raises(ConfigError, match="looks like a server URL"):
        locate_checkpoint(None, None, given="http://127.0.0.1:8101/v1#toy-large", flag="--large", what="x")


def test_a_recorded_folder_that_exists_is_used_when_its_weights_match(shipped, tmp_path):
    copy = tmp_path / "large-copy"
    shutil.copytree(shipped["large"], copy)
    assert locate_checkpoint(str(copy), weights_hash(shipped["large"]), flag="--large", what="x") == copy.resolve()


def test_portable_paths_are_relative_under_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").mkdir()
    assert portable_path(tmp_path / "ck") == "ck"
    assert portable_path("./ck") == "ck"
    assert portable_path("/elsewhere/x") == "/elsewhere/x"  # as given: outside the working folder
    assert portable_path("http://h:1/v1#m") == "http://h:1/v1#m"
    assert portable_path(f"sqlite:///{tmp_path}/mlruns/mlflow.db") == "sqlite:///mlruns/mlflow.db"
