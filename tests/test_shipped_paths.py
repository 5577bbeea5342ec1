"""No file the repository ships names an absolute path of the machine that wrote it (a fresh clone elsewhere must
work): parquet key-value metadata, JSON/YAML/TOML/Jinja/text files (the toy checkpoints' configs among them), and
machine roots in Markdown. Python sources are left out: their docstrings and examples may name /tmp on purpose."""
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# first path segments that only exist on somebody's machine (and Windows drives)
MACHINE_ROOTS = ("work", "home", "root", "tmp", "Users", "mnt", "opt", "var", "srv", "private", "scratch", "media",
                 "workspace", "content", "kaggle", "data", "nfs", "gpfs", "lustre")
PATTERN = r"(?<![\w:/.~-])(/(?:%s)/[^\s\"'<>]*|[A-Za-z]:\\\\?[\w .-]+\\)"
ABS = re.compile(PATTERN % "|".join(MACHINE_ROOTS))
# prose may show example commands writing to /tmp; a machine's own folders are still refused there
ABS_IN_PROSE = re.compile(PATTERN % "|".join(r for r in MACHINE_ROOTS if r != "tmp"))
TEXT_SUFFIXES = {".json", ".yaml", ".yml", ".toml", ".jinja", ".txt", ".cfg", ".ini", ".csv"}


def shipped_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return [ROOT / name for name in out.split("\0") if name]


def absolute_paths(text: str, prose: bool = False) -> list[str]:
    return (ABS_IN_PROSE if prose else ABS).findall(text)


def parquet_metadata_text(path: Path) -> str:
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path).metadata or {}
    return "\n".join(v.decode("utf-8", "replace") for v in meta.values())


def test_the_detector_finds_what_a_writer_would_leave():
    assert absolute_paths('{"name": "/work/wt/vllm/data/toyworld/checkpoints/large"}')
    assert absolute_paths("out: /home/alice/runs/labels.parquet")
    assert absolute_paths(r'"C:\\Users\\bob\\labels.parquet"')
    assert not absolute_paths('{"name": "data/toyworld/checkpoints/large", "url": "http://127.0.0.1:8101/v1"}')
    assert not absolute_paths("sqlite:///mlruns/mlflow.db and /v1/chat/completions")
    assert absolute_paths("--out /tmp/x.parquet") and not absolute_paths("--out /tmp/x.parquet", prose=True)
    assert absolute_paths("see /work/wt/vllm/runs", prose=True)


def test_no_shipped_file_names_an_absolute_machine_path():
    found = {}
    files = shipped_files()
    assert any(f.suffix == ".parquet" for f in files) and any(f.name == "config.json" for f in files)
    for path in files:
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            text = parquet_metadata_text(path)
        elif path.suffix in TEXT_SUFFIXES or path.suffix == ".md":
            text = path.read_text(encoding="utf-8", errors="replace")
        else:
            continue
        hits = absolute_paths(text, prose=path.suffix == ".md")
        if hits:
            found[str(path.relative_to(ROOT))] = sorted(set(hits))[:3]
    assert not found, f"shipped files name absolute paths of the machine that wrote them: {found}"


def test_bundled_labels_name_their_models_by_weights_and_a_relative_path():
    import pyarrow.parquet as pq

    from routedvlm.router.checkpoints import config_hash, weights_hash

    meta = json.loads(pq.read_metadata(ROOT / "data/toyworld/labels.parquet").metadata[b"routedvlm"])
    for side in ("small", "large"):
        info, folder = meta["models"][side], ROOT / "data/toyworld/checkpoints" / side
        assert info["name"] == f"data/toyworld/checkpoints/{side}"
        assert info["weights_hash"] == weights_hash(folder) == info["revision"]
        assert info["config_hash"] == config_hash(folder)


def test_the_shipped_profile_names_shipped_shapes_by_name():
    data = json.loads((ROOT / "docs/profile_qwen3vl_2b_4b_cpu.json").read_text())
    assert {e["path"] for e in data["models"].values()} <= {"qwen3-vl-2b", "qwen3-vl-4b"}
