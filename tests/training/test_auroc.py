"""AUROC per strategy beside the Brier score (training/probability.py): a worked example, ties, one class."""
import numpy as np
import pandas as pd

from routedvlm.training.probability import auroc, probability_report, summary_line


def test_worked_example_auroc_counts_right_answers_ranked_above_wrong_ones():
    # pairs (right, wrong): (0.35 vs 0.1) yes, (0.35 vs 0.4) no, (0.8 vs 0.1) yes, (0.8 vs 0.4) yes -> 3 of 4
    assert auroc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert auroc(np.full(4, 0.5), np.array([0, 1, 0, 1])) == 0.5  # ties count half
    assert auroc(np.array([0.2, 0.9]), np.array([1, 1])) is None  # one class: undefined, not 0.5


def test_the_probability_report_carries_auroc_per_strategy_and_the_summary_its_mean():
    proba = pd.DataFrame({"small_direct": [0.1, 0.4, 0.35, 0.8], "large_direct": [0.9, 0.9, 0.9, 0.9]})
    test = pd.DataFrame({"correct__small_direct": [False, False, True, True], "correct__large_direct": [True] * 4})
    report = probability_report(proba, test)
    assert report["small_direct"]["auroc"] == 0.75 and report["large_direct"]["auroc"] is None
    assert "mean AUROC 0.750" in summary_line(report)
