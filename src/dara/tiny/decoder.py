"""A lean KV-cache forward for the tiny Qwen2 policy, used by the sampler (`dara.tiny.policy.rollout`).

Why it exists: at ~0.1 M parameters, one call of ``Qwen2ForCausalLM.forward`` during decoding costs about twice its
arithmetic in Python bookkeeping (output dataclasses, mask construction, cache objects, decorators): 4.2 ms per
token for 64 rows against 2.7 ms here, one thread (benchmarks/bench_trainer.py measures the whole step). Sampling is half of a
training step, so this is where the tiny study's wall time goes.

What is written by hand is only the attention wiring (project, rotate, append to the cache, attend, project back);
the layers' own modules do the rest (embedding, RMSNorm, rotary frequencies, ``apply_rotary_pos_emb``, MLP, LM
head), so the weights and most of the arithmetic are Hugging Face's. ``tests/test_tiny_decoder.py`` checks the
logits against ``model(...)`` on left-padded batches, and the trainer's tests check that the sampler's
log-probabilities equal a fresh Hugging Face forward. `LeanDecoder` refuses configurations it does not implement
(sliding windows, non-default RoPE, another architecture) instead of computing something else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb


class LeanDecoder:
    """Prefill a left-padded batch, then decode one token per row per call, with a preallocated KV cache.

    Each `forward` call takes the new tokens, their ``position_ids`` (for left padding: cumulative mask - 1, as
    ``token_logprobs`` builds them) and the attention mask of the whole cache after the call (1 on real tokens);
    it returns the logits of the last new position. ``capacity`` bounds the cached length.
    """

    def __init__(self, model, rows: int, capacity: int):
        config = model.config
        if config.model_type != "qwen2":
            raise ValueError(f"LeanDecoder implements Qwen2 only, got model_type {config.model_type!r}")
        rope = getattr(config, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default" or getattr(config, "use_sliding_window", False):
            raise ValueError("LeanDecoder implements default RoPE without sliding windows only; "
                             f"got rope {rope}, use_sliding_window={config.use_sliding_window}")
        if config.hidden_act != "silu" or model.model.rotary_emb.attention_scaling != 1.0:
            raise ValueError("LeanDecoder expects a SiLU MLP and unscaled rotary embeddings")
        self.model = model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.rows, self.length = rows, 0
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        dtype = model.model.embed_tokens.weight.dtype
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in model.model.layers]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in model.model.layers]

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits of the last input position; the inputs' keys and values join the cache.

        ``attention_mask`` covers the cache after this call (rows, length + new tokens).
        """
        core = self.model.model
        new = input_ids.shape[1]
        start, end = self.length, self.length + new
        if attention_mask.shape != (self.rows, end):
            raise ValueError(f"attention_mask must be ({self.rows}, {end}), got {tuple(attention_mask.shape)}")
        hidden = core.embed_tokens(input_ids)
        cos, sin = core.rotary_emb(hidden, position_ids)
        # Who may attend to whom: real keys only, and no key after the query (causal within the new tokens).
        allowed = attention_mask.bool()[:, None, None, :]
        if new > 1:
            allowed = allowed & torch.ones(new, end, dtype=torch.bool).tril(diagonal=start)
            # A query at a padding position sees no key; let it see itself so that softmax stays finite (its
            # output is never read: left padding puts every real token after the padding).
            allowed = allowed | (torch.arange(new)[:, None] + start == torch.arange(end)[None, :])
        for index, layer in enumerate(core.layers):
            attention = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attention.q_proj(x).view(self.rows, new, self.heads, self.head_dim).transpose(1, 2)
            k = attention.k_proj(x).view(self.rows, new, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attention.v_proj(x).view(self.rows, new, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            self.keys[index][:, :, start:end] = k
            self.values[index][:, :, start:end] = v
            out = F.scaled_dot_product_attention(q, self.keys[index][:, :, :end], self.values[index][:, :, :end],
                                                 attn_mask=allowed, scale=attention.scaling,
                                                 enable_gqa=self.heads != self.kv_heads)
            hidden = hidden + attention.o_proj(out.transpose(1, 2).reshape(self.rows, new, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        self.length = end
        return self.model.lm_head(core.norm(hidden[:, -1]))
