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


def _policy(tmp_path, matmul: str):
    tokenizer = train_tokenizer(["call get_weather(city) with the city", "answer 12 + 3 = 15"] * 20, 300)
    torch.manual_seed(0)
    model = build_model(len(tokenizer), hidden_size=32, intermediate_size=64, layers=1,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, matmul=matmul)
    save_policy(model, tokenizer, tmp_path / matmul)
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
