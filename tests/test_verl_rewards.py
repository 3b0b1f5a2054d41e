"""The verl reward entry points: components and score, and the token count reaching the math reward via verl."""

from __future__ import annotations

import numpy as np
import pytest
import torch

torch.set_num_threads(1)

from dara.verl_plugin import rewards  # noqa: E402

GT_TOOL = '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
GOOD_TOOL = (
    "<think>weather lookup</think>\n<tool_call>\n"
    '{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
)


def test_toolcall_score_is_the_sum_of_its_components():
    result = rewards.compute_toolcall_score("rlla", GOOD_TOOL + "<|im_end|>", GT_TOOL)
    assert result == {"score": 4.0, "format": 1.0, "correctness": 3.0,
                      "parse_failure/format": 0.0, "parse_failure/correctness": 0.0}


def test_toolcall_bad_response_gets_format_zero_and_correctness_minus_three():
    result = rewards.compute_toolcall_score("rlla", "I would call get_weather.", GT_TOOL)
    # No tool-call block: correctness could not read a call (a parse failure); format judged the layout (none).
    assert result == {"score": -3.0, "format": 0.0, "correctness": -3.0,
                      "parse_failure/format": 0.0, "parse_failure/correctness": 1.0}


def test_toolcall3_adds_think_length_with_the_word_cap():
    long_think = GOOD_TOOL.replace("weather lookup", " ".join(["w"] * 17))
    short = rewards.compute_toolcall_score("rlla", GOOD_TOOL, GT_TOOL, with_think_length=True)
    long = rewards.compute_toolcall_score("rlla", long_think, GT_TOOL, with_think_length=True)
    assert short["think_length"] == 1.0 and long["think_length"] == 0.0
    assert set(short) == {"score", *rewards.TOOLCALL3_KEYS, *(f"parse_failure/{k}" for k in rewards.TOOLCALL3_KEYS)}
    assert long["score"] == long["format"] + long["correctness"]


def test_math_score_needs_the_token_count():
    with pytest.raises(KeyError, match="valid_response_length"):
        rewards.compute_math_score("deepscaler", "so \\boxed{2}", "2", extra_info={})


@pytest.mark.parametrize(("n_tokens", "length"), [(4000, 1.0), (4001, 0.0)])
def test_math_score_components(n_tokens, length):
    result = rewards.compute_math_score(
        "deepscaler", "so \\boxed{\\frac{1}{2}}", "0.5", extra_info={"valid_response_length": n_tokens}
    )
    assert result == {"score": 1.0 + length, "correctness": 1.0, "length": length,
                      "parse_failure/correctness": 0.0, "parse_failure/length": 0.0}
    wrong = rewards.compute_math_score("deepscaler", "so \\boxed{3}", "0.5", extra_info={"valid_response_length": 5})
    assert wrong["correctness"] == 0.0


class CharTokenizer:
    """One token per character (id = code point), enough for verl's decode step."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids)


def test_token_count_reward_manager_feeds_the_valid_length_through_verls_naive_manager():
    pytest.importorskip("verl")
    from verl.protocol import DataProto

    text = "so \\boxed{7}"
    prompt_width, response_width = 4, len(text) + 6  # right padding after the response
    responses = torch.zeros(1, response_width, dtype=torch.int64)
    responses[0, : len(text)] = torch.tensor([ord(c) for c in text])
    attention = torch.cat(
        [torch.ones(1, prompt_width), (torch.arange(response_width) < len(text)).float()[None]], dim=1
    ).to(torch.int64)
    data = DataProto.from_dict(
        tensors={"prompts": torch.zeros(1, prompt_width, dtype=torch.int64), "responses": responses,
                 "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["deepscaler"], dtype=object),
            "reward_model": np.array([{"ground_truth": "7"}], dtype=object),
            "extra_info": np.array([{"index": 3}], dtype=object),
        },
    )
    manager_cls = rewards.TokenCountRewardManager
    seen = {}

    def score(**kwargs):
        seen.update(kwargs["extra_info"])
        return rewards.compute_math_score(**{**kwargs, "budget": len(text)})

    manager = manager_cls(config=None, tokenizer=CharTokenizer(), compute_score=score)
    out = manager.loop.run_until_complete(manager.run_single(data))  # verl binds the manager to its loop
    assert seen["valid_response_length"] == len(text) and seen["index"] == 3
    assert out["reward_extra_info"]["correctness"] == 1.0
    assert out["reward_extra_info"]["length"] == 1.0  # exactly at the budget
    assert out["reward_score"] == 2.0
