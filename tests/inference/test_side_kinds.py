"""The spec table (`inference/sides/kinds.py`): which kind a spec names and what it declares, a kind's missing
package refused when the spec is checked, and the lifecycle (`start`/`close`) reaching every model of a ladder."""
import sys

import pytest
from ladder_helpers import LadderWordSide

from routedvlm.errors import ConfigError
from routedvlm.inference.sides.kinds import KINDS, LOCAL, check_spec, described_kind, every_side, side_kind


def test_each_spec_form_names_its_kind_and_what_that_kind_declares():
    local, http, engine = (side_kind(s) for s in ("some/folder", "http://h:8000/v1#m", "vllm:/ckpt/large"))
    assert (local, http.name, engine.name) == (LOCAL, "http", "vllm")
    assert local.stateful and not local.batching and local.hidden_states and not local.remote
    assert http.remote and http.batching and not http.stateful and not http.hidden_states
    assert engine.batching and not engine.remote and engine.prices_from_token_ids and engine.requires == ("vllm",)
    assert engine.target("vllm:/ckpt/large") == "/ckpt/large" and engine.spec("/ckpt/large") == "vllm:/ckpt/large"
    assert http.target("http://h:8000/v1#m") == "http://h:8000/v1#m" and LOCAL.spec("/a") == "/a"
    assert len({k.name for k in KINDS}) == len(KINDS) and KINDS[-1] is LOCAL  # the local kind takes every other spec


def test_every_side_asks_the_table_for_specs_and_the_side_for_objects():
    assert every_side(["http://a:1/v1#s", "vllm:/l"], "batching") and not every_side(["http://a:1/v1#s", "x"], "batching")
    assert every_side(["http://a:1/v1#s", "https://b/v1#l"], "remote") and not every_side(["vllm:/s", "vllm:/l"], "remote")
    assert every_side([LadderWordSide("a"), "vllm:/l"], "batching") is False  # a side object answers for itself
    assert every_side([LadderWordSide("a"), "vllm:/l"], "stateful") is False


def test_a_recorded_side_is_recognised_by_its_description():
    assert described_kind({"name": "/c", "engine": "vllm", "device": "vllm-engine"}).name == "vllm"
    assert described_kind({"server": "http://h/v1", "device": "remote"}).name == "http"
    assert described_kind({"name": "/c", "device": "cpu"}) is LOCAL and described_kind({}) is LOCAL


def test_a_spec_is_checked_before_anything_loads(monkeypatch):
    with pytest.raises(ConfigError, match=r"^A remote model must be given as '<base_url>#<model id>'"):
        check_spec("http://127.0.0.1:8000/v1")
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ConfigError, match=r"^The `mid` model 'vllm:/c' is an in-process vLLM engine \('vllm:<checkpoint "
                                          r"folder>'\), which needs vllm: not installed in this environment\. Install it "
                                          r"\(`make vllm-env`"):
        check_spec("vllm:/c", "`mid` model")
    assert check_spec("some/folder") is LOCAL and check_spec("http://h/v1#m").name == "http"


class Lifecycle(LadderWordSide):
    def __init__(self, name, log, fail_close=False):
        super().__init__(name)
        self.log, self.fail_close = log, fail_close

    def start(self):
        self.log.append(("start", self.name))

    def close(self):
        self.log.append(("close", self.name))
        if self.fail_close:
            raise RuntimeError(f"{self.name} failed to close")


def test_a_pipeline_starts_and_closes_every_model_of_its_ladder_once():
    """Every rung and every reasoner, one object two rungs share once; closing tries every model even when one fails
    (the first failure is raised after)."""
    from routedvlm.inference import CollaborativePipeline

    log = []
    small, large = Lifecycle("small", log), Lifecycle("large", log, fail_close=True)
    small.reasoner = Lifecycle("small-thinker", log)
    pipe = CollaborativePipeline(sides=[small, small, Lifecycle("mid2", log), large])
    pipe.start()
    assert log == [("start", "small"), ("start", "small-thinker"), ("start", "mid2"), ("start", "large")]
    log.clear()
    with pytest.raises(RuntimeError, match="large failed to close"):
        pipe.close()
    assert log == [("close", "large"), ("close", "mid2"), ("close", "small-thinker"), ("close", "small")]
