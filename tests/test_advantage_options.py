"""The estimator options a verl run sets through ``algorithm.dara``: the GD2PO-Hard / DVAO epsilons and the
policy for single-response groups."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from dara.advantages import METHODS, compute_advantages
from dara.advantages_loop import loop_advantages


def _kwargs(method):
    return {"static_weights": [2.0, 1.0]} if method.startswith("static") else {}


def test_gd2po_sign_eps_decides_what_counts_as_a_sign():
    # Group 0: channel 1 differs by a hair, so response 0 has z = +0.7 on channel 0 and a tiny z on channel 1.
    rewards = np.array([[1.0, 0.0], [0.0, 0.0], [0.5, 0.0], [0.5, 1e-7]])
    index = [0, 0, 0, 0]
    default = compute_advantages("gd2po_hard", rewards, index)
    # The tiny channel-1 difference is a full z-score (z-scoring removes scale), so rows with opposite signs conflict
    assert default.metrics["gd2po_hard/conflict_ratio"] > 0
    loose = compute_advantages("gd2po_hard", rewards, index, sign_eps=10.0)  # no |z| is a sign: nothing conflicts
    assert loose.metrics["gd2po_hard/conflict_ratio"] == 0.0
    assert torch.all(loose.loss_weights == 1.0)
    for sign_eps in (1e-8, 0.5, 10.0):
        ref = loop_advantages("gd2po_hard", rewards, index, sign_eps=sign_eps)
        ours = compute_advantages("gd2po_hard", rewards, index, sign_eps=sign_eps)
        np.testing.assert_allclose(ours.advantages.numpy(), ref["advantages"], atol=1e-5)
        np.testing.assert_allclose(ours.loss_weights.numpy(), ref["loss_weights"], atol=1e-6)


def test_dvao_eps_zeroes_groups_with_a_small_denominator():
    rewards = np.array([[0.0, 0.0], [0.01, 0.0], [0.0, 1.0], [1.0, 0.0]])
    index = ["a", "a", "b", "b"]
    default = compute_advantages("dvao", rewards, index)
    assert torch.all(default.advantages[:2] != 0)
    raised = compute_advantages("dvao", rewards, index, dvao_eps=0.1)  # group a's denominator is 0.0025
    assert torch.all(raised.advantages[:2] == 0)
    torch.testing.assert_close(raised.advantages[2:], default.advantages[2:])
    ref = loop_advantages("dvao", rewards, index, dvao_eps=0.1)
    np.testing.assert_allclose(raised.advantages.numpy(), ref["advantages"], atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "dara_sym", "sign_eps": 1e-3}, "sign_eps is only read by gd2po_hard, not by dara_sym"),
    ({"method": "gdpo", "dvao_eps": 1e-3}, "dvao_eps is only read by dvao, not by gdpo"),
    ({"method": "gd2po_hard", "sign_eps": float("nan")}, "sign_eps must be a finite number"),
    ({"method": "dvao", "dvao_eps": -1.0}, "dvao_eps must be a finite number"),
    ({"method": "dara_sym", "singletons": "drop"}, "unknown singletons policy"),
])
def test_bad_options_raise_naming_the_problem(kwargs, message):
    method = kwargs.pop("method")
    with pytest.raises(ValueError, match=message):
        compute_advantages(method, np.zeros((4, 2)), [0, 0, 1, 1], **kwargs)


def test_singleton_group_raises_by_default():
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="at least two responses"):
        compute_advantages("dara_asym", rewards, ["a", "a", "b"])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("index_kind", ["str", "int", "tensor"])
def test_singletons_zero_gives_advantage_zero_and_counts_the_group_inactive(method, index_kind):
    rng = np.random.default_rng(3)
    multi = rng.integers(0, 2, size=(8, 2)).astype(float)
    multi[0, 0], multi[1, 0] = 1.0, 0.0  # channel 0 is active in group 0
    ids = [0, 0, 0, 0, 1, 1, 1, 1]
    # Two singleton groups (ids 7 and 9) interleaved with the full groups.
    rewards = np.concatenate([multi[:4], [[1.0, 1.0]], multi[4:], [[0.0, 1.0]]])
    all_ids = ids[:4] + [7] + ids[4:] + [9]
    index = {"str": [f"u{i}" for i in all_ids], "int": np.asarray(all_ids),
             "tensor": torch.as_tensor(all_ids)}[index_kind]
    result = compute_advantages(method, rewards, index, singletons="zero", channel_names=["f", "c"],
                                **_kwargs(method))
    alone = compute_advantages(method, multi, ids, channel_names=["f", "c"], **_kwargs(method))
    keep = np.array([True] * 4 + [False] + [True] * 4 + [False])
    assert result.advantages.shape == (10,)
    assert torch.all(result.advantages[~keep] == 0)
    torch.testing.assert_close(result.advantages[keep], alone.advantages)
    torch.testing.assert_close(result.weights, alone.weights)
    # Four groups, two of which can never be active: densities halve, active counts stay.
    torch.testing.assert_close(result.density, alone.density / 2)
    assert result.metrics["density/f"] == pytest.approx(alone.metrics["density/f"] / 2)
    assert result.metrics["active_groups/f"] == alone.metrics["active_groups/f"]
    assert result.metrics["n_groups"] == 4.0
    assert result.metrics["singleton_groups"] == 2.0
    assert set(result.metrics) == set(alone.metrics) | {"singleton_groups"}


def test_singletons_zero_without_singletons_matches_the_default_and_token_lengths_follow_their_rows():
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    lengths = np.array([3, 5, 7, 2, 9])
    index = ["a", "a", "b", "b", "c"]
    result = compute_advantages("dara_sym", rewards, index, singletons="zero", batch_norm="token", lengths=lengths)
    alone = compute_advantages("dara_sym", rewards[:4], index[:4], batch_norm="token", lengths=lengths[:4])
    torch.testing.assert_close(result.advantages[:4], alone.advantages)
    assert result.advantages[4] == 0
    plain = compute_advantages("dara_sym", rewards[:4], index[:4], singletons="zero")
    default = compute_advantages("dara_sym", rewards[:4], index[:4])
    torch.testing.assert_close(plain.advantages, default.advantages)
    assert plain.metrics["singleton_groups"] == 0.0


def test_all_singletons_is_all_zero_and_inactive():
    result = compute_advantages("dara_asym", np.eye(3, 2), ["a", "b", "c"], singletons="zero",
                                channel_names=["f", "c"])
    assert torch.all(result.advantages == 0)
    assert torch.all(result.density == 0) and torch.all(result.weights == 1)
    assert result.metrics["singleton_groups"] == 3.0 and result.metrics["n_groups"] == 3.0
    assert result.metrics["active_groups/f"] == 0.0


# A value of each option that changes some method's output on the batch below, away from its default.
_CHANGED = {"w_max": 1.0, "tau": 5.0, "eps": 0.5, "batch_norm": "none", "static_weights": (3.0, 1.0),
            "base_weights": (0.9, 0.1), "sign_eps": 0.9, "dvao_eps": 2.0}


@pytest.mark.parametrize("method", METHODS)
def test_every_option_a_method_declares_changes_what_it_computes(method):
    """`Method.options` is not over-inclusive: each declared option moves the method's result (advantages, loss
    weights or metrics) on a batch with one sparse and one dense reward."""
    from dara.advantages import EstimatorOptions
    from dara.methods import get_method

    rng = np.random.default_rng(5)
    rewards = np.column_stack([rng.integers(0, 2, 24) * (np.arange(24) < 8), rng.normal(size=24)])
    index = np.repeat(np.arange(6), 4)
    base = EstimatorOptions(static_weights=(2.0, 1.0)).for_method(method)
    reference = compute_advantages(method, rewards, index, base)
    for option in get_method(method).options:
        if option == "singletons":
            continue  # only groups of one response tell the policies apart (tested below)
        changed = compute_advantages(method, rewards, index, replace(base, **{option: _CHANGED[option]}))
        moved = (not torch.equal(changed.advantages, reference.advantages)
                 or not torch.equal(changed.loss_weights, reference.loss_weights)
                 or changed.metrics != reference.metrics)
        assert moved, f"{method} declares {option} but ignores it"


def test_one_options_object_serves_every_method_through_for_method():
    from dara.advantages import EstimatorOptions

    shared = EstimatorOptions(w_max=2.0, static_weights=(2.0, 1.0), sign_eps=0.5, dvao_eps=0.1, batch_norm="none")
    rewards, index = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]), [0, 0, 1, 1]
    with pytest.raises(ValueError, match="static_weights is only read by"):
        compute_advantages("dara_sym", rewards, index, shared)   # given whole, a foreign option is refused
    for method in METHODS:
        own = shared.for_method(method)
        result = compute_advantages(method, rewards, index, own)
        as_keywords = {f.name: getattr(own, f.name) for f in fields(own) if getattr(own, f.name) != f.default}
        # the object and the same values as keywords agree
        assert torch.equal(result.advantages, compute_advantages(method, rewards, index, **as_keywords).advantages)
    assert shared.for_method("gdpo").w_max == 2.0 and shared.for_method("gdpo").batch_norm == "none"  # sweep
    assert shared.for_method("gdpo").static_weights is None and shared.for_method("gdpo").sign_eps == 1e-8


def test_an_unknown_keyword_option_is_a_type_error_naming_the_options():
    with pytest.raises(TypeError, match=r"unknown estimator option\(s\) \['wmax'\]; options: base_weights"):
        compute_advantages("gdpo", np.zeros((2, 1)), [0, 0], wmax=2.0)


def test_channel_weights_are_checked_once_when_the_options_are_built():
    """`EstimatorOptions` refuses bad static / DVAO weights when it is built, before any batch (the estimators
    take them as given), and holds them as a tuple of floats whatever the caller passed."""
    from dara.advantages import EstimatorOptions

    for bad in ([1.0, 0.5], [1.0, float("inf")], [float("nan")]):
        with pytest.raises(ValueError, match="static_weights must be finite and each >= 1"):
            EstimatorOptions(static_weights=bad)
    for bad in ([1.0, 0.0], [-1.0], [float("nan")]):
        with pytest.raises(ValueError, match="base_weights must be finite and > 0"):
            EstimatorOptions(base_weights=bad)
    options = EstimatorOptions(static_weights=np.array([1, 3]), base_weights=torch.tensor([0.5, 2.0]))
    assert options.static_weights == (1.0, 3.0) and options.base_weights == (0.5, 2.0)
    assert all(type(w) is float for w in options.static_weights + options.base_weights)
    # how many is a question of the batch: asked by check_for, which every estimator call goes through
    with pytest.raises(ValueError, match="static_weights has 2 values but rewards have 3 channels"):
        options.for_method("static_sym").check_for("static_sym", 3)
