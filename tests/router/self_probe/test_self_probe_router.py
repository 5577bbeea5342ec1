"""Router type `self-probe` (router/self_probe/): its hidden-state input, its load-time checks of the large model,
and the cascade-only rule."""
import numpy as np
import pytest

from routedvlm.router import Policy, RouterError


def test_self_probe_needs_its_hidden_state_and_a_local_large_model(self_probe_router, sample_table, tmp_path):
    import types

    from routedvlm.router.self_probe import HIDDEN_KEY

    row = sample_table.iloc[0].to_dict()
    with pytest.raises(RouterError, match=r"^The self-probe router needs the large model's hidden state"):
        self_probe_router.decide({k: v for k, v in row.items() if k != HIDDEN_KEY})
    with pytest.raises(RouterError, match=r"^The hidden-state vector has 4 values; this self-probe reads 6"):
        self_probe_router.decide({**row, HIDDEN_KEY: np.zeros(4)})
    remote = types.SimpleNamespace(large=types.SimpleNamespace(returns_hidden_states=False, name="http://gpu:8000/v1#big"))
    with pytest.raises(RouterError, match=r"^The self-probe router reads the large model's hidden states, and the "
                                          r"large side \(http://gpu:8000/v1#big\) returns none: an OpenAI-compatible server "
                                          r"\(vLLM, SGLang\) does not, nor does an in-process vLLM engine"):
        self_probe_router.attach(remote)
    other = tmp_path / "other-large"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"different weights")
    local = types.SimpleNamespace(large=types.SimpleNamespace(returns_hidden_states=True, name=str(other)))
    with pytest.raises(RouterError, match=r"^The large model .* has weights sha256:[0-9a-f]+, but this self-probe was "
                                          r"trained on the hidden states of sha256:abc"):
        self_probe_router.attach(local)
    one_shot = {**self_probe_router.policy.to_dict(), "mode": "one-shot", "paid_stages": [],
                "features": ["feat__prompt__question_words"]}
    with pytest.raises(RouterError, match=r"^A self-probe router whose rule reads it \(tau\) needs the large_direct pass, "
                                          r"so its mode must be 'cascade'"):
        type(self_probe_router)(Policy(**one_shot), self_probe_router.head)
    # an infeasible certificate falls back to a fixed rule in one-shot mode: it must still load (regression)
    d_in = self_probe_router.hidden["size"] + 1
    head = {k: (v if k == "bias" else v[:d_in]) for k, v in self_probe_router.head.items()}
    fixed = type(self_probe_router)(Policy(**{**one_shot, "rule": {"name": "fixed", "param": None,
                                                                 "strategy": "large_reason"}}), head)
    assert fixed.decide({"feat__prompt__question_words": 3.0}).strategy == "large_reason"
