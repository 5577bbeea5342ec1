"""Ways to damage a router's model files (shared by the router and inference tests).

LIGHTGBM: 7 of these kill a process that hands the file to LightGBM 4.7's C++ parser (SIGABRT: truncated, garbage
or NaN values, split feature / child index out of range, wrong or absurd num_leaves, deleted line, wrong tree_sizes);
the others raise or load. SAFETENSORS: damage to the probe's head / adapter files.
"""
import json
import re
import shutil
import struct
from pathlib import Path


def _sub(pattern, repl):
    def damage(data: bytes) -> bytes:
        text = data.decode()
        new = re.sub(pattern, repl, text, count=1, flags=re.M)
        assert new != text, pattern
        return new.encode()
    return damage


def _loose_loop(spelling: str, extra: str = ""):
    """The first tree's root right child set to node 0 (a loop), spelled loosely: LightGBM reads `0.0`, `0x0` and `0abc`
    as 0 and ignores a token too many, where Python's int() or a length check would skip the line. tree_sizes is
    dropped, as an editor who changes a tree's length must (LightGBM then reads the trees one after another)."""
    def damage(data: bytes) -> bytes:
        text = re.sub(r"^tree_sizes=.*\n", "", data.decode(), count=1, flags=re.M)
        new = re.sub(r"^right_child=\S+(.*)$", lambda m: f"right_child={spelling}{m.group(1)}{extra}", text, count=1,
                     flags=re.M)
        assert new != text
        return new.encode()
    return damage


LIGHTGBM = {
    "truncated": lambda b: b[: len(b) * 2 // 5],
    "empty": lambda b: b"",
    "binary_garbage": lambda b: bytes(range(256)) * 8,
    "garbage_leaf_values": _sub(r"^leaf_value=.*$", "leaf_value=abc def ghi"),
    "nan_leaf_values": _sub(r"^leaf_value=.*$", "leaf_value=nan inf -inf"),
    "split_feature_out_of_range": _sub(r"^split_feature=\d+", "split_feature=99"),
    "child_index_out_of_range": _sub(r"^left_child=\S+", "left_child=7"),
    "child_cycle": _sub(r"^right_child=\S+", "right_child=0"),
    "wrong_num_leaves": _sub(r"^num_leaves=\d+", "num_leaves=9"),
    "huge_num_leaves": _sub(r"^num_leaves=\d+", "num_leaves=2000000000"),
    "deleted_line": _sub(r"^threshold=.*\n", ""),
    "nan_thresholds": _sub(r"^threshold=.*$", "threshold=nan nan nan"),
    "wrong_tree_sizes": _sub(r"^tree_sizes=\d+", "tree_sizes=40"),
    "child_cycle_float": _loose_loop("0.0"),
    "child_cycle_hex": _loose_loop("0x0"),
    "child_cycle_suffix": _loose_loop("0abc"),
    "child_cycle_extra_token": _loose_loop("0", " 5"),
}
LOOSE_LOOPS = ("child_cycle_float", "child_cycle_hex", "child_cycle_suffix", "child_cycle_extra_token")


def _header(data: bytes) -> tuple[dict, bytes]:
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def _edit_header(edit):
    def damage(data: bytes) -> bytes:
        header, body = _header(data)
        edit(header)
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        return struct.pack("<Q", len(raw)) + raw + body
    return damage


def _first(header: dict) -> dict:
    return header[sorted(k for k in header if k != "__metadata__")[0]]


def _nan_body(data: bytes) -> bytes:
    header, body = _header(data)
    return data[: len(data) - len(body)] + b"\xff" * len(body)  # 0xffff... is NaN in float32 and bfloat16


SAFETENSORS = {
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "header_garbage": lambda b: b[:8] + b"x" * struct.unpack("<Q", b[:8])[0] + b[8 + struct.unpack("<Q", b[:8])[0]:],
    "offsets_out_of_range": _edit_header(lambda h: _first(h).update(data_offsets=[0, 10**9])),
    "nan_values": _nan_body,
    "renamed_tensor": _edit_header(lambda h: h.update({"renamed": h.pop(sorted(k for k in h if k != "__metadata__")[0])})),
}


def damaged_copy(folder, dst, file: str, damage, *, legacy: bool = False) -> Path:
    """A copy of router `folder` at `dst` whose model `file` is damaged; `legacy`: policy.json rewritten as format
    version 1 without digests (what a router saved before digests looks like)."""
    dst = Path(dst)
    shutil.copytree(folder, dst)
    path = dst / file
    path.write_bytes(damage(path.read_bytes()))
    if legacy:
        as_v1(dst)
    return dst


def rehash(folder) -> Path:
    """policy.json's digests recomputed for the files as they are now (a tampered router whose digests verify)."""
    import hashlib

    policy = Path(folder) / "policy.json"
    data = json.loads(policy.read_text())
    data["model_sha256"] = {f: hashlib.sha256((Path(folder) / f).read_bytes()).hexdigest() for f in data["model_sha256"]}
    policy.write_text(json.dumps(data))
    return Path(folder)


def as_v1(folder) -> Path:
    policy = Path(folder) / "policy.json"
    data = json.loads(policy.read_text())
    data.pop("model_sha256", None)
    policy.write_text(json.dumps({**data, "format_version": 1}))
    return Path(folder)
