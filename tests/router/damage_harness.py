"""Run in a child process by test_integrity.py: load damaged copies of a router folder with load_router and print
one JSON line per case (flushed, so a case that kills this process is the one after the last line printed).

argv: router folder, scratch folder, JSON list of [kind, file, legacy] (legacy "rehash": format 2 with the digests
recomputed after the damage).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from damage_helpers import LIGHTGBM, SAFETENSORS, damaged_copy, rehash  # noqa: E402

from routedvlm.router import load_router  # noqa: E402


def main(folder: str, scratch: str, cases: str) -> None:
    for i, (kind, file, legacy) in enumerate(json.loads(cases)):
        table = SAFETENSORS if file.endswith(".safetensors") else LIGHTGBM
        dst = damaged_copy(folder, Path(scratch) / f"{i}-{kind}", file, table[kind], legacy=legacy is True)
        if legacy == "rehash":
            rehash(dst)
        try:
            load_router(dst)
            result = {"loaded": True}
        except Exception as exc:  # noqa: BLE001 - the test checks the type
            result = {"error": type(exc).__name__, "message": str(exc)}
        print(json.dumps({"kind": kind, "file": file, "legacy": legacy, **result}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
