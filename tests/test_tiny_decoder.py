"""The sampler's lean KV-cache forward gives Hugging Face's logits; top-p sampling draws from the nucleus."""

import pytest
import torch

from dara.tiny import gemm
from dara.tiny.decoder import LeanDecoder, rotated_queries_and_keys
from dara.tiny.policy import _nucleus, build_model, rollout, train_tokenizer

torch.set_num_threads(1)


def _model(seed=0, kv_heads=2, attention="sdpa"):
    torch.manual_seed(seed)
    model = build_model(300, hidden_size=32, layers=2, heads=4, kv_heads=kv_heads, intermediate_size=48,
                        attention=attention)
    with torch.no_grad():  # Hugging Face initialises biases to 0; non-zero ones check where the stacked biases go
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.5)
    return model.eval()


@pytest.mark.parametrize("attention", ["sdpa", "openblas"])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_prefill_and_decode_logits_equal_hugging_faces_forward(kv_heads, attention):
    """With either attention (dara.tiny.gemm): the decoder's products as the policy's, Hugging Face's forward too."""
    model = _model(kv_heads=kv_heads, attention=attention)
    assert LeanDecoder(model, 1, 4).openblas_attention == (attention == "openblas")
    rows, width, new = 5, 7, 6
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(2, 300, (rows, width), generator=generator)
    mask = torch.ones_like(prompt)
    for row, padding in enumerate([0, 2, 4, 6, 1]):  # left padding of several widths, one row almost all padding
        mask[row, :padding] = 0
        prompt[row, :padding] = 0
    continuation = torch.randint(2, 300, (rows, new), generator=generator)
    ids = torch.cat([prompt, continuation], dim=1)
    attention = torch.cat([mask, torch.ones_like(continuation)], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
        decoder = LeanDecoder(model, rows, width + new)
        logits = [decoder.forward(prompt, positions[:, :width], attention[:, :width])]
        for t in range(new - 1):
            column = slice(width + t, width + t + 1)
            logits.append(decoder.forward(ids[:, column], positions[:, column], attention[:, :width + t + 1]))
    got = torch.stack(logits, dim=1)
    expected = reference[:, width - 1:width + new - 1]
    assert got.shape == expected.shape
    assert (got - expected).abs().max() < 1e-5


def test_a_mask_of_the_wrong_width_is_refused():
    model = _model()
    decoder = LeanDecoder(model, 2, 10)
    ids = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="attention_mask must be"):
        decoder.forward(ids, torch.arange(3).expand(2, 3), torch.ones(2, 4, dtype=torch.long))


def test_a_call_past_the_cache_capacity_is_refused():
    model = _model()
    decoder = LeanDecoder(model, 2, 4)
    ids = torch.ones(2, 3, dtype=torch.long)
    decoder.forward(ids, torch.arange(3).expand(2, 3), torch.ones(2, 3, dtype=torch.long))
    decoder.forward(ids[:, :1], torch.full((2, 1), 3), torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="cache holds 4 positions"):
        decoder.forward(ids[:, :1], torch.full((2, 1), 4), torch.ones(2, 5, dtype=torch.long))


def test_configurations_it_does_not_implement_are_refused():
    model = _model()
    model.config.use_sliding_window = True
    with pytest.raises(ValueError, match="sliding"):
        LeanDecoder(model, 1, 4)
    model = _model()
    model.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="RoPE"):
        LeanDecoder(model, 1, 4)
    model = _model()
    model.config.model_type = "llama"
    with pytest.raises(ValueError, match="Qwen2 only"):
        LeanDecoder(model, 1, 4)
    with pytest.raises(ValueError, match="float32 only"):
        LeanDecoder(_model().double(), 1, 4)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_rotating_queries_and_keys_together_gives_hugging_faces_rotary_bit_for_bit(kv_heads):
    """The sampler rotates q and k in one pass; the numbers must be apply_rotary_pos_emb's exactly (the sampler's
    draws and log-probs are compared byte for byte across revisions and CPUs), not merely close."""
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    model = _model(kv_heads=kv_heads)
    rows, new, heads, head_dim = 3, 5, 4, 8
    generator = torch.Generator().manual_seed(2)
    # the query and key columns of a q/k/v projection, a non-contiguous slice, as the decoder hands them over
    qkv = torch.randn(rows, new, (heads + 2 * kv_heads) * head_dim, generator=generator) * 3
    qk = qkv[..., :(heads + kv_heads) * head_dim]
    positions = torch.randint(0, 40, (rows, new), generator=generator)
    cos, sin = model.model.rotary_emb(qk, positions)
    q, k = rotated_queries_and_keys(qk, cos[:, :, None], sin[:, :, None], heads, head_dim)
    split = qk.contiguous().view(rows, new, heads + kv_heads, head_dim).transpose(1, 2)
    expected_q, expected_k = apply_rotary_pos_emb(split[:, :heads], split[:, heads:], cos, sin)
    assert q.shape == expected_q.shape and k.shape == expected_k.shape
    assert torch.equal(q, expected_q) and torch.equal(k, expected_k)


def test_a_linear_module_whose_forward_is_not_the_decoders_map_is_refused():
    """The decoder calls the linear maps as the policy's own modules would; a module of the other library (or any
    other kind) would compute something else, so it is refused rather than bypassed."""
    model = _model()  # torch's products: nn.Linear, F.linear
    model.model.layers[1].mlp.down_proj.__class__ = gemm.OpenBlasLinear
    with pytest.raises(ValueError, match="OpenBlasLinear"):
        LeanDecoder(model, 1, 4)


def test_the_nucleus_keeps_the_smallest_top_set_reaching_top_p():
    probs = torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.97, 0.01, 0.01, 0.01]])
    kept = _nucleus(probs, 0.7)
    # row 0: 0.5 alone is short of 0.7, 0.5 + 0.25 reaches it; row 1: the top token alone reaches it
    assert torch.equal(kept > 0, torch.tensor([[False, True, False, True], [True, False, False, False]]))
    assert torch.equal(kept[kept > 0], probs[kept > 0])
    assert torch.equal(_nucleus(probs, 1.0) > 0, probs > 0)


def test_top_p_sampling_draws_from_the_renormalised_nucleus():
    tokenizer = train_tokenizer(["alpha beta gamma delta epsilon"] * 20, vocab_size=300)
    model = _model(seed=3)
    prompt = "alpha beta"
    ids = tokenizer([prompt], return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids).logits[0, -1].double() / 0.7, dim=-1)
    nucleus = _nucleus(probs[None], 0.5)[0]
    expected = nucleus / nucleus.sum()
    assert 1 < int((expected > 0).sum()) < probs.numel()  # the test means something: some but not all tokens
    draws = 20_000
    torch.manual_seed(4)
    batch = rollout(model, tokenizer, [prompt] * draws, max_new_tokens=1, temperature=0.7, top_p=0.5)
    empirical = torch.bincount(batch["input_ids"][:, -1], minlength=probs.numel()).double() / draws
    assert empirical[expected == 0].sum() == 0
    tolerance = 0.5 * 3 * (expected * (1 - expected) / draws).sqrt().sum()
    assert 0.5 * (empirical - expected).abs().sum() < tolerance


@pytest.mark.parametrize("top_p", [0.0, 1.5])
def test_a_top_p_outside_the_unit_interval_is_refused(top_p):
    tokenizer = train_tokenizer(["alpha beta"] * 5, vocab_size=300)
    with pytest.raises(ValueError, match="top_p"):
        rollout(_model(), tokenizer, ["alpha"], max_new_tokens=1, top_p=top_p)


def test_prompts_are_left_padded_whatever_side_the_tokenizer_was_saved_with():
    from dara.tiny.policy import encode_prompts

    tokenizer = train_tokenizer(["alpha beta gamma"] * 5, vocab_size=300)
    tokenizer.padding_side = "right"
    ids, mask = encode_prompts(tokenizer, ["alpha", "alpha beta gamma"])
    assert mask[0, -1] == 1 and mask[0, 0] == 0 and ids[0, 0] == tokenizer.pad_token_id
