"""The live audit on the toy world's own outputs (the bundled labels: every strategy's answer per sample), without
running the models: a router certified at target accuracy 0.85 (alpha ~ 0.143 vs large_reason), streams of audits
drawn from the labels' rows with gold on each, the status followed after every audit. Same distribution (regret
~ 9.6 %): never violated, holding within the first epoch. A question mix of hard charts only (5-6 bars, regret
~ 23 %: the promise really fails): leaves holding, and is violated, within one epoch of the shift. The rows include
the router's training rows; the run with the models is benchmarks/bench_audit_drift.py."""
import pandas as pd
import pytest

from routedvlm.inference.audit.monitor import HOLDING, VIOLATED, AuditMonitor

pytestmark = pytest.mark.slow  # trains a router

WINDOW = 1000


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from routedvlm.data.toyworld import make_labels
    from routedvlm.router import load_router
    from routedvlm.training.config import TrainConfig
    from routedvlm.training.pipeline import train_router

    labels = make_labels.toyworld_dir() / "labels.parquet"
    out = tmp_path_factory.mktemp("toy-router")
    train_router(TrainConfig(data=str(labels), no_mlflow=True, output_dir=str(out), target_accuracy=0.85,
                             allow_constant_features=True))
    router = load_router(out / "router")
    df = pd.read_parquet(labels)
    chosen = router.choices(df)
    ref = router.policy.certificate["reference"]
    routed_answer = [df[f"answer__{s}"].iloc[i] for i, s in enumerate(chosen)]
    routed_right = [bool(df[f"correct__{s}"].iloc[i]) for i, s in enumerate(chosen)]
    table = pd.DataFrame({"agree": [a == b for a, b in zip(routed_answer, df[f"answer__{ref}"])],
                          "regret": [bool(r) and not w for r, w in zip(df[f"correct__{ref}"], routed_right)],
                          "bars": df["question"].str.extract(r"^(\d)")[0].astype(int)})
    return router.policy.certificate, table


def run(cert, rows, n, seed, monitor=None):
    """Statuses after each of n audits of `rows` drawn i.i.d. (with replacement), gold sent for each."""
    mon = monitor or AuditMonitor(alpha=cert["risk_limit"], reference=cert["reference"], window=WINDOW)
    out = []
    for i, r in enumerate(rows.sample(n=n, replace=True, random_state=seed).itertuples()):
        rid = f"{seed}-{mon.audits}-{i}"
        mon.record(rid, bool(r.agree))
        mon.feedback(rid, bool(r.regret))
        out.append(mon.status)
    return mon, out


def test_same_distribution_holds_and_is_never_violated(toy):
    cert, table = toy
    assert cert["reference"] == "large_reason" and table["regret"].mean() < cert["risk_limit"]
    for seed in range(5):
        _, seen = run(cert, table, WINDOW, seed)
        assert VIOLATED not in seen and HOLDING in seen  # docs/audit.md: holding within the first epoch


def test_a_mix_of_hard_charts_leaves_holding_and_is_violated_within_an_epoch(toy):
    cert, table = toy
    hard = table[table["bars"] >= 5]
    assert hard["regret"].mean() > cert["risk_limit"]  # the promise really fails on this mix
    for seed in range(3):
        mon, before = run(cert, table, WINDOW, seed)
        assert before[-1] == HOLDING
        _, after = run(cert, hard, WINDOW, seed + 10, monitor=mon)
        assert after[-1] == VIOLATED and HOLDING not in after[after.index(VIOLATED):]
