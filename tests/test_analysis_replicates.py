"""Two replicates' claims side by side: agreement, and the warm starts a claim whose verdict differs needs."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from dara.analysis import criteria
from dara.analysis.replicates import UNDECIDED, compare, markdown, scale_needed, signed_z
from script_loader import load_script


def _claims(**verdicts):
    """claims.csv rows: name -> (verdict, p_raw, direction, median_difference); ten seeds on five warm starts."""
    return pd.DataFrame([{"claim": name, "verdict": verdict, "p_raw": p, "p_holm": min(1.0, 2 * p), "direction": d,
                          "median_difference": effect, "mean_difference": np.nan, "warm_starts": 5,
                          "n_method": 10 if np.isfinite(p) else 0, "n_baseline": 10 if np.isfinite(p) else 0}
                         for name, (verdict, p, d, effect) in verdicts.items()])


def test_a_claim_with_one_verdict_in_both_replicates_keeps_it_and_one_that_differs_is_undecided():
    study = _claims(a=("supported", 0.001, 1, -5.0), b=("supported", 0.02, 1, -3.0))
    replicate = _claims(a=("supported", 0.004, 1, -4.0), b=("not significant", 0.3, 1, -1.0))
    table = compare(study, replicate).set_index("claim")
    assert table.loc["a", "agreement"] == "supported" and np.isnan(table.loc["a", "warm_starts_needed"])
    assert table.loc["b", "agreement"] == UNDECIDED
    # the pooled z of the two replicates (twice five warm starts), scaled to 80 % power at the strictest Holm level
    pooled = (norm.isf(0.02 / 2) + norm.isf(0.3 / 2)) / np.sqrt(2)
    scale = 2 * ((norm.isf(0.05 / 2 / 2) + norm.isf(0.2)) / pooled) ** 2
    assert table.loc["b", "warm_starts_needed"] == np.ceil(5 * scale) > 5
    assert table.loc["b", "seeds_needed_per_arm"] == np.ceil(10 * scale)
    assert table.loc["b", "effect_replicate"] == -1.0
    assert "undecided at this power" in markdown(compare(study, replicate))


def test_opposite_effects_pool_to_no_effect_and_untested_claims_say_so():
    assert scale_needed(signed_z(0.01, 1), signed_z(0.01, -1), 3) == np.inf
    assert signed_z(0.05, 1) == pytest.approx(norm.isf(0.025)) and signed_z(0.05, -1) < 0
    assert np.isnan(signed_z(np.nan, 1)) and np.isnan(signed_z(0.1, 0))
    assert np.isfinite(signed_z(0.0, 1)) and scale_needed(signed_z(0.0, 1), signed_z(0.5, 1), 3) < 1
    with pytest.raises(ValueError, match="at least one"):
        scale_needed(1.0, 1.0, 0)
    table = compare(_claims(c=("supported", 0.01, 1, -2.0)), _claims(c=("refuted", 0.01, -1, 2.0)))
    assert "no pooled effect" in markdown(table)
    untested = compare(_claims(c=("supported", 0.01, 1, -2.0)), _claims(c=("inconclusive", np.nan, 0, np.nan)))
    assert "not tested in one replicate" in markdown(untested)


def test_the_replicates_must_check_the_same_claims():
    with pytest.raises(ValueError, match="only in one of them: \\['b'\\]"):
        compare(_claims(a=("supported", 0.01, 1, -1.0)), _claims(a=("supported", 0.01, 1, -1.0),
                                                                 b=("supported", 0.01, 1, -1.0)))


def _criteria(drift: float) -> pd.DataFrame:
    """A criteria.csv of two readings: the math drift control's (met within 5 points) and one not read."""
    return pd.DataFrame([
        {"criterion": "3 no drift", "task": "math_length", "reading": "drift control's final minus base (points)",
         "value": drift, "bound": "in [-5, 5]", "met": abs(drift) <= 5, "read_on": "median warm start",
         "extreme_method": ""},
        {"criterion": "5 measurable", "task": "toolcall", "reading": "share crossing", "value": np.nan,
         "bound": ">= 0.5", "met": None, "read_on": "not read: no record", "extreme_method": ""}],
        columns=criteria.COLUMNS)


def test_the_script_writes_both_tables_and_refuses_a_missing_claims_file(tmp_path):
    script = load_script("analysis/replicates.py")
    for name, verdict, drift in (("study", "supported", -8.0), ("replicate", "not significant", -2.0)):
        (tmp_path / name / "tables").mkdir(parents=True)
        _claims(a=(verdict, 0.01 if verdict == "supported" else 0.2, 1, -2.0)).to_csv(
            tmp_path / name / "tables" / "claims.csv", index=False)
        _criteria(drift).to_csv(tmp_path / name / "tables" / "criteria.csv", index=False)
    script.main(["--study", str(tmp_path / "study"), "--replicate", str(tmp_path / "replicate"),
                 "--out", str(tmp_path / "out")])
    assert "0 of 1 claims have the same verdict" in (tmp_path / "out" / "replicates.md").read_text()
    assert pd.read_csv(tmp_path / "out" / "replicates.csv")["agreement"].tolist() == [UNDECIDED]
    # the regime criteria of both draws, read back from their criteria.csv (met / not met / unread cells)
    paired = pd.read_csv(tmp_path / "out" / "replicate_criteria.csv")
    assert paired["agreement"].tolist() == [criteria.ONE_OF_TWO, criteria.UNREAD_IN_BOTH]
    assert "0 of 2 readings meet their criterion in both draws, 0 in neither, 1 in one of the two, 1 not read in " \
           "either; in one of the two (a property of the draw, not of the setting): math_length: drift" in \
           (tmp_path / "out" / "replicate_criteria.md").read_text()
    (tmp_path / "replicate" / "tables" / "criteria.csv").unlink()
    with pytest.raises(SystemExit):
        script.main(["--study", str(tmp_path / "study"), "--replicate", str(tmp_path / "replicate"),
                     "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit):
        script.main(["--study", str(tmp_path / "none"), "--replicate", str(tmp_path / "replicate"),
                     "--out", str(tmp_path / "out")])
