"""One registered estimator per formula of the method table (`dara.advantages.register_estimator`): every method
resolves to one, a formula cannot be registered twice, and `compute_advantages` / `channel_contributions` compute
what the registered estimator says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dara import advantages
from dara.advantages import (REGISTERED_ESTIMATORS, Scores, channel_contributions, compute_advantages,
                             estimator_for, register_estimator)
from dara.methods import TABLE


@pytest.mark.parametrize("method", TABLE, ids=lambda m: m.name)
def test_every_method_resolves_to_a_registered_estimator(method):
    estimator = estimator_for(method.formula)
    assert estimator is REGISTERED_ESTIMATORS[method.formula]
    assert callable(estimator.advantages) and callable(estimator.contributions)


def test_every_registered_estimator_serves_a_method():
    assert set(REGISTERED_ESTIMATORS) == {method.formula for method in TABLE}


class _Both:
    @staticmethod
    def advantages(batch):
        return Scores(advantages=torch.zeros(batch.rewards.shape[0], dtype=torch.float64))

    @staticmethod
    def contributions(batch):
        return torch.zeros_like(batch.rewards)


def test_a_formula_registered_twice_is_refused():
    before = dict(REGISTERED_ESTIMATORS)
    with pytest.raises(ValueError, match="an estimator is already registered for formula 'grpo': GRPO"):
        register_estimator("grpo")(_Both)
    assert REGISTERED_ESTIMATORS == before


def test_an_estimator_without_both_parts_is_refused(monkeypatch):
    monkeypatch.setattr(advantages, "REGISTERED_ESTIMATORS", dict(REGISTERED_ESTIMATORS))

    class AdvantagesOnly:
        advantages = _Both.advantages

    with pytest.raises(TypeError, match="estimator AdvantagesOnly for formula 'new' lacks contributions"):
        register_estimator("new")(AdvantagesOnly)
    assert "new" not in advantages.REGISTERED_ESTIMATORS
    assert register_estimator("new")(_Both) is _Both  # the decorator hands the class back
    assert estimator_for("new") is _Both


def test_an_unknown_formula_names_the_registered_ones():
    with pytest.raises(ValueError, match="no estimator is registered for formula 'gdpo_v2'; registered formulas: "
                                         "grpo, dvao, per_channel, shuffled"):
        estimator_for("gdpo_v2")


def test_a_table_row_without_an_estimator_is_refused_at_import(monkeypatch):
    registry = dict(REGISTERED_ESTIMATORS)
    del registry["dvao"]
    monkeypatch.setattr(advantages, "REGISTERED_ESTIMATORS", registry)
    with pytest.raises(ValueError, match="method 'dvao' of dara.methods: no estimator is registered for formula"):
        advantages._check_every_method_has_an_estimator()


class _Marked:
    """Advantages that say which row of the batch they were computed for, to check what the entry points do
    around the estimator (the caller's row order, the shared diagnostics) and that they do not compute it anew."""

    @staticmethod
    def advantages(batch):
        row = batch.rewards[:, 0]  # rewards[:, 0] is each row's caller position, so its order is checkable
        return Scores(advantages=row * 10.0, weights=torch.full((batch.rewards.shape[1],), 2.0, dtype=torch.float64),
                      loss_weights=row / 100.0, calibrated=2.0 * batch.z, metrics={"marked/rows": float(len(row))})

    @staticmethod
    def contributions(batch):
        return batch.rewards * -1.0


def test_the_entry_points_compute_what_the_registered_estimator_says(monkeypatch):
    monkeypatch.setitem(REGISTERED_ESTIMATORS, "dvao", _Marked)
    n_rows = 12
    rewards = np.column_stack([np.arange(n_rows, dtype=float), np.linspace(0.0, 1.0, n_rows) ** 2])
    index = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])  # equal-size groups out of order: sorted inside
    result = compute_advantages("dvao", rewards, index, channel_names=["pos", "sq"])
    expected = torch.arange(n_rows, dtype=torch.float32)
    assert torch.equal(result.advantages, expected * 10.0)
    assert torch.equal(result.loss_weights, (torch.arange(n_rows, dtype=torch.float64) / 100.0).float())
    assert result.weights.tolist() == [2.0, 2.0] and result.metrics["weight/sq"] == 2.0
    assert result.metrics["marked/rows"] == n_rows
    assert result.metrics["energy_pos_calibrated/pos"] == pytest.approx(4 * result.metrics["energy_pos/pos"])
    assert torch.equal(channel_contributions("dvao", rewards, index), -torch.as_tensor(rewards))
    # the other formulas are untouched
    assert not torch.equal(compute_advantages("grpo", rewards, index).advantages, expected * 10.0)
