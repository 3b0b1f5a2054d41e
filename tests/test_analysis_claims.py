"""The "not lower" (non-inferiority) claims of dara.analysis.claims on hand-made summaries: the margin, the
step-0 base beside both arms, and the "not informative" verdicts."""

from pathlib import Path

import pandas as pd
import pytest

from dara.analysis import claims
from dara.analysis.config import load_analysis_config
from dara.analysis.paper_comparison import headline_claims, non_inferiority_margin
from dara.analysis.paper_reference import PaperReference, PaperStatement

REPO = Path(__file__).resolve().parents[1]
NO_PAPER = PaperStatement("", "")


def _summary(method: float, baseline: float, base: float | None = None, sd=(1.0, 1.0), metric="acc") -> pd.DataFrame:
    rows = [{"method": "dara_sym", "metric": metric, "mean": method, "sd": sd[0], "n": 10},
            {"method": "gdpo", "metric": metric, "mean": baseline, "sd": sd[1], "n": 8}]
    if base is not None:
        rows.append({"method": "base", "metric": metric, "mean": base, "sd": 0.0, "n": 18})
    return pd.DataFrame(rows)


def _claim(summary, margin=5.0, **options):
    return claims.not_lower(summary, "acc", "dara_sym", "gdpo", margin=margin, paper=NO_PAPER, scale="t", what="a",
                            **options)


def test_within_the_margin_is_supported_and_the_text_states_base_and_margin():
    claim = _claim(_summary(48.0, 52.0, base=10.0))  # 4 points lower, margin 5
    assert claim.verdict == "supported"
    assert claim.ours == "48.00 vs 52.00 (base 10.00; margin 5; pooled SD 1.00; n=10 vs 8)"
    assert _claim(_summary(47.0, 52.0, base=10.0)).verdict == "supported"  # exactly at the margin


def test_beyond_the_margin_is_not_supported_whatever_the_seed_noise():
    # the old rule (one pooled SD) would call this supported: SD 10, gap 6
    claim = _claim(_summary(46.0, 52.0, base=10.0, sd=(10.0, 10.0)))
    assert claim.verdict == "not supported" and "pooled SD 10.00" in claim.ours
    assert _claim(_summary(46.0, 52.0, base=10.0), margin=6.5).verdict == "supported"


def test_both_arms_below_base_by_more_than_the_margin_is_not_informative():
    claim = _claim(_summary(52.7, 52.1, base=75.0))
    assert claim.verdict == "not informative"
    assert claim.ours.startswith("52.70 vs 52.10 (base 75.00; margin 5;") and "below base" in claim.ours
    # one arm within the margin of the base: informative again, and decided by the margin
    assert _claim(_summary(71.0, 52.1, base=75.0)).verdict == "supported"
    assert _claim(_summary(52.1, 71.0, base=75.0)).verdict == "not supported"
    # a method worse than its baseline beyond the margin is "not supported", informative whatever the base
    assert _claim(_summary(10.0, 60.0, base=75.0)).verdict == "not supported"


@pytest.mark.parametrize("value", [0.0, 100.0])
def test_both_arms_at_a_bound_of_the_metric_are_not_informative(value):
    claim = _claim(_summary(value, value, sd=(0.0, 0.0)))  # no base row
    assert claim.verdict == "not informative"
    assert "base n/a" in claim.ours and f"bound {value:g}" in claim.ours
    # one arm off the bound: decided by the margin
    assert _claim(_summary(abs(value - 1.0), value)).verdict == "supported"


def test_without_a_base_the_margin_decides():
    assert _claim(_summary(48.0, 52.0)).verdict == "supported"
    claim = _claim(_summary(40.0, 52.0))
    assert claim.verdict == "not supported" and "(base n/a; margin 5;" in claim.ours


def test_lower_is_better_mirrors_margin_and_base():
    lower = dict(higher_is_better=False)
    assert _claim(_summary(24.0, 20.0, base=60.0), **lower).verdict == "supported"  # 4 points higher, margin 5
    assert _claim(_summary(26.0, 20.0, base=60.0), **lower).verdict == "not supported"
    assert _claim(_summary(10.0, 30.0, base=60.0), **lower).verdict == "supported"  # lower is better
    # both more than the margin above (worse than) the base
    worse = _claim(_summary(80.0, 81.0, base=60.0), **lower)
    assert worse.verdict == "not informative" and "above base" in worse.ours
    # below the base is better, not uninformative
    assert _claim(_summary(30.0, 31.0, base=60.0), **lower).verdict == "supported"
    # exceed 0.00 vs 0.00: the budget never binds
    assert _claim(_summary(0.0, 0.0, base=60.0, sd=(0.0, 0.0)), **lower).verdict == "not informative"
    assert "is not higher than" in worse.claim


def test_missing_arm_is_not_testable():
    summary = _summary(50.0, 50.0).iloc[:1]
    assert _claim(summary).verdict == "not testable"


def test_the_margins_come_from_the_analysis_config():
    for scale in ("tiny", "smoke", "paper"):
        config = load_analysis_config(REPO / "analysis/config.yaml", scale)
        assert {metric: non_inferiority_margin(config, metric)
                for metric in ("average_accuracy", "average_format", "macro_pass1", "exceed")} == {
            "average_accuracy": 5.0, "average_format": 5.0, "macro_pass1": 5.0, "exceed": 5.0}
    with pytest.raises(KeyError, match="joint"):
        non_inferiority_margin(config, "joint")


def test_headline_claims_use_the_config_margin_and_the_step0_base(tmp_path):
    config = load_analysis_config(REPO / "analysis/config.yaml", "tiny")
    reference = PaperReference(REPO / "analysis/reference")
    table1 = pd.DataFrame([
        {"model": "tiny", "cohort": "step 0 (base policy)", "method": "base", "metric": "average_accuracy", "mean": 2.0, "sd": 0.0, "n": 30},
        {"model": "tiny", "cohort": "step 0 (base policy)", "method": "base", "metric": "average_format", "mean": 90.0, "sd": 0.0, "n": 30},
        {"model": "tiny", "cohort": "all runs", "method": "dara_sym", "metric": "average_accuracy", "mean": 41.0, "sd": 3.0, "n": 10},
        {"model": "tiny", "cohort": "all runs", "method": "gdpo", "metric": "average_accuracy", "mean": 44.0, "sd": 3.0, "n": 10},
        {"model": "tiny", "cohort": "all runs", "method": "grpo", "metric": "average_format", "mean": 70.0, "sd": 3.0, "n": 10},
        {"model": "tiny", "cohort": "all runs", "method": "dara_sym", "metric": "average_format", "mean": 60.0, "sd": 3.0, "n": 10},
        {"model": "tiny", "cohort": "all runs", "method": "gdpo", "metric": "average_format", "mean": 62.0, "sd": 3.0, "n": 10},
        # the retained cohort must not be read as the final checkpoint
        {"model": "tiny", "cohort": "retained", "method": "dara_sym", "metric": "average_accuracy", "mean": 10.0, "sd": 3.0, "n": 4},
    ])
    table4a = pd.DataFrame([
        {"method": "base", "metric": "exceed", "mean": 70.0, "sd": 0.0, "n": 12},
        {"method": "dara_asym", "metric": "exceed", "mean": 0.0, "sd": 0.0, "n": 3},
        {"method": "static_asym", "metric": "exceed", "mean": 0.0, "sd": 0.0, "n": 3},
        {"method": "base", "metric": "macro_pass1", "mean": 30.0, "sd": 0.0, "n": 12},
        {"method": "dara_asym", "metric": "macro_pass1", "mean": 20.0, "sd": 5.0, "n": 3},
        {"method": "static_asym", "metric": "macro_pass1", "mean": 14.0, "sd": 3.0, "n": 3},
    ])
    crossings = pd.DataFrame(columns=["task", "method", "G", "seed", "reward", "threshold", "step", "last_step"])
    found = {c.claim: c for c in headline_claims(crossings, table1, None, None, table4a, config, reference)}
    accuracy = found["DARA-Sym's final held-out accuracy is not lower than GDPO's"]
    assert accuracy.verdict == "supported"  # 3 points lower, margin 5; base 2 far below both
    assert accuracy.ours == "41.00 vs 44.00 (base 2.00; margin 5; pooled SD 3.00; n=10 vs 10)"
    format_gdpo = found["DARA-Sym's final held-out format is not lower than GDPO's"]
    assert format_gdpo.verdict == "not informative"  # both far below the base's 90
    format_grpo = found["DARA-Sym's final held-out format is not lower than GRPO's"]
    assert format_grpo.verdict == "not supported"  # 60 is 10 below GRPO's 70: beyond the margin, whatever the base
    exceed = found["DARA-Asym's share of responses over budget is not higher than Static-Asym's"]
    assert exceed.verdict == "not informative" and "base 70.00" in exceed.ours
    accuracy_4a = found["DARA-Asym's held-out accuracy is not lower than Static-Asym's"]
    assert accuracy_4a.verdict == "not informative"  # 20 and 14 are both more than 5 below the base's 30


def _stable_records(steps: dict) -> pd.DataFrame:
    """fig5-style stable-crossing records: steps[(method, threshold)] lists one confirmed step (or None) per seed."""
    rows = []
    for (method, threshold), per_seed in steps.items():
        for seed, step in enumerate(per_seed):
            rows.append({"task": "math_length", "method": method, "G": 8, "seed": seed, "reward": "length",
                         "threshold": threshold, "step": step, "last_step": 39, "window": 6, "future": 10})
    return pd.DataFrame(rows).astype({"step": float})


def test_the_stable_crossing_claim_takes_the_strictest_confirmed_threshold_and_says_when_none_is():
    config = load_analysis_config(REPO / "analysis/config.yaml", "tiny")
    reference = PaperReference(REPO / "analysis/reference")
    crossings = pd.DataFrame(columns=["task", "method", "G", "seed", "reward", "threshold", "step", "last_step"])
    never = [None] * 4
    some = {(m, t): never for m in ("gdpo", "dara_asym", "dara_sym") for t in (0.8, 0.9, 0.99)}
    some[("dara_asym", 0.9)] = [20, 22, None, 21]
    some[("dvao", 0.99)] = [30, 30, 30, 30]  # a method outside the comparison does not pick the threshold
    found = [c for c in headline_claims(crossings, None, None, _stable_records(some), None, config, reference)
             if "stable" in c.claim]
    assert [c.claim.split(" reaches ")[1].split(" length")[0] for c in found] == ["a stable 0.9"] * 2
    assert not any("confirms any threshold" in c.claim for c in found)
    verdicts = {c.claim.split(" reaches ")[0]: c.verdict for c in found}
    assert verdicts["DARA-Sym"] == "inconclusive"  # neither arm crosses 0.9
    assert verdicts["DARA-Asym"] != "inconclusive"  # three of its four seeds confirm 0.9
    none = {(m, t): never for m in ("gdpo", "dara_asym", "dara_sym") for t in (0.8, 0.9, 0.99)}
    found = [c for c in headline_claims(crossings, None, None, _stable_records(none), None, config, reference)
             if "stable" in c.claim]
    assert len(found) == 2
    assert all("a stable 0.99 length reward" in c.claim and "no GDPO or DARA seed confirms any threshold" in c.claim
               for c in found)
    assert {c.verdict for c in found} == {"inconclusive"}


def test_a_scales_analysis_block_is_merged_over_the_config_and_validated(tmp_path):
    """What differs at one scale lives in its experiment file: merged key by key, checked by the analysis schema."""
    import yaml

    from dara.analysis.figures import scale_note

    paper, tiny = (load_analysis_config(REPO / "analysis/config.yaml", s) for s in ("paper", "tiny"))
    assert paper["evaluation_metrics"]["tool"]["live_accuracy"] == "metrics/live_accuracy"
    assert "live_accuracy" not in tiny["evaluation_metrics"]["tool"]
    assert tiny["stable_crossing"]["window_fraction"] == 0.15 and "window_fraction" not in paper["stable_crossing"]
    assert tiny["stable_crossing"]["thresholds"] == paper["stable_crossing"]["thresholds"]  # the rest study-wide
    assert load_analysis_config(REPO / "analysis/config.yaml", "smoke")["toy"]["seeds"] == 1
    # the paper's setting needs no caveat; verl on CPU is not the paper's setting
    assert scale_note(paper) == "" and "verl_cpu scale" in scale_note(
        load_analysis_config(REPO / "analysis/config.yaml", "verl_cpu"))
    experiment = yaml.safe_load((REPO / "experiments" / "tiny.yaml").read_text())
    experiment["analysis"] = {"stable_crossing": {"windw_fraction": 0.2}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(experiment))
    with pytest.raises(ValueError, match=r"analysis block of experiment 'tiny': stable_crossing: .*'windw_fraction'"):
        load_analysis_config(REPO / "analysis/config.yaml", path)
    experiment["analysis"] = {"stable_crossing": 0.15}
    path.write_text(yaml.safe_dump(experiment))
    with pytest.raises(ValueError, match=r"analysis/stable_crossing must be a mapping"):
        load_analysis_config(REPO / "analysis/config.yaml", path)
