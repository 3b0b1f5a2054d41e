"""benchmarks/bench_padding.py at toy sizes: the as-if-packed batch computes as many response positions as the padded
batch has real tokens, scores them all and keeps the prompts; the width-bucket layout gives token_logprobs's
log-probs and gradients; both phases are measured in every layout and shown. No timing is asserted."""

import pytest
import torch

from benchmarks import bench_padding as bp
from benchmarks.bench_row_scaling import step_prompts
from dara.tasks import get_task
from dara.tiny.policy import rollout, token_logprobs

ACT_OPTIONS = {"tag_rate": 0.5}


def _batch(policy, max_new_tokens=12):
    tokenizer, model = policy
    torch.manual_seed(0)
    return rollout(model, tokenizer, step_prompts(get_task("act_critic", **ACT_OPTIONS), 2, 4, 1),
                   max_new_tokens=max_new_tokens)


def test_the_packed_batch_computes_the_real_positions_and_scores_them_all(toy_act_critic_policy):
    padded = _batch(toy_act_critic_policy)
    packed = bp.as_if_packed(padded)
    prompt = int(padded["prompt_length"])
    computed, real = bp.response_positions(padded)
    assert computed > real  # the toy's responses differ in length: there is padding to drop
    rows, width = packed["response_mask"].shape
    assert rows == padded["input_ids"].shape[0] and width == round(real / rows)
    assert packed["response_mask"].all() and packed["attention_mask"][:, prompt:].all()
    assert packed["input_ids"].shape == (rows, prompt + width)
    # the prompts (and their padding) as the trainer laid them out
    assert torch.equal(packed["input_ids"][:, :prompt], padded["input_ids"][:, :prompt])
    assert torch.equal(packed["attention_mask"][:, :prompt], padded["attention_mask"][:, :prompt])
    assert bp.response_positions(packed) == (rows * width, rows * width)


@pytest.mark.parametrize("buckets", [2, 3, 8])
def test_width_buckets_give_the_trainers_log_probs_and_gradients(toy_act_critic_policy, buckets):
    """The candidate layout computes what the trainer computes (to float rounding: other shapes, other sums), for
    every row, whatever the buckets (8: one row each, some buckets of one-token responses)."""
    tokenizer, model = toy_act_critic_policy
    batch = _batch(toy_act_critic_policy)
    args = (batch["input_ids"], batch["attention_mask"])
    model.train()
    expected, _ = token_logprobs(model, *args, start=int(batch["prompt_length"]), prompt_group_size=4,
                                 scored=batch["response_mask"].bool())
    expected.sum().backward()
    expected_grads = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad(set_to_none=True)
    got = bp.bucketed_logprobs(model, batch, group_size=4, buckets=buckets)
    got.sum().backward()
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert torch.equal(got == 0, expected == 0)  # unscored positions stay 0
    for grad, want in zip((parameter.grad for parameter in model.parameters()), expected_grads):
        torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-5)
    model.zero_grad(set_to_none=True)
    model.eval()


def test_a_batch_without_padding_is_its_own_packed_layout():
    batch = {"input_ids": torch.arange(12).reshape(2, 6), "attention_mask": torch.ones(2, 6, dtype=torch.long),
             "prompt_length": torch.tensor(2), "response_mask": torch.ones(2, 4)}
    packed = bp.as_if_packed(batch)
    assert torch.equal(packed["input_ids"], batch["input_ids"]) and packed["response_mask"].shape == (2, 4)


def test_both_phases_are_measured_in_every_layout_and_shown(toy_act_critic_policy):
    tokenizer, model = toy_act_critic_policy
    result = bp.measure(model, tokenizer, get_task("act_critic", **ACT_OPTIONS), prompts_per_step=2, group_size=4,
                        max_new_tokens=12, temperature=1.0, repeats=2)
    assert result["rows"] == 8 and result["computed_positions"] > result["real_positions"] > 0
    assert result["buckets"] == 2
    for phase in bp.PHASES:
        assert result[phase]["padded_s"] > 0
        for key in ("packed", "buckets"):
            gains = result[phase]
            assert gains[f"{key}_s"] > 0
            assert gains[f"{key}_gain_low"] <= gains[f"{key}_gain"] <= gains[f"{key}_gain_high"]
    assert not any(parameter.grad is not None for parameter in model.parameters())  # the update drops its gradients
    page = bp.render([("toy", result), ("later", result)], repeats=2, command="python -m benchmarks.bench_padding",
                     setting="toy settings")
    rows = [line for line in page.splitlines() if line.startswith("| `toy` |")]
    assert len(rows) == 2 and len([line for line in page.splitlines() if line.startswith("| `later` |")]) == 2
    computed, real = result["computed_positions"], result["real_positions"]
    assert all(f"| {computed:,} (8 x {result['response_width']}), {real:,} (" in row for row in rows)
    for row, phase in zip(rows, bp.PHASES):
        gains = result[phase]
        assert f"| {phase} |" in row and row.endswith(
            f"**{gains['buckets_gain']:.2f}x** ({gains['buckets_gain_low']:.2f}-{gains['buckets_gain_high']:.2f}x) |")
        packed = f"**{gains['packed_gain']:.2f}x** ({gains['packed_gain_low']:.2f}-{gains['packed_gain_high']:.2f}x)"
        assert packed in row
    assert "rows in 2 buckets by response length" in page
    with pytest.raises(ValueError, match="at least 1"):
        bp.measure(model, tokenizer, get_task("act_critic", **ACT_OPTIONS), prompts_per_step=2, group_size=4,
                   max_new_tokens=12, temperature=1.0, repeats=0)
    with pytest.raises(ValueError, match="at least 2 buckets"):
        bp.measure(model, tokenizer, get_task("act_critic", **ACT_OPTIONS), prompts_per_step=2, group_size=4,
                   max_new_tokens=12, temperature=1.0, repeats=1, buckets=1)


def test_the_command_line_refuses_a_later_policy_that_is_not_a_checkpoint(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bp.main(["--also", str(tmp_path)])
    assert "names no checkpoint folder" in capsys.readouterr().err
