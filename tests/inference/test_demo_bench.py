"""`routedvlm demo --random` (every strategy on a tiny random pair) and the escalation benchmark run end to end on
tiny models. The toy-world demo itself is tested in tests/training/test_toy_demo.py."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_demo_help(capsys):
    from routedvlm.training.demo import cli as demo

    with pytest.raises(SystemExit) as info:
        demo.main(["--help"])
    assert info.value.code == 0 and "--workdir" in capsys.readouterr().out


@pytest.mark.slow
def test_demo_runs_every_strategy(tmp_path, capsys):
    from routedvlm.training.demo import cli as demo

    assert demo.main(["--random", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for label in ["[small_direct]", "[large_reason]", "[transfer_8]", "[transfer_all]", "[escalate K=16]", "[mutual verification]"]:
        assert out.count(label) == 2, label
    assert "escalate        large" in out


def test_benchmark_reuse_prefills_only_the_new_tokens():
    spec = importlib.util.spec_from_file_location("bench_escalation", ROOT / "benchmarks" / "bench_escalation.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--size", "tiny", "--repeats", "1", "--keep-tokens", "12", "--answer-tokens", "3"])
    assert out["same_tokens"]
    assert out["reuse_prefill_tokens"] == out["cold_prefill_tokens"] - out["cached_prefix_tokens"]
    # eight more kept tokens cost exactly eight more prefill tokens on the reused prefix, which itself stays cached
    more = bench.main(["--size", "tiny", "--repeats", "1", "--keep-tokens", "20", "--answer-tokens", "3"])
    assert more["cached_prefix_tokens"] == out["cached_prefix_tokens"] > out["image_tokens"]
    assert more["reuse_prefill_tokens"] - out["reuse_prefill_tokens"] == 8
