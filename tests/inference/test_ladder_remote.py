"""A mixed ladder: local small, the served large model (OpenAIVLM over `routedvlm serve`) as mid, local large. Its
strategies answer as the all-local ladder of the same checkpoints, run_many shares per model, and records of the
served model name it `mid` with its own prefix-cache namespace stages."""
import pytest
from serve_helpers import KEY

Q = "How many boxes?"
IDS = ["small_direct", "mid_direct", "large_direct", "transfer_small_mid_4", "transfer_mid_large_4",
       "transfer_small_mid_all"]


@pytest.fixture(scope="module")
def ladders(tiny_pair, served, make_pipeline):
    from routedvlm.inference import VLM, CollaborativePipeline

    small, large = tiny_pair
    remote = VLM.from_openai(f"{served['url']}/v1", "large", api_key=KEY, timeout=120, require_prefix_cache=False)
    opts = dict(min_new_tokens=4, max_direct_tokens=6, max_reason_tokens=24, min_reason_tokens=12, k_grid=[4])
    return (CollaborativePipeline(sides=[small, remote, large], **opts),
            CollaborativePipeline(sides=[small, large, large], **opts))


def test_a_served_middle_model_answers_like_the_local_one(ladders, images):
    mixed, local = ladders
    many = mixed.run_many(images["square"], Q, IDS)
    for sid in IDS:
        ref = local.run(images["square"], Q, sid)
        assert many[sid].answer == ref.answer, sid
        assert mixed.run(images["square"], Q, sid).answer == ref.answer, sid
    mid_records = [r for r in many["transfer_small_mid_4"].trace if r["model"] == "mid"]
    assert [r["stage"] for r in mid_records] == ["mid_prefix", "mid_transfer"] and all(r["remote"] for r in mid_records)
    assert {r["model"] for r in many["transfer_mid_large_4"].trace} == {"mid", "large"}


def test_escalation_from_the_served_middle_model(ladders, images):
    mixed, local = ladders
    first = mixed.run(images["tall"], Q, "mid_direct")
    second = mixed.escalate(first, 4)
    assert second.strategy == "transfer_small_mid_4"
    assert second.answer == local.run(images["tall"], Q, "transfer_small_mid_4").answer
    assert [r["stage"] for r in second.trace] == ["mid_prefix", "mid_direct", "small_reason", "escalate"]


def test_measured_calls_of_a_middle_model_share_its_sample_namespace():
    from types import SimpleNamespace

    from routedvlm.inference.sides.http.side import measurement_salt

    req = SimpleNamespace(_measure="ns")
    assert [measurement_salt(req, s) for s in ("mid_direct", "mid_transfer", "large_direct", "escalate")] == ["ns"] * 4
    assert all(measurement_salt(req, s) != "ns" for s in ("small_direct", "mid_reason", "mid_transfer_cold"))


def test_labelling_a_served_ladder_with_samples_in_flight(served, tiny_pair, tmp_path, monkeypatch):
    """`routedvlm label` over three served models (`<url>#<id>`), two samples in flight: version-2 labels whose
    answers are the local ladder's, every model recorded as a server side."""
    import io

    import pandas as pd
    from PIL import Image

    from routedvlm.data.labelling.cli import main
    from routedvlm.data.labels.schema import read_labels

    monkeypatch.setenv("ROUTEDVLM_BACKEND_API_KEY", KEY)
    monkeypatch.setenv("ROUTEDVLM_REQUIRE_PREFIX_CACHE", "0")  # the stand-in server keeps no prefix cache

    def png(color):
        buf = io.BytesIO()
        Image.new("RGB", (64, 64), color).save(buf, format="PNG")
        return buf.getvalue()

    data = tmp_path / "bars.parquet"
    pd.DataFrame([{"sample_id": f"s{i}", "question": f"What color is bar {i}?", "answer": ["red"],
                   "image": png((60 * i, 120, 60))} for i in range(3)]).to_parquet(data)
    url = f"{served['url']}/v1"
    common = ["--dataset", str(data), "--k-grid", "2", "--strategies",
              "small_direct,mid_direct,large_direct,transfer_small_mid_2,transfer_mid_large_2", "--max-new-tokens", "3",
              "--min-new-tokens", "2", "--max-reason-tokens", "6", "--min-reason-tokens", "6", "--device", "cpu",
              "--no-progress"]
    remote, local = tmp_path / "remote.parquet", tmp_path / "local.parquet"
    assert main(["--models", f"{url}#small,{url}#large,{url}#large", "--out", str(remote), "--concurrency", "2",
                 *common]) == 0
    small, large = tiny_pair
    assert main(["--models", f"{small.name},{large.name},{large.name}", "--out", str(local), *common]) == 0
    (got, meta), (ref, _) = read_labels(remote), read_labels(local)
    got, ref = got.set_index("sample_id"), ref.set_index("sample_id")
    for sid in ("small_direct", "mid_direct", "large_direct"):
        assert list(got[f"answer__{sid}"]) == list(ref[f"answer__{sid}"]), sid
    # a transfer over HTTP keeps token strings (their bytes may differ from decoding the ids together for random tiny
    # models): the labels hold what the served ladder's pipeline answers
    from routedvlm.inference import VLM, CollaborativePipeline

    sides = [VLM.from_openai(url, m, api_key=KEY, timeout=120, require_prefix_cache=False) for m in ("small", "large", "large")]
    pipe = CollaborativePipeline(sides=sides, k_grid=[2], max_direct_tokens=3, min_new_tokens=2, max_reason_tokens=6,
                                 min_reason_tokens=6)
    image = Image.open(io.BytesIO(png((0, 120, 60))))
    for sid in ("transfer_small_mid_2", "transfer_mid_large_2"):
        assert pipe.run(image, "What color is bar 0?", sid).answer == got.loc["s0", f"answer__{sid}"], sid
    assert meta["schema_version"] == 2 and meta["remote_sides"] == ["small", "mid", "large"]
    assert meta["requests_in_flight"] == 2 and meta["runner"] == "threads"
