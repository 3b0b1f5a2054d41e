"""The estimator options a verl run sets through ``algorithm.dara``: the GD2PO-Hard / DVAO epsilons and the
policy for single-response groups."""

from __future__ import annotations

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
    ({"method": "dara_sym", "sign_eps": 1e-3}, "sign_eps is only used by gd2po_hard"),
    ({"method": "gdpo", "dvao_eps": 1e-3}, "dvao_eps is only used by dvao"),
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
