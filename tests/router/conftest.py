"""Router test fixtures: a tiny synthetic feature table and a LightGBM router trained on it with lightgbm directly."""
import numpy as np
import pandas as pd
import pytest

from routedvlm.router import LightGBMRouter, Policy

FEATURES = ["feat__prompt__question_words", "feat__large_direct__confidence", "feat__large_direct+small_direct__agree"]
STRATEGIES = ["large_direct", "transfer_16", "transfer_64", "large_reason"]
COSTS = {"large_direct": 0.0, "transfer_16": 120.0, "transfer_64": 300.0, "large_reason": 2000.0}


@pytest.fixture(scope="session")
def feature_table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 240
    return pd.DataFrame({
        FEATURES[0]: rng.integers(3, 40, n).astype(float),
        FEATURES[1]: rng.uniform(size=n),
        FEATURES[2]: (rng.uniform(size=n) < 0.5).astype(float),
    })


@pytest.fixture(scope="session")
def lgbm_router(feature_table) -> LightGBMRouter:
    """transfer_16/transfer_64 are correct when confidence exceeds a threshold; large_reason is always
    correct and so is stored as a constant (no booster)."""
    import lightgbm

    x = feature_table.to_numpy()
    conf = feature_table[FEATURES[1]].to_numpy()
    thresholds = {"large_direct": 0.7, "transfer_16": 0.45, "transfer_64": 0.25}
    boosters = {}
    for s, thr in thresholds.items():
        y = (conf > thr).astype(int)
        params = {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5, "seed": 0}
        boosters[s] = lightgbm.train(params, lightgbm.Dataset(x, y), num_boost_round=15)
    policy = Policy(router_type="lightgbm", strategies=STRATEGIES, mode="cascade", paid_stages=["large_direct", "small_direct"],
                    features=FEATURES, expected_cost_ms=COSTS, tau=0.6, fallback="large_reason",
                    target={"kind": "accuracy", "value": 0.98}, params={"constants": {"large_reason": 0.97}})
    return LightGBMRouter(policy, boosters)


@pytest.fixture(scope="session")
def sample_table(feature_table) -> pd.DataFrame:
    """The feature table plus the sample itself (`image`, `question`), as a router that reads the sample needs, and
    a large-model hidden-state vector per row (what the self-probe reads)."""
    from PIL import Image

    from routedvlm.router.self_probe import HIDDEN_KEY

    n = len(feature_table)
    images = [Image.new("RGB", (32, 32), (int(255 * i / n), 60, 255 - int(255 * i / n))) for i in range(n)]
    questions = [f"How many bars are taller than {i % 7}?" for i in range(n)]
    rng = np.random.default_rng(3)
    hidden = [rng.normal(size=HIDDEN_SIZE).astype(np.float32) for _ in range(n)]
    return feature_table.assign(image=pd.Series(images, index=feature_table.index, dtype=object), question=questions,
                                **{HIDDEN_KEY: pd.Series(hidden, index=feature_table.index, dtype=object)})


HIDDEN_SIZE = 6


@pytest.fixture(scope="session")
def self_probe_router():
    """A SelfProbeRouter with a random linear head over 6 hidden values + the 3 features."""
    from routedvlm.router.self_probe import SelfProbeRouter

    rng = np.random.default_rng(4)
    d = HIDDEN_SIZE + len(FEATURES)
    head = {"weight": rng.normal(scale=0.7, size=(d, len(STRATEGIES))), "bias": rng.normal(size=len(STRATEGIES)),
            "mean": np.zeros(d), "std": np.ones(d)}
    policy = Policy(router_type="self-probe", strategies=STRATEGIES, mode="cascade", paid_stages=["large_direct", "small_direct"],
                    features=FEATURES, expected_cost_ms=COSTS, tau=0.6, fallback="large_reason",
                    params={"hidden": {"layers": [1], "position": "all_mean", "size": HIDDEN_SIZE},
                            "large_model": "/nonexistent/large", "large_hash": "sha256:abc"})
    return SelfProbeRouter(policy, head)


@pytest.fixture(scope="session")
def probe_router(tmp_path_factory):
    """A LoRAProbeRouter on a tiny random Qwen2-VL (untrained: random head, LoRA rank 2)."""
    import torch

    from routedvlm.inference import build_tiny_vlm
    from routedvlm.router.checkpoints import weights_hash
    from routedvlm.router.lora_probe import LoRAProbeRouter, ProbeNet, load_base

    torch.set_num_threads(1)
    base = build_tiny_vlm("qwen2_vl", tmp_path_factory.mktemp("probe-base"), seed=0, size="tiny")
    policy = Policy(router_type="lora-probe", strategies=STRATEGIES, mode="cascade",
                    paid_stages=["large_direct", "small_direct"], features=FEATURES, expected_cost_ms=COSTS, tau=0.5,
                    fallback="large_reason", params={"base_model": str(base), "base_hash": weights_hash(base)})
    net = ProbeNet(load_base(base), STRATEGIES, FEATURES, lora_r=2, seed=0)
    with torch.no_grad():
        for name, p in net.vlm.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return LoRAProbeRouter(policy, net)


@pytest.fixture(scope="session")
def knn_router(feature_table):
    """A KNNRouter whose bank is the feature table: transfers correct above a confidence threshold, as lgbm_router."""
    from routedvlm.router.knn import KNNRouter

    x = feature_table[FEATURES].to_numpy(dtype=np.float32)
    conf = feature_table[FEATURES[1]].to_numpy()
    y = np.stack([conf > 0.7, conf > 0.45, conf > 0.25, np.ones(len(conf), bool)], axis=1).astype(np.float32)
    policy = Policy(router_type="knn", strategies=STRATEGIES, mode="cascade", paid_stages=["large_direct", "small_direct"],
                    features=FEATURES, expected_cost_ms=COSTS, tau=0.6, fallback="large_reason",
                    params={"knn": {"k": 7, "prior": 1.0}})
    return KNNRouter(policy, {"x": x, "y": y, "mean": x.mean(axis=0), "std": x.std(axis=0)})


@pytest.fixture(scope="session")
def mf_router(feature_table):
    """An MFRouter of rank 2 whose first factor reads the confidence feature: transfers likelier right as it grows."""
    from routedvlm.router.mf import MFRouter

    x = feature_table[FEATURES].to_numpy(dtype=np.float64)
    d = len(FEATURES)
    proj = np.zeros((2, d))
    proj[0, 1], proj[1, 0] = 1.0, 0.5
    emb = np.array([[3.0, 0.0], [2.5, 0.2], [2.0, 0.0], [0.0, 0.0]])
    policy = Policy(router_type="mf", strategies=STRATEGIES, mode="cascade", paid_stages=["large_direct", "small_direct"],
                    features=FEATURES, expected_cost_ms=COSTS, tau=0.6, fallback="large_reason", params={"mf": {"rank": 2}})
    return MFRouter(policy, {"mean": x.mean(axis=0), "std": x.std(axis=0), "proj": proj, "emb": emb,
                             "bias": np.array([-1.0, 0.0, 0.5, 3.0])})


@pytest.fixture(scope="session")
def lgbm_pca_router(feature_table):
    """A lightgbm-pca router: the first two features reduced to one principal component (fitted on the table), the
    boosters on the third feature + that component; transfers right above a confidence threshold, as lgbm_router."""
    import lightgbm

    from routedvlm.router.lightgbm.reduce import fit_pca

    reduction = fit_pca(feature_table[FEATURES[:2]].to_numpy(dtype=np.float64), FEATURES[:2], 1)
    x = reduction.model_matrix(FEATURES, feature_table[FEATURES].to_numpy(dtype=np.float64))
    conf = feature_table[FEATURES[1]].to_numpy()
    boosters = {}
    for s, thr in {"large_direct": 0.7, "transfer_16": 0.45, "transfer_64": 0.25}.items():
        params = {"objective": "binary", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5, "seed": 0}
        data = lightgbm.Dataset(x, (conf > thr).astype(int), feature_name=reduction.model_names(FEATURES))
        boosters[s] = lightgbm.train(params, data, num_boost_round=15)
    policy = Policy(router_type="lightgbm-pca", strategies=STRATEGIES, mode="cascade",
                    paid_stages=["large_direct", "small_direct"], features=FEATURES, expected_cost_ms=COSTS, tau=0.6,
                    fallback="large_reason", params={"constants": {"large_reason": 0.97}})
    return LightGBMRouter(policy, boosters, reduction)
