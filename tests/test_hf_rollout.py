"""The CPU rollout server behind verl's loop (`dara.verl_plugin.cpu_backend.hf_rollout.HFServer`): requests that
arrive together are generated as one left-padded batch. Greedy requests get the same tokens and log-probs batched
and one at a time; sampled ones keep their distribution and log-probs that a fresh forward reproduces."""

import asyncio

import pytest
import torch

pytest.importorskip("verl")

from dara.tiny.policy import build_model, save_policy, train_tokenizer  # noqa: E402
from dara.verl_plugin.cpu_backend.hf_rollout import MAX_BATCH_VARIABLE, HFServer  # noqa: E402

CORPUS = [f"room {i} has a {thing} and a {other}" for i in range(40) for thing, other in
          (("mug", "key"), ("lamp", "book"), ("door", "box"))]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = train_tokenizer(CORPUS, vocab_size=120)
    model = build_model(len(tokenizer), hidden_size=32, layers=2, heads=2, kv_heads=1, intermediate_size=64,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    path = tmp_path_factory.mktemp("policy") / "hf"
    save_policy(model, tokenizer, path)
    return path


def _server(model_dir, monkeypatch, max_batch=None, response_length=12):
    if max_batch is None:
        monkeypatch.delenv(MAX_BATCH_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(MAX_BATCH_VARIABLE, str(max_batch))
    config = {"response_length": response_length, "prompt_length": 16, "seed": 0}
    server = HFServer(config, {"local_path": str(model_dir)})
    # the rows of every generate call, which the batching tests check: recorded around the server's own batch
    # method (the server keeps no such list)
    server.batch_sizes = []
    generate_batch = server._generate_batch

    def recorded(requests):
        outputs = generate_batch(requests)
        server.batch_sizes.append(len(requests))
        return outputs

    monkeypatch.setattr(server, "_generate_batch", recorded)
    return server


def _prompts(n):
    """Prompts of different lengths (so a batch is padded), 1 to 9 tokens."""
    return [[5 + (i * 7 + j) % 100 for j in range(1 + i % 9)] for i in range(n)]


def _serve(server, prompts, params):
    async def together():
        return await asyncio.gather(*(server.generate(p, params, f"request{i}") for i, p in enumerate(prompts)))

    return asyncio.run(together())


GREEDY = {"temperature": 0.0, "logprobs": True}
SAMPLED = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


def test_greedy_requests_get_the_same_tokens_batched_and_one_at_a_time(model_dir, monkeypatch):
    prompts = _prompts(24)
    batched_server = _server(model_dir, monkeypatch)
    batched = _serve(batched_server, prompts, GREEDY)
    alone_server = _server(model_dir, monkeypatch, max_batch=1)
    alone = _serve(alone_server, prompts, GREEDY)
    assert batched_server.batch_sizes == [24] and alone_server.batch_sizes == [1] * 24
    assert [out.token_ids for out in batched] == [out.token_ids for out in alone]
    assert any(len(out.token_ids) > 1 for out in batched)
    for together, single in zip(batched, alone):
        assert together.log_probs == pytest.approx(single.log_probs, abs=1e-5)


def test_a_batch_is_capped_and_split_by_sampling_parameters(model_dir, monkeypatch):
    server = _server(model_dir, monkeypatch, max_batch=5)
    _serve(server, _prompts(12), GREEDY)
    assert server.batch_sizes == [5, 5, 2]

    server = _server(model_dir, monkeypatch)

    async def mixed():
        prompts = _prompts(6)
        return await asyncio.gather(*(server.generate(p, GREEDY if i % 2 else SAMPLED, f"r{i}")
                                      for i, p in enumerate(prompts)))

    outputs = asyncio.run(mixed())
    assert server.batch_sizes == [3, 3] and len(outputs) == 6


def test_sampled_rows_carry_the_log_probs_of_a_fresh_forward_despite_padding(model_dir, monkeypatch):
    server = _server(model_dir, monkeypatch)
    prompts = _prompts(32)
    outputs = _serve(server, prompts, SAMPLED)
    assert server.batch_sizes == [32]
    for prompt, out in zip(prompts, outputs):
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = server.model(input_ids=ids).logits[0, len(prompt) - 1: -1].float()
        fresh = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
        assert out.log_probs == pytest.approx(fresh.tolist(), abs=1e-5)
        eos = server.eos_token_ids
        assert len(out.token_ids) == 12 or out.token_ids[-1] in eos  # cut at the cap or right after EOS
        assert not any(token in eos for token in out.token_ids[:-1])


def test_a_batchs_draws_go_to_the_same_prompts_whatever_their_arrival_order(model_dir, monkeypatch):
    """Ray delivers concurrent requests in an order that follows timing; the rows are put in prompt order, so a
    rerun (or another machine) draws the same tokens for each prompt."""
    prompts = [[5 + i, 6 + i, 7 + 2 * i] for i in range(16)]  # distinct prompts
    forward = _serve(_server(model_dir, monkeypatch), prompts, SAMPLED)
    backward = _serve(_server(model_dir, monkeypatch), prompts[::-1], SAMPLED)[::-1]
    assert [out.token_ids for out in forward] == [out.token_ids for out in backward]
    assert len({tuple(out.token_ids) for out in forward}) > 1


def test_batched_draws_follow_the_models_distribution(model_dir, monkeypatch):
    """The first token of 4,000 batched requests of one prompt: its empirical distribution is softmax(logits / T)
    (three binomial standard deviations per token, summed, bound the total variation), not that of another T."""
    server = _server(model_dir, monkeypatch, response_length=1)
    prompt = [7, 8, 9]
    with torch.no_grad():
        server.model.lm_head.weight.mul_(25.0)  # an untrained model is nearly uniform: make temperature matter
        logits = server.model(input_ids=torch.tensor([prompt])).logits[0, -1].double()
    draws = 4000
    outputs = _serve(server, [prompt] * draws, {**SAMPLED, "temperature": 2.0})
    assert server.batch_sizes == [256] * 15 + [160]  # DEFAULT_MAX_BATCH rows a batch
    first = torch.tensor([out.token_ids[0] for out in outputs])
    empirical = torch.bincount(first, minlength=logits.numel()).double() / draws
    expected, wrong = torch.softmax(logits / 2.0, dim=-1), torch.softmax(logits, dim=-1)
    tolerance = 0.5 * 3 * (expected * (1 - expected) / draws).sqrt().sum()
    assert 0.5 * (empirical - expected).abs().sum() < tolerance
    assert 0.5 * (empirical - wrong).abs().sum() > 1.5 * tolerance  # temperature ignored: about 2 tolerances


def test_a_prompt_without_room_fails_alone_and_a_bad_batch_cap_is_refused(model_dir, monkeypatch):
    server = _server(model_dir, monkeypatch)

    async def one_too_long():
        return await asyncio.gather(server.generate(list(range(5, 40)), GREEDY, "long"),
                                    server.generate([5, 6], GREEDY, "short"), return_exceptions=True)

    too_long, fine = asyncio.run(one_too_long())
    assert isinstance(too_long, ValueError) and "leaves no room" in str(too_long)
    assert fine.token_ids and server.batch_sizes == [1]
    with pytest.raises(ValueError, match=MAX_BATCH_VARIABLE):
        _server(model_dir, monkeypatch, max_batch=0)
