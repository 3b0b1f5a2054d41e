"""The "not lower" (non-inferiority) claims of dara.analysis.claims on hand-made per-run tables: the one-sided bound
against the margin (paired by warm start, or Welch's over runs with one warm start), the "not informative" verdicts,
the margins with their reasons in the config, and the headline claims' fixed thresholds."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dara.analysis import claims
from dara.analysis.config import load_analysis_config
from dara.analysis.paper_comparison import headline_claims, non_inferiority
from dara.analysis.paper_reference import PaperReference, PaperStatement

REPO = Path(__file__).resolve().parents[1]
NO_PAPER = PaperStatement("", "")
NOISE = np.array([-1.5, -0.5, 0.5, 1.5])  # each arm's spread around its mean: SD 1.29


def _runs(method, baseline, base=None, warm_starts=None, metric="acc") -> pd.DataFrame:
    """A per-run table: the values of each arm's runs (and step-0 base runs); ``warm_starts``: a warm start per run
    of each arm (the same list for both; None: no warm_start column)."""
    rows = []
    for name, values in (("dara_sym", method), ("gdpo", baseline), *((("base", base),) if base is not None else ())):
        for seed, value in enumerate(values):
            rows.append({"task": "t", "method": name, "G": 8, "seed": seed, metric: value,
                         **({} if warm_starts is None else {"warm_start": warm_starts[seed % len(warm_starts)]})})
    return pd.DataFrame(rows)


def _claim(runs, margin=5.0, **options):
    return claims.not_lower(runs, "acc", "dara_sym", "gdpo", margin=margin, paper=NO_PAPER, scale="t", what="a",
                            **options)


def _welch(a, b):
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    return CompareMeans(DescrStatsW(np.asarray(a, float)), DescrStatsW(np.asarray(b, float)))


def test_one_warm_start_uses_welchs_bound_and_supports_a_difference_well_within_the_margin():
    a, b = 50 + NOISE, 52 + NOISE  # 2 points lower, margin 5
    claim = _claim(_runs(a, b, base=[10.0] * 4))
    # each bound one-sided at 97.5 % and the p doubled: both directions of a claim share 5 %, as a two-sided test's
    lower = _welch(a, b).tconfint_diff(alpha=0.025, alternative="larger", usevar="unequal")[0]
    p_value = _welch(a, b).ttest_ind(alternative="larger", usevar="unequal", value=-5)[1]
    assert claim.verdict == "supported" and claim.direction == 1
    assert claim.bound == pytest.approx(lower) and claim.bound > -5
    assert claim.p_raw == pytest.approx(2 * p_value) and claim.p_raw < 0.05
    assert claim.mean_difference == pytest.approx(-2.0) and claim.ci_low <= -2.0 <= claim.ci_high
    assert claim.ours.startswith("mean 50.00 vs 52.00 (base 10.00; margin 5; n=4 vs 4; 1 warm start shared)")
    assert "Welch t over runs" in claim.ours and claim.warm_starts == 1 and claim.per_warm_start == "ws0 -2.00"


def test_a_mean_within_the_margin_is_not_enough_without_the_bound():
    # the old rule (means within the margin) said supported; three noisy runs per arm cannot bound the difference
    claim = _claim(_runs([44.0, 50.0, 47.0], [50.0, 56.0, 44.0]))
    assert claim.mean_difference == pytest.approx(-3.0)
    assert claim.verdict == "not significant" and claim.bound < -5 and claim.p_raw > 0.05


def test_significantly_worse_than_the_margin_is_refuted():
    a, b = 40 + NOISE, 52 + NOISE
    claim = _claim(_runs(a, b))
    upper = _welch(a, b).tconfint_diff(alpha=0.025, alternative="smaller", usevar="unequal")[1]
    assert upper < -5 and claim.verdict == "refuted" and claim.direction == -1
    assert f"one-sided 97.5 % bounds {claim.bound:+.2f} and {upper:+.2f} against -5" in claim.ours
    # twice the p of the direction the estimate points: "difference < -5"
    one_sided = _welch(a, b).ttest_ind(alternative="smaller", usevar="unequal", value=-5)[1]
    assert claim.p_raw == pytest.approx(2 * one_sided)
    assert "p(difference < -5, doubled)" in claim.ours


def test_paired_by_warm_start_bounds_the_per_warm_start_differences():
    from scipy import stats
    from statsmodels.stats.weightstats import DescrStatsW

    # five warm starts of very different quality shared by both arms; within each DARA-Sym is 1 to 2 points lower
    level = np.array([20.0, 35.0, 50.0, 65.0, 80.0])
    warm_starts = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    a = np.repeat(level, 2) + np.tile([-0.5, 0.5], 5) - np.repeat([1.0, 2.0, 1.5, 1.0, 2.0], 2)
    b = np.repeat(level, 2) + np.tile([0.5, -0.5], 5)
    claim = _claim(_runs(a, b, warm_starts=warm_starts))
    differences = a.reshape(5, 2).mean(axis=1) - b.reshape(5, 2).mean(axis=1)
    assert claim.bound == pytest.approx(DescrStatsW(differences).tconfint_mean(alpha=0.05)[0])
    assert claim.p_raw == pytest.approx(2 * stats.ttest_1samp(differences, -5, alternative="greater").pvalue)
    assert claim.verdict == "supported" and claim.warm_starts == 5 and "t with 4 df" in claim.ours
    assert claim.per_warm_start == "ws0 -1.00, ws1 -2.00, ws2 -1.50, ws3 -1.00, ws4 -2.00"
    # the same runs as one warm start: the spread between warm starts swamps the difference
    assert _claim(_runs(a, b)).verdict == "not significant"


def test_paired_refutation_and_the_two_level_interval():
    level = np.array([20.0, 50.0, 80.0])
    a = level - np.array([9.0, 10.0, 11.0])
    claim = _claim(_runs(a, level, warm_starts=[0, 1, 2]))
    assert claim.verdict == "refuted" and claim.mean_difference == pytest.approx(-10.0)
    assert claim.ci_low <= -10.0 <= claim.ci_high < -5 and claim.warm_starts == 3


def test_only_shared_warm_starts_are_compared():
    runs = _runs([50.0, 51.0, 52.0, 10.0], [51.0, 52.0, 53.0], warm_starts=[0, 1, 2, 3])  # ws3: DARA-Sym only
    claim = _claim(runs)
    assert claim.warm_starts == 3 and "ws3 with one arm only, left out of the test" in claim.ours
    assert claim.mean_difference == pytest.approx(-1.0)  # the 10 of warm start 3 does not enter
    no_shared = _runs([50.0, 51.0], [50.0, 51.0])
    no_shared["warm_start"] = [0, 1, 2, 3]
    assert _claim(no_shared).verdict == "not testable"


def test_the_base_and_the_floor_rule_read_the_warm_starts_both_arms_share():
    # DARA-Sym has warm starts 0-4, GDPO 0-2: warm starts 3 and 4 (DARA-Sym near the floor there, their base high)
    # enter neither the arms' means, nor the base, nor the floor rule; the base weights each warm start alike
    arms = {"dara_sym": ([50.0, 51.0, 52.0, 1.0, 1.0] * 2, [0, 1, 2, 3, 4] * 2),
            "gdpo": ([51.0, 52.0, 53.0] * 2, [0, 1, 2] * 2),
            "base": ([10.0, 20.0, 30.0, 90.0, 90.0, 10.0], [0, 1, 2, 3, 4, 0])}
    runs = pd.DataFrame([{"task": "t", "method": method, "G": 8, "seed": seed, "acc": value, "warm_start": warm_start}
                         for method, (values, starts) in arms.items()
                         for seed, (value, warm_start) in enumerate(zip(values, starts))])
    claim = _claim(runs)
    assert claim.warm_starts == 3 and "ws3, ws4 with one arm only" in claim.ours
    assert claim.ours.startswith("mean 51.00 vs 52.00 (base 20.00; margin 5; n=6 vs 6;")
    assert claim.mean_difference == pytest.approx(-1.0)


@pytest.mark.parametrize("method, baseline, bound", [([3.0, 2.0], [1.0, 0.5], 0), ([0.0, 0.0], [0.0, 0.0], 0),
                                                      ([97.0, 96.0], [99.0, 100.0], 100)])
def test_both_arms_within_the_margin_of_a_bound_are_not_informative(method, baseline, bound):
    claim = _claim(_runs(method, baseline))  # no base row
    assert claim.verdict == "not informative" and f"bound {bound:g}" in claim.ours and "base n/a" in claim.ours
    assert np.isnan(claim.p_raw)  # not tested: outside the Holm family


def test_one_arm_beyond_the_margin_of_the_bound_is_tested():
    claim = _claim(_runs(6.5 + NOISE, 2.0 + NOISE / 4))  # 6.5 is more than 5 above the floor
    assert claim.verdict != "not informative" and np.isfinite(claim.p_raw)
    # a metric with other bounds (a reward in [-3, 3]) is not informative near those only
    assert _claim(_runs([2.0, 2.1], [2.2, 2.3]), margin=1.0, bounds=(-3.0, 3.0)).verdict == "not informative"
    assert _claim(_runs(0.0 + NOISE / 10, 0.1 + NOISE / 10), margin=1.0, bounds=(-3.0, 3.0)).verdict == "supported"


def test_both_arms_below_base_by_more_than_the_margin_is_not_informative_unless_refuted():
    claim = _claim(_runs(52.7 + NOISE, 52.1 + NOISE, base=[75.0] * 4))
    assert claim.verdict == "not informative" and "below base: only worse is tested" in claim.ours
    assert claim.ours.startswith("mean 52.70 vs 52.10 (base 75.00; margin 5;")
    # within the margin by the bound, yet only "worse than the margin" was tested: its p, direction against
    assert claim.bound > -5 and claim.direction == -1 and claim.p_raw > 0.5 and claim.fallback == "not informative"
    # significantly worse than the margin is informative whatever the base
    worse = _claim(_runs(40.0 + NOISE, 60.0 + NOISE, base=[75.0] * 4))
    assert worse.verdict == "refuted"
    # after Holm, not significant falls back to "not informative", not to "not significant"
    (held,) = claims.holm([claims.Claim("c", "", "", "", "refuted", "t", p_raw=0.8, p_holm=0.8, direction=-1,
                                        fallback="not informative")])
    assert held.verdict == "not informative"
    # one arm within the margin of the base: informative again, and tested both ways
    assert _claim(_runs(71.0 + NOISE, 52.1 + NOISE, base=[75.0] * 4)).verdict == "supported"
    assert _claim(_runs(52.1 + NOISE, 71.0 + NOISE, base=[75.0] * 4)).verdict == "refuted"


def test_lower_is_better_mirrors_bound_margin_and_base():
    lower = dict(higher_is_better=False)
    supported = _claim(_runs(21.0 + NOISE, 20.0 + NOISE, base=[60.0] * 4), **lower)  # 1 point higher, margin 5
    upper = _welch(21.0 + NOISE, 20.0 + NOISE).tconfint_diff(alpha=0.025, alternative="smaller", usevar="unequal")[1]
    assert supported.verdict == "supported" and supported.bound == pytest.approx(upper) and supported.bound < 5
    assert "against +5" in supported.ours and "p(difference < +5, doubled)" in supported.ours
    assert "is not higher than" in supported.claim
    refuted = _claim(_runs(32.0 + NOISE, 20.0 + NOISE, base=[60.0] * 4), **lower)
    assert refuted.verdict == "refuted" and "p(difference > +5, doubled)" in refuted.ours
    assert _claim(_runs(10.0 + NOISE, 30.0 + NOISE, base=[60.0] * 4), **lower).verdict == "supported"
    worse = _claim(_runs(80.0 + NOISE, 81.0 + NOISE, base=[60.0] * 4), **lower)
    assert worse.verdict == "not informative" and "above base: only worse is tested" in worse.ours
    # exceed 0.00 vs 0.00: the budget never binds
    assert _claim(_runs([0.0] * 3, [0.0] * 3, base=[60.0] * 3), **lower).verdict == "not informative"


def test_missing_arms_values_or_spread_are_not_testable_or_refused():
    assert _claim(_runs([50.0, 51.0], [])).verdict == "not testable"
    assert claims.not_lower(_runs([50.0], [50.0]), "other", "dara_sym", "gdpo", margin=5, paper=NO_PAPER, scale="t",
                            what="a").verdict == "not testable"
    single = _claim(_runs([50.0], [50.0, 51.0, 49.0]))
    assert single.verdict == "not testable" and "single run" in single.ours
    with pytest.raises(ValueError, match="runs of gdpo without acc"):
        _claim(_runs([50.0, 51.0], [50.0, np.nan]))


def test_per_run_values_keep_each_run_with_its_warm_start_in_percent():
    scores = pd.DataFrame({"task": "t", "method": ["gdpo"] * 4, "G": 8, "seed": [0, 0, 1, 1],
                           "warm_start": [3, 3, 4, 4], "step": [0, 30, 0, 30], "acc": [0.1, 0.5, 0.1, 0.6]})
    table = claims.per_run_values(scores, ["acc", "absent"])
    assert table.columns.tolist() == ["task", "method", "G", "seed", "warm_start", "step", "acc"]
    assert table[["method", "seed", "warm_start", "step"]].values.tolist() == [
        ["base", 0, 3, 0], ["base", 1, 4, 0], ["gdpo", 0, 3, 30], ["gdpo", 1, 4, 30]]
    assert table["acc"].tolist() == pytest.approx([10.0, 10.0, 50.0, 60.0])
    assert "warm_start" not in claims.per_run_values(scores.drop(columns="warm_start"), ["acc"]).columns


def test_the_margins_and_their_reasons_come_from_the_analysis_config():
    for scale in ("tiny", "smoke", "paper"):
        config = load_analysis_config(REPO / "analysis/config.yaml", scale)
        metrics = ("average_accuracy", "average_format", "irrelevance_accuracy", "macro_pass1", "exceed")
        margins = {metric: non_inferiority(config, metric)["margin"] for metric in metrics}
        assert margins == {"average_accuracy": 5.0, "average_format": 5.0, "irrelevance_accuracy": 15.0,
                           "macro_pass1": 5.0, "exceed": 5.0}
        assert all(non_inferiority(config, metric)["reason"] for metric in margins)
        assert non_inferiority(config, "exceed")["bounds"] == (0.0, 100.0)
    assert "9 irrelevance items" in non_inferiority(config, "irrelevance_accuracy")["reason"]
    with pytest.raises(KeyError, match="joint"):
        non_inferiority(config, "joint")


def _config_copy(tmp_path, edit) -> Path:
    """analysis/config.yaml and its schema copied to ``tmp_path``, the config changed by ``edit``."""
    config = yaml.safe_load((REPO / "analysis/config.yaml").read_text())
    edit(config)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "config.schema.yaml").write_text((REPO / "analysis/config.schema.yaml").read_text())
    return tmp_path / "config.yaml"


def test_a_margin_without_its_reason_is_rejected_naming_the_key(tmp_path):
    path = _config_copy(tmp_path, lambda config: config["non_inferiority"]["macro_pass1"].pop("reason"))
    with pytest.raises(ValueError, match=r"non_inferiority/macro_pass1: 'reason' is a required property"):
        load_analysis_config(path, "tiny")
    path = _config_copy(tmp_path, lambda config: config["non_inferiority"].update(exceed=5))
    with pytest.raises(ValueError, match=r"non_inferiority/exceed: 5 is not of type 'object'"):
        load_analysis_config(path, "tiny")


def test_the_stable_claims_threshold_must_be_one_fig5_computes_and_bounds_a_floor_below_a_ceiling(tmp_path):
    path = _config_copy(tmp_path, lambda config: config["stable_crossing"].update(claim_threshold=0.97))
    with pytest.raises(ValueError, match=r"claim_threshold 0.97 is not one of thresholds"):
        load_analysis_config(path, "tiny")
    path = _config_copy(tmp_path, lambda config: config["non_inferiority"]["exceed"].update(bounds=[100, 0]))
    with pytest.raises(ValueError, match=r"non_inferiority/exceed: bounds must be \[floor, ceiling\]"):
        load_analysis_config(path, "tiny")


NO_CROSSINGS = pd.DataFrame(columns=["task", "method", "G", "seed", "reward", "threshold", "step", "last_step"])


def _table1_runs():
    rows = []
    values = {"dara_sym": (41.5, 60.0, 70.0), "gdpo": (44.0, 62.0, 72.0), "grpo": (40.0, 70.0, 70.0)}
    for method, (accuracy, format_, irrelevance) in values.items():
        for seed, noise in enumerate(NOISE):
            rows.append({"model": "tiny", "task": "toolcall", "method": method, "G": 4, "seed": seed, "step": 30,
                         "average_accuracy": accuracy + noise, "average_format": format_ + noise,
                         "irrelevance_accuracy": irrelevance + 4 * noise})
            rows.append({"model": "tiny", "task": "toolcall", "method": "base", "G": 4, "seed": seed, "step": 0,
                         "average_accuracy": 2.0, "average_format": 90.0, "irrelevance_accuracy": 80.0})
    return pd.DataFrame(rows)


def test_headline_claims_test_the_per_run_tables_with_the_config_margins():
    config = load_analysis_config(REPO / "analysis/config.yaml", "tiny")
    reference = PaperReference(REPO / "analysis/reference")
    table4a_runs = pd.DataFrame([{"task": "math_length", "method": method, "G": 8, "seed": seed, "step": step,
                                  "exceed": exceed, "macro_pass1": accuracy}
                                 for method, step, exceed, accuracy in (("base", 0, 70.0, 30.0),
                                                                        ("dara_asym", 40, 0.0, 20.0),
                                                                        ("static_asym", 40, 0.0, 14.0))
                                 for seed in range(3)])
    found = {c.claim: c for c in headline_claims(NO_CROSSINGS, _table1_runs(), None, table4a_runs, config, reference)}
    accuracy = found["DARA-Sym's final held-out accuracy is not lower than GDPO's"]
    assert accuracy.ours.startswith("mean 41.50 vs 44.00 (base 2.00; margin 5;")
    # 2.5 points lower, the 97.5 % bound above -5: significant alone, not after Holm over the family
    assert accuracy.bound > -5 and accuracy.p_raw < 0.05 < accuracy.p_holm and accuracy.verdict == "not significant"
    # both far below the base's 90 and 2 points apart
    assert found["DARA-Sym's final held-out format is not lower than GDPO's"].verdict == "not informative"
    # 60 is 10 below GRPO's 70, beyond the margin: informative whatever the base, refuted
    assert found["DARA-Sym's final held-out format is not lower than GRPO's"].verdict == "refuted"
    irrelevance = found["DARA-Sym's final held-out irrelevance accuracy is not lower than GDPO's"]
    assert "margin 15;" in irrelevance.ours and irrelevance.reference == "bfcl_v4_final.csv"
    assert irrelevance.paper.startswith("not reported") and irrelevance.verdict == "supported"
    exceed = found["DARA-Asym's share of responses over budget is not higher than Static-Asym's"]
    assert exceed.verdict == "not informative" and "base 70.00" in exceed.ours
    accuracy_4a = found["DARA-Asym's held-out accuracy is not lower than Static-Asym's"]
    assert accuracy_4a.verdict == "not informative"  # 20 and 14 are both more than 5 below the base's 30
    # every tested claim carries its Holm-adjusted p beside the raw one
    tested = [c for c in found.values() if np.isfinite(c.p_raw)]
    assert len(tested) >= 3 and all(c.p_holm >= c.p_raw for c in tested)
    assert max(c.p_holm for c in tested) <= 1.0
    # each claim names the task whose runs it reads (the ledger tells re-readings of one task's runs by it)
    assert {name: c.task for name, c in found.items()} == {
        name: ("math_length" if "Static-Asym" in name else "toolcall") for name in found}


def test_the_irrelevance_claim_is_not_testable_where_the_evaluation_has_no_irrelevance_items():
    config = load_analysis_config(REPO / "analysis/config.yaml", "tiny")
    table1_runs = _table1_runs().drop(columns="irrelevance_accuracy")
    found = {c.claim: c for c in headline_claims(NO_CROSSINGS, table1_runs, None, None, config,
                                                 PaperReference(REPO / "analysis/reference"))}
    assert found["DARA-Sym's final held-out irrelevance accuracy is not lower than GDPO's"].verdict == "not testable"


def _stable_records(steps: dict) -> pd.DataFrame:
    """fig5-style stable-crossing records: steps[(method, threshold)] lists one confirmed step (or None) per seed."""
    rows = []
    for (method, threshold), per_seed in steps.items():
        for seed, step in enumerate(per_seed):
            rows.append({"task": "math_length", "method": method, "G": 8, "seed": seed, "reward": "length",
                         "threshold": threshold, "step": step, "last_step": 39, "window": 6, "future": 10})
    return pd.DataFrame(rows).astype({"step": float})


def _stable_claims(records, config):
    found = headline_claims(NO_CROSSINGS, None, records, None, config, PaperReference(REPO / "analysis/reference"))
    return {c.claim.split(" reaches ")[0]: c for c in found if "stable" in c.claim}


def test_the_stable_crossing_claims_use_the_configs_threshold_even_when_no_run_confirms_it():
    config = load_analysis_config(REPO / "analysis/config.yaml", "tiny")
    assert config["stable_crossing"]["claim_threshold"] == 0.99
    never = [None] * 6
    steps = {(m, t): never for m in ("gdpo", "dara_asym", "dara_sym") for t in (0.8, 0.9, 0.95, 0.99)}
    # at 0.95 DARA is far ahead of GDPO: a threshold picked from the data would land here and call it supported
    steps.update({("dara_asym", 0.95): [10, 11, 12, 13, 14, 15], ("dara_sym", 0.95): [10, 11, 12, 13, 14, 15],
                  ("gdpo", 0.95): [30, 31, 32, 33, 34, 35]})
    found = _stable_claims(_stable_records(steps), config)
    assert set(found) == {"DARA-Asym", "DARA-Sym"}
    for claim in found.values():
        assert "a stable 0.99 length reward" in claim.claim and "window 6, confirmed over 10 steps" in claim.claim
        assert claim.verdict == "inconclusive" and "neither arm crossed" in claim.ours
    # the threshold follows the config, not the data: set to 0.95 there, the same records support the claims
    config["stable_crossing"]["claim_threshold"] = 0.95
    assert {c.verdict for c in _stable_claims(_stable_records(steps), config).values()} == {"supported"}


def test_the_stable_crossing_claims_are_not_testable_without_records_at_the_threshold():
    config = load_analysis_config(REPO / "analysis/config.yaml", "tiny")
    records = _stable_records({(m, 0.8): [20, 21] for m in ("gdpo", "dara_asym", "dara_sym")})
    found = _stable_claims(records, config)
    assert {c.verdict for c in found.values()} == {"not testable"}
    assert all("at the claim's threshold 0.99" in c.ours for c in found.values())
    # untested, each still names the task it would read: the math task here, the tool task for the format crossing
    everything = headline_claims(NO_CROSSINGS, None, records, None, config, PaperReference(REPO / "analysis/reference"))
    assert [(c.verdict, c.task) for c in everything if "stable" not in c.claim] == [("not testable", "toolcall")]
    assert {c.task for c in found.values()} == {"math_length"}


def test_a_scales_analysis_block_is_merged_over_the_config_and_validated(tmp_path):
    """What differs at one scale lives in its experiment file: merged key by key, checked by the analysis schema."""
    from dara.analysis.figures import scale_note

    paper, tiny, smoke = (load_analysis_config(REPO / "analysis/config.yaml", s) for s in ("paper", "tiny", "smoke"))
    assert paper["evaluation_metrics"]["tool"]["live_accuracy"] == "metrics/live_accuracy"
    assert "live_accuracy" not in tiny["evaluation_metrics"]["tool"]
    # smoke's runs are too short for the paper's window; tiny's 80-step math runs hold it
    assert smoke["stable_crossing"]["window_fraction"] == 0.15 and "window_fraction" not in paper["stable_crossing"]
    assert "window_fraction" not in tiny["stable_crossing"] and tiny["stable_crossing"]["window"] == 10
    assert smoke["stable_crossing"]["thresholds"] == paper["stable_crossing"]["thresholds"]  # the rest study-wide
    assert smoke["toy"]["seeds"] == 1
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
    # a scale that changes a margin restates its reason
    experiment["analysis"] = {"non_inferiority": {"exceed": {"margin": 2}}}
    path.write_text(yaml.safe_dump(experiment))
    with pytest.raises(ValueError, match=r"experiment 'tiny': non_inferiority/exceed: 'reason' is a required"):
        load_analysis_config(REPO / "analysis/config.yaml", path)
