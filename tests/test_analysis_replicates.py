"""Two replicates' claims side by side: agreement, and the seeds a claim whose verdict differs needs."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from dara.analysis.replicates import UNDECIDED, compare, markdown, seeds_needed, signed_z
from script_loader import load_script


def _claims(**verdicts):
    """claims.csv rows: name -> (verdict, p_raw, direction, median_difference)."""
    return pd.DataFrame([{"claim": name, "verdict": verdict, "p_raw": p, "p_holm": min(1.0, 2 * p), "direction": d,
                          "median_difference": effect, "mean_difference": np.nan, "n_method": 10, "n_baseline": 10}
                         for name, (verdict, p, d, effect) in verdicts.items()])


def test_a_claim_with_one_verdict_in_both_replicates_keeps_it_and_one_that_differs_is_undecided():
    study = _claims(a=("supported", 0.001, 1, -5.0), b=("supported", 0.02, 1, -3.0))
    replicate = _claims(a=("supported", 0.004, 1, -4.0), b=("not significant", 0.3, 1, -1.0))
    table = compare(study, replicate).set_index("claim")
    assert table.loc["a", "agreement"] == "supported" and np.isnan(table.loc["a", "seeds_needed_per_arm"])
    assert table.loc["b", "agreement"] == UNDECIDED
    # the pooled z of the two replicates over 20 seeds, scaled to 80 % power at the family's strictest Holm level
    pooled = (norm.isf(0.02 / 2) + norm.isf(0.3 / 2)) / np.sqrt(2)
    wanted = np.ceil(20 * ((norm.isf(0.05 / 2 / 2) + norm.isf(0.2)) / pooled) ** 2)
    assert table.loc["b", "seeds_needed_per_arm"] == wanted > 10
    assert table.loc["b", "effect_replicate"] == -1.0
    assert "undecided at this power" in markdown(compare(study, replicate))


def test_opposite_effects_pool_to_no_effect_and_one_sided_claims_use_one_sided_z():
    assert seeds_needed(signed_z(0.01, 1, False), signed_z(0.01, -1, False), 10, False, 3) == np.inf
    assert signed_z(0.05, 1, True) == pytest.approx(norm.isf(0.05)) and signed_z(0.05, -1, False) < 0
    assert np.isnan(signed_z(np.nan, 1, False)) and np.isnan(signed_z(0.1, 0, False))
    with pytest.raises(ValueError, match="must be >= 1"):
        seeds_needed(1.0, 1.0, 0, False, 3)
    table = compare(_claims(c=("supported", 0.01, 1, -2.0)), _claims(c=("refuted", 0.01, -1, 2.0)))
    assert "no pooled effect" in markdown(table)


def test_the_replicates_must_check_the_same_claims():
    with pytest.raises(ValueError, match="only in one of them: \\['b'\\]"):
        compare(_claims(a=("supported", 0.01, 1, -1.0)), _claims(a=("supported", 0.01, 1, -1.0),
                                                                 b=("supported", 0.01, 1, -1.0)))


def test_the_script_writes_both_tables_and_refuses_a_missing_claims_file(tmp_path):
    script = load_script("analysis/replicates.py")
    for name, verdict in (("study", "supported"), ("replicate", "not significant")):
        (tmp_path / name / "tables").mkdir(parents=True)
        _claims(a=(verdict, 0.01 if verdict == "supported" else 0.2, 1, -2.0)).to_csv(
            tmp_path / name / "tables" / "claims.csv", index=False)
    script.main(["--study", str(tmp_path / "study"), "--replicate", str(tmp_path / "replicate"),
                 "--out", str(tmp_path / "out")])
    assert "0 of 1 claims have the same verdict" in (tmp_path / "out" / "replicates.md").read_text()
    assert pd.read_csv(tmp_path / "out" / "replicates.csv")["agreement"].tolist() == [UNDECIDED]
    with pytest.raises(SystemExit):
        script.main(["--study", str(tmp_path / "none"), "--replicate", str(tmp_path / "replicate"),
                     "--out", str(tmp_path / "out")])
