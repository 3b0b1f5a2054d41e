"""benchmarks/bench_row_scaling.py at toy sizes: k times the rows is k times the same work, every multiple is measured
against 1x, and the page shows each. No timing is asserted."""

import pytest
import torch

from benchmarks import bench_row_scaling as rs
from dara.tasks import get_task
from dara.tiny.policy import rollout, token_logprobs

ACT_OPTIONS = {"tag_rate": 0.5}  # the options of conftest's toy_act_critic_policy


@pytest.mark.parametrize("multiples", [(2, 5), (0, 1), (1, 2, 2), ()])
def test_multiples_without_the_baseline_or_with_bad_values_are_refused(multiples):
    with pytest.raises(ValueError, match="include 1"):
        rs.checked_multiples(multiples)


def test_multiples_are_sorted():
    assert rs.checked_multiples([5, 1, 2]) == (1, 2, 5)


def test_k_prompt_steps_are_distinct_prompts_in_whole_groups():
    task = get_task("act_critic", **ACT_OPTIONS)
    prompts = rs.step_prompts(task, prompts_per_step=3, group_size=4, multiple=2)
    assert len(prompts) == 24 and len(set(prompts)) == 6
    assert all(len(set(prompts[start:start + 4])) == 1 for start in range(0, 24, 4))


def test_the_repeated_batch_is_k_times_the_same_work(toy_act_critic_policy):
    tokenizer, model = toy_act_critic_policy
    prompts = rs.step_prompts(get_task("act_critic", **ACT_OPTIONS), prompts_per_step=2, group_size=4, multiple=1)
    torch.manual_seed(0)
    batch = rollout(model, tokenizer, prompts, max_new_tokens=12)
    repeated = rs.repeated_batch(batch, 3)
    assert repeated["prompt_length"] == batch["prompt_length"]
    assert repeated["input_ids"].shape[0] == 3 * batch["input_ids"].shape[0]
    with torch.no_grad():
        def scored(b):
            return token_logprobs(model, b["input_ids"], b["attention_mask"], start=int(b["prompt_length"]),
                                  prompt_group_size=4, scored=b["response_mask"].bool())[0]
        one, three = scored(batch), scored(repeated)
    for copy in three.split(len(prompts)):
        torch.testing.assert_close(copy, one, rtol=0, atol=1e-5)


def test_every_multiple_is_measured_against_1x_and_shown(toy_act_critic_policy):
    tokenizer, model = toy_act_critic_policy
    task = get_task("act_critic", **ACT_OPTIONS)
    result = rs.measure(model, tokenizer, task, prompts_per_step=2, group_size=4, max_new_tokens=12, temperature=1.0,
                        multiples=(2, 1), repeats=2)
    assert list(result) == [1, 2]
    assert result[1]["rows"] == 8 and result[2]["rows"] == 16 and result[2]["update_rows"] == 16
    assert result[1]["sampling_gain"] == 1.0 and result[1]["update_gain"] == 1.0
    assert all(row[f"{phase}_s"] > 0 and row[f"{phase}_gain"] > 0 for row in result.values()
               for phase in ("sampling", "update"))
    assert all(1 <= row["decoding_steps"] <= 12 for row in result.values())
    assert not any(parameter.grad is not None for parameter in model.parameters())  # each pass drops its gradients
    page = rs.render(result, repeats=2, command="python -m benchmarks.bench_row_scaling", policy="toy",
                     setting="toy settings")
    rows = [line for line in page.splitlines() if line.startswith("| 8 (1x) |") or line.startswith("| 16 (2x) |")]
    assert len(rows) == 2 and "**1.00x**" in rows[0]
    assert f"At 2x the rows in one call, the step's rows cost 1/{result[2]['sampling_gain']:.2f}" in page


def test_the_command_line_refuses_a_list_without_the_baseline(capsys):
    with pytest.raises(SystemExit):
        rs.main(["--multiples", "2", "5"])
    assert "include 1" in capsys.readouterr().err
