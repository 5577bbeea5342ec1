"""From audit to recalibration on the toy world, end to end (small n): RoutedVLM audits with stored inputs, gold
answers sent as feedback, `routedvlm audit export` -> `routedvlm label` (the toy settings) -> train-router with
the fresh labels as its calibration rows."""
import json

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # loads or runs the toy models / trains a router

N = 24  # >= the 20 calibration rows train-router needs


def test_audited_traffic_becomes_fresh_calibration_rows(tmp_path):
    from routedvlm.data.audit import AuditLog
    from routedvlm.data.labelling.job import run_labelling
    from routedvlm.data.toyworld.make_labels import (MAX_DIRECT_TOKENS, MAX_REASON_TOKENS, TOY_K_GRID, checkpoint_pair,
                                                     toy_label_config, toyworld_dir)
    from routedvlm.data.toyworld.task import make_samples
    from routedvlm.inference import RoutedVLM
    from routedvlm.cli import main
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    small, large = checkpoint_pair()
    log = AuditLog(tmp_path / "audit.parquet", store_inputs=True)
    vlm = RoutedVLM.from_pretrained(str(small), str(large), router="large_direct", k_grid=TOY_K_GRID,
                                    max_direct_tokens=MAX_DIRECT_TOKENS, max_reason_tokens=MAX_REASON_TOKENS,
                                    device="cpu", audit_rate=1.0, audit={"log": log, "alpha": 0.1, "seed": 0})
    samples = make_samples("eval", N, seed=7)
    for s in samples:
        out = vlm.generate(image=s.image, question=s.question)
        assert vlm.auditor.wait(120)
        vlm.audit_feedback(out.request_id, answer=s.answer)
    vlm.auditor.close()
    log.close()

    exported = tmp_path / "audited.parquet"
    assert main(["audit", "export", str(tmp_path / "audit.parquet"), "--out", str(exported)]) == 0
    data = pd.read_parquet(exported)
    assert len(data) == N and sorted(data["answer"]) == sorted(s.answer for s in samples)

    fresh = tmp_path / "fresh_labels.parquet"
    run_labelling(toy_label_config(exported, fresh, small, large, progress=False, adapter="local"))
    labels = pd.read_parquet(fresh)
    assert len(labels) == N and labels["correct__large_reason"].mean() > 0.5  # the gold answers score the models

    out = tmp_path / "run"
    train_router(TrainConfig(data=str(toyworld_dir() / "labels.parquet"), calibration_data=str(fresh), no_mlflow=True,
                             output_dir=str(out), target_accuracy=0.9, allow_constant_features=True))
    cert = json.loads((out / "router" / "policy.json").read_text())["certificate"]
    assert cert["n"] == N  # certified on the audited traffic, not on the bundled labels' calibration split
