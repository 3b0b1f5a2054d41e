"""dara.advantages.channel_contributions: each channel's part of every method's score, which the density
diagnostics (`dara diagnose`) turn into energy shares. The parts must add up to what the estimator computes."""

import numpy as np
import pytest
import torch

from dara.advantages import batch_normalise, channel_contributions, compute_advantages, contribution_shares
from dara.methods import METHODS, get_method

RNG = np.random.default_rng(7)
# 6 groups of 4, groups interleaved (not contiguous), a {0,1} sparse channel, a dense [-3, 3] one, a third mixed
INDEX = np.array([f"g{k % 6}" for k in range(24)], dtype=object)
REWARDS = np.stack([
    (RNG.random(24) < 0.15).astype(float),
    RNG.integers(-3, 4, 24).astype(float),
    RNG.choice([0.0, 0.5], 24),
], axis=1)
REWARDS[INDEX == "g2", 1] = 1.0  # a group where the dense channel is constant
OPTIONS = {"static_weights": [5.0, 1.0, 2.0]}


def _options(method):
    return OPTIONS if get_method(method).needs_static_weights else {}


@pytest.mark.parametrize("method", METHODS)
def test_contributions_add_up_to_the_estimators_score(method):
    parts = channel_contributions(method, REWARDS, INDEX, **_options(method))
    assert parts.shape == (24, 3) and parts.dtype == torch.float64
    spec = get_method(method)
    unnormalised = compute_advantages(method, REWARDS, INDEX, batch_norm="none", **_options(method)).advantages
    # compute_advantages returns float32: compare at its precision
    np.testing.assert_allclose(parts.sum(dim=1).numpy(), unnormalised.numpy(), rtol=1e-5, atol=1e-6)
    if spec.formula in ("per_channel", "shuffled"):
        keep = None
        if spec.drops_conflicts:  # GD2PO-Hard normalises over the responses whose z-scores agree in sign
            z = channel_contributions("gdpo", REWARDS, INDEX)
            keep = ~((z > 1e-8).any(dim=1) & (z < -1e-8).any(dim=1))
        lengths = torch.as_tensor(RNG.integers(3, 40, len(REWARDS)), dtype=torch.float64)
        # the control's token whitening weighs each score by its own response's length before the permutation, so
        # only the per-response normalisation commutes with it
        norms = (("response", None),) if spec.formula == "shuffled" else (("response", None), ("token", lengths))
        for batch_norm, token_lengths in norms:
            normalised = compute_advantages(method, REWARDS, INDEX, batch_norm=batch_norm, lengths=token_lengths,
                                            **_options(method))
            np.testing.assert_allclose(batch_normalise(parts.sum(dim=1), 1e-6, token_lengths, keep).numpy(),
                                       normalised.advantages.numpy(), rtol=1e-5, atol=1e-6)


def test_grpo_parts_split_the_z_score_of_the_summed_reward_by_channel():
    rewards = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [1.0, 2.0]])
    parts = channel_contributions("grpo", rewards, ["a"] * 4)
    total = rewards.sum(axis=1)
    std = total.std(ddof=1) + 1e-6
    np.testing.assert_allclose(parts.numpy(), (rewards - rewards.mean(axis=0)) / std)
    # a group whose summed reward is constant gives GRPO no signal, whatever its channels do
    conflict = channel_contributions("grpo", np.array([[1.0, 0.0], [0.0, 1.0]]), ["a", "a"])
    assert torch.equal(conflict, torch.zeros(2, 2, dtype=torch.float64))


def test_shares_of_the_papers_worked_example():
    # B groups of G = 4 with densities 0.8 and 0.2: under GDPO each active group carries energy G - 1 per channel
    # (z-scores with the Bessel std), so the shares are 0.8 : 0.2; DARA's weights 1 and 2 make them equal (8 x 3 x 1 = 2 x 3 x 4).
    groups, size = 10, 4
    index = np.repeat(np.arange(groups), size)
    rewards = np.zeros((groups * size, 2))
    for g in range(groups):
        if g < 8:
            rewards[g * size, 0] = 1.0
        if g < 2:
            rewards[g * size + 1, 1] = 1.0
    gdpo = contribution_shares(channel_contributions("gdpo", rewards, index))
    np.testing.assert_allclose(gdpo.numpy(), [0.8, 0.2], rtol=1e-9)
    energy = (channel_contributions("gdpo", rewards, index) ** 2).sum(dim=0)
    np.testing.assert_allclose(energy.numpy(), [8 * 3 / (1 + 1e-6 * 2) ** 2, 2 * 3 / (1 + 1e-6 * 2) ** 2], rtol=1e-5)
    dara = contribution_shares(channel_contributions("dara_sym", rewards, index))
    np.testing.assert_allclose(dara.numpy(), [0.5, 0.5], rtol=1e-9)  # 0.8 * 1^2 : 0.2 * 2^2
    # the control moves whole rows, so its shares are GDPO's
    np.testing.assert_allclose(contribution_shares(channel_contributions("shuffled", rewards, index)).numpy(),
                               gdpo.numpy())


def test_shares_are_nan_without_any_signal_and_bad_input_is_refused():
    assert torch.isnan(contribution_shares(channel_contributions("gdpo", np.ones((4, 2)), [0, 0, 1, 1]))).all()
    with pytest.raises(ValueError, match="static_weights"):
        channel_contributions("static_sym", REWARDS, INDEX)
    with pytest.raises(ValueError, match="at least two responses"):
        channel_contributions("gdpo", np.ones((3, 2)), [0, 0, 1])
