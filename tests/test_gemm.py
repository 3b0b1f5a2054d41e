"""The tiny policy's GEMM library (dara.tiny.gemm): OpenBLAS computes what torch's linear layers compute (to float
rounding), really runs (its numbers are numpy's, not torch's), is saved with the policy and routed on every load, and
the sampler's log-probs still match the trainer's forward under it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dara.tiny import gemm
from dara.tiny.decoder import LeanDecoder
from dara.tiny.policy import build_model, load_policy, rollout, save_policy, token_logprobs, train_tokenizer


def test_openblas_linear_computes_linear_and_its_gradients():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=generator, requires_grad=True)
    weight = torch.randn(24, 16, generator=generator, requires_grad=True)
    bias = torch.randn(24, generator=generator, requires_grad=True)
    grad = torch.randn(3, 5, 24, generator=generator)

    out = gemm.openblas_linear(x, weight, bias)
    out.backward(grad)
    got = (out.detach(), x.grad, weight.grad, bias.grad)
    x.grad = weight.grad = bias.grad = None
    expected_out = F.linear(x, weight, bias)
    expected_out.backward(grad)
    expected = (expected_out.detach(), x.grad, weight.grad, bias.grad)
    for name, a, b in zip(("output", "input grad", "weight grad", "bias grad"), got, expected):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)

    # the product is numpy's (OpenBLAS), not torch's under another name
    rows = x.detach().reshape(-1, 16).numpy()
    numpy_product = rows @ weight.detach().numpy().T
    assert np.array_equal(gemm.openblas_linear(x.detach(), weight.detach()).reshape(-1, 24).numpy(), numpy_product)


def test_openblas_linear_refuses_what_it_does_not_compute():
    weight = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="float32 CPU tensors; got torch.float64 and torch.float32"):
        gemm.openblas_linear(torch.zeros(2, 3, dtype=torch.float64), weight)
    with pytest.raises(ValueError, match="matmul must be one of torch, openblas; got 'mkl'"):
        gemm.checked_matmul("mkl")


def _policy(tmp_path, matmul: str, attention: str = "sdpa", layers: int = 1, folder: str | None = None):
    """A small policy with the given products, saved under ``tmp_path / (folder or matmul)``."""
    tokenizer = train_tokenizer(["call get_weather(city) with the city", "answer 12 + 3 = 15"] * 20, 300)
    torch.manual_seed(0)
    model = build_model(len(tokenizer), hidden_size=32, intermediate_size=64, layers=layers,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, matmul=matmul,
                        attention=attention)
    save_policy(model, tokenizer, tmp_path / (folder or matmul))
    return tokenizer, model


def test_the_choice_is_saved_with_the_policy_and_routed_on_load(tmp_path):
    _, built = _policy(tmp_path, "openblas")
    linear_layers = [m for m in built.modules() if isinstance(m, nn.Linear)]
    assert linear_layers and all(type(m) is gemm.OpenBlasLinear for m in linear_layers)
    _, loaded = load_policy(tmp_path / "openblas")
    assert gemm.matmul_of(loaded.config) == "openblas"
    assert all(type(m) is gemm.OpenBlasLinear for m in loaded.modules() if isinstance(m, nn.Linear))
    assert loaded.state_dict().keys() == built.state_dict().keys()

    # a torch policy saves no key (the config.json of policies made before the choice existed) and is not routed
    _, plain = _policy(tmp_path, "torch")
    assert '"dara_matmul"' not in (tmp_path / "torch" / "config.json").read_text()
    assert '"dara_matmul": "openblas"' in (tmp_path / "openblas" / "config.json").read_text()
    _, plain_loaded = load_policy(tmp_path / "torch")
    assert all(type(m) is nn.Linear for m in plain_loaded.modules() if isinstance(m, nn.Linear))


def test_the_two_libraries_compute_the_same_policy_to_rounding_but_not_bit_for_bit(tmp_path):
    tokenizer, _ = _policy(tmp_path, "openblas")
    _, blas = load_policy(tmp_path / "openblas")
    plain = build_model(len(tokenizer), hidden_size=32, intermediate_size=64, layers=1,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    plain.load_state_dict(blas.state_dict())
    ids = torch.randint(2, len(tokenizer), (4, 12), generator=torch.Generator().manual_seed(1))
    a, b = blas(ids).logits, plain(ids).logits
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert not torch.equal(a, b)  # another library, another rounding: a switch is a new draw


def test_the_sampler_scores_what_the_trainer_forward_scores_under_openblas(tmp_path):
    tokenizer, _ = _policy(tmp_path, "openblas")
    _, model = load_policy(tmp_path / "openblas")
    torch.manual_seed(3)
    batch = rollout(model, tokenizer, ["call get_weather"] * 3 + ["answer 12 + 3"] * 3, max_new_tokens=8)
    logp, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=int(batch["prompt_length"]),
                             scored=batch["response_mask"].bool())
    torch.testing.assert_close(logp, batch["logprobs"], rtol=0, atol=1e-5)
    assert LeanDecoder(model, 1, 4).linear is gemm.openblas_linear  # the sampler's stacked projections too


def test_every_product_hands_openblas_a_transposed_operand(monkeypatch):
    """On an AVX-512 CPU OpenBLAS sends a product of two untransposed row-major matrices to an AVX-512 kernel
    whatever OPENBLAS_CORETYPE says: no product of the linear layers, forward or backward, may be one."""
    calls = []
    matmul = gemm._matmul

    def recording(a, b):
        calls.append(tuple(not x.flags.c_contiguous and x.flags.f_contiguous for x in (a, b)))
        return matmul(a, b)

    monkeypatch.setattr(gemm, "_matmul", recording)
    x = torch.randn(6, 5, 16, requires_grad=True)
    layer = gemm.OpenBlasLinear(16, 24)
    layer(x).sum().backward()
    assert len(calls) == 3  # the output, the input's and the weight's gradients
    assert all(any(transposed) for transposed in calls), calls


def _attention_inputs(batch=3, heads=4, kv_heads=2, q_length=5, k_length=9, grad=True):
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(batch, h, length, 16, generator=generator, requires_grad=grad)
                         for h, length in ((heads, q_length), (kv_heads, k_length), (kv_heads, k_length)))
    allowed = torch.ones(k_length, k_length, dtype=torch.bool).tril()[-q_length:][None, None].repeat(batch, 1, 1, 1)
    allowed[1, :, :, :3] = False  # left padding of 3 in row 1
    allowed[-1, :, 0, :] = False  # a query that sees no key (a padding query): finite, and no gradient through it
    return query, key, value, allowed


def _sdpa(query, key, value, allowed, scaling):
    """Hugging Face's SDPA path: the grouped keys and values repeated per query head, then torch's kernel."""
    group = query.shape[1] // key.shape[1]
    out = F.scaled_dot_product_attention(query, key.repeat_interleave(group, 1), value.repeat_interleave(group, 1),
                                         attn_mask=allowed, scale=scaling)
    return out.transpose(1, 2)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_openblas_attention_computes_attention_and_its_gradients(kv_heads):
    query, key, value, allowed = _attention_inputs(kv_heads=kv_heads)
    weights = torch.randn(3, 5, 4, 16, generator=torch.Generator().manual_seed(1))
    weights[2, 0] = 0  # the padding query's output is read by nothing (SDPA gives it 0, this attention a finite mean)
    got = gemm.openblas_attention(query, key, value, allowed, 0.25)
    want = _sdpa(query, key, value, allowed, 0.25)
    assert got.shape == (3, 5, 4, 16) and torch.isfinite(got).all()
    torch.testing.assert_close(got[weights != 0], want[weights != 0], rtol=0, atol=2e-6)
    grads = torch.autograd.grad((got * weights).sum(), (query, key, value))
    expected = torch.autograd.grad((want * weights).sum(), (query, key, value))
    for mine, theirs in zip(grads, expected):
        assert torch.isfinite(mine).all()
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)
    with torch.no_grad():  # the path without autograd computes the same numbers
        assert torch.equal(gemm.openblas_attention(query, key, value, allowed, 0.25), got)


def test_openblas_attention_without_a_mask_is_causal():
    query, key, value, _ = _attention_inputs(batch=2, grad=False)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()[-5:][None, None].repeat(2, 1, 1, 1)
    assert torch.equal(gemm.openblas_attention(query, key, value, None, 0.25),
                       gemm.openblas_attention(query, key, value, causal, 0.25))


def test_openblas_attention_refuses_what_it_does_not_compute():
    query, key, value, allowed = _attention_inputs(grad=False)
    with pytest.raises(ValueError, match="float32"):
        gemm.openblas_attention(query.double(), key, value, allowed, 0.25)
    with pytest.raises(ValueError, match="3 query heads do not share 2"):
        gemm.openblas_attention(query[:, :3], key, value, allowed, 0.25)
    module = nn.Module()
    module.scaling = 0.25
    with pytest.raises(ValueError, match="no dropout"):
        gemm._hugging_face_attention(module, query, key, value, allowed, dropout=0.1)
    with pytest.raises(ValueError, match="bool mask"):
        gemm._hugging_face_attention(module, query, key, value, allowed.float())
    with pytest.raises(ValueError, match="causal attention only"):
        gemm._hugging_face_attention(module, query, key, value, allowed, is_causal=False)
    with pytest.raises(ValueError, match="attention must be one of sdpa, openblas; got 'flash'"):
        gemm.checked_attention("flash")


def test_the_attention_choice_is_saved_routed_and_computes_the_same_policy_to_rounding(tmp_path):
    tokenizer, _ = _policy(tmp_path, "openblas", attention="openblas", layers=2, folder="openblas")
    _policy(tmp_path, "openblas", attention="sdpa", layers=2, folder="sdpa")
    assert '"dara_attention": "openblas"' in (tmp_path / "openblas" / "config.json").read_text()
    assert '"dara_attention"' not in (tmp_path / "sdpa" / "config.json").read_text()  # as before the choice existed
    _, blas = load_policy(tmp_path / "openblas")
    _, plain = load_policy(tmp_path / "sdpa")
    assert blas.config._attn_implementation == gemm.HF_ATTENTION and plain.config._attn_implementation == "sdpa"
    plain.load_state_dict(blas.state_dict())
    torch.manual_seed(3)
    prompts = ["call get_weather"] * 3 + ["answer 12 + 3 with the city"] * 3  # two widths: left padding
    batch = rollout(blas, tokenizer, prompts, max_new_tokens=8)
    scores = {}
    for name, model in (("openblas", blas), ("sdpa", plain)):
        model.train()
        for group in (1, 3):  # the plain forward and the shared-prompt forward (a cache of the prompts)
            logp, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                     start=int(batch["prompt_length"]), scored=batch["response_mask"].bool(),
                                     prompt_group_size=group)
            scores[name, group] = logp
    # the sampler scores what the trainer's forward scores, and SDPA the same to rounding, not bit for bit
    torch.testing.assert_close(scores["openblas", 1], batch["logprobs"], rtol=0, atol=1e-5)
    torch.testing.assert_close(scores["openblas", 3], scores["openblas", 1], rtol=0, atol=1e-5)
    torch.testing.assert_close(scores["openblas", 1], scores["sdpa", 1], rtol=0, atol=1e-5)
    assert not torch.equal(scores["openblas", 1], scores["sdpa", 1])
    assert LeanDecoder(blas, 1, 4).openblas_attention and not LeanDecoder(plain, 1, 4).openblas_attention
    # gradients of a loss through the whole model agree too
    losses = [scores[name, 1].sum() for name in ("openblas", "sdpa")]
    grads = [torch.autograd.grad(loss, list(model.parameters())) for loss, model in zip(losses, (blas, plain))]
    for mine, theirs in zip(*grads):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_every_attention_product_hands_openblas_a_transposed_operand(monkeypatch):
    """The rule of `test_every_product_hands_openblas_a_transposed_operand`, for attention's six products."""
    calls = []
    matmul = gemm._matmul

    def recording(a, b):
        calls.append(tuple(a.strides[-1] != a.itemsize for a in (a, b)))
        return matmul(a, b)

    monkeypatch.setattr(gemm, "_matmul", recording)
    query, key, value, allowed = _attention_inputs()
    gemm.openblas_attention(query, key, value, allowed, 0.25).sum().backward()
    assert len(calls) == 6  # scores and output; the value's, the probabilities', the query's and the key's gradients
    assert all(any(transposed) for transposed in calls), calls

    # the sampler's decoder, through the same module function (where the profile counts products)
    calls.clear()
    torch.manual_seed(0)
    model = build_model(300, hidden_size=32, layers=1, heads=4, kv_heads=2, intermediate_size=48, attention="openblas")
    decoder = LeanDecoder(model, 2, 6)
    with torch.no_grad():
        decoder.forward(torch.tensor([[5, 6, 7], [0, 8, 9]]), torch.tensor([[0, 1, 2], [0, 0, 1]]),
                        torch.tensor([[1, 1, 1], [0, 1, 1]]))
    assert len(calls) == 2 and all(any(transposed) for transposed in calls), calls  # its scores and output
