"""The mechanism toy: its policy gradient is the true score function, and it shows DARA's speed-up."""

import pytest
import torch

from dara.analysis.mechanism_toy import ToyConfig, bernoulli_score, run_toy, steps_to_threshold

torch.set_num_threads(1)


@pytest.mark.parametrize("ceiling", [1.0, 0.6])
def test_bernoulli_score_matches_autograd(ceiling):
    logits = torch.tensor([-1.3, 0.4], dtype=torch.float64, requires_grad=True)
    ceilings = torch.tensor([ceiling, ceiling], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    for row in rewards:
        success = ceilings * torch.sigmoid(logits)
        log_likelihood = (row * success.log() + (1 - row) * (1 - success).log()).sum()
        (gradient,) = torch.autograd.grad(log_likelihood, logits)
        assert bernoulli_score(row[None], logits.detach(), ceilings)[0] == pytest.approx(gradient.tolist())


def test_toy_run_stops_at_threshold_and_logs_density():
    trace = run_toy(ToyConfig(method="dara_sym", group_size=8, seed=0))
    assert trace["success/1"].iloc[-1] >= 0.8 > trace["success/1"].iloc[-2]
    assert trace["weight/1"].iloc[0] > 1.0  # the sparse reward is up-weighted at the start
    assert trace["weight/0"].iloc[0] == 1.0  # the dense reward is the reference


def test_toy_dara_reaches_sparse_threshold_before_gdpo_and_grpo():
    runs = steps_to_threshold(methods=("grpo", "gdpo", "dara_sym"), group_sizes=(8,), seeds=(0, 1))
    assert runs["reached"].all()
    median = runs.groupby("method")["step"].median()
    assert median["dara_sym"] < median["gdpo"] < median["grpo"]


def test_toy_censors_runs_at_max_steps():
    runs = steps_to_threshold(methods=("grpo",), group_sizes=(4,), seeds=(0,), max_steps=20)
    assert runs[["step", "reached"]].values.tolist() == [[20, False]]


def test_toy_rejects_group_size_not_dividing_budget():
    with pytest.raises(ValueError, match="group_size"):
        ToyConfig(method="gdpo", group_size=3, seed=0)
