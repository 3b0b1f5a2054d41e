"""A lean KV-cache forward for the tiny Qwen2 policy, used by the sampler (`dara.tiny.policy.rollout`).

Why it exists: at 0.12-0.14 M parameters, one call of ``Qwen2ForCausalLM.forward`` during decoding costs more in Python
bookkeeping (output dataclasses, mask construction, cache objects, decorators) than in arithmetic, and sampling
is a large part of a training step (``make bench-trainer`` measures the step and its phases against the
trainer before this decoder).

What is written by hand is the layer wiring (normalise, project, rotate, append to the cache, attend, project back,
gated MLP), with fewer and larger calls than the modules make: q/k/v and gate/up as one matrix each, the rotary
table computed once and applied to the query and key heads in one pass, torch's fused RMSNorm, the other linear maps
called as their modules' own forward calls them (without nn.Module's call machinery), and attention as two batched
matrix products instead of ``scaled_dot_product_attention`` (whose fixed cost dominates for one query over a
~100-token cache). The weights, the rotary frequencies and ``rotate_half``, the embedding and the LM head are
Hugging Face's. ``tests/test_tiny_decoder.py`` checks the logits against ``model(...)`` on left-padded batches, and
the trainer's tests check that the sampler's log-probabilities equal a fresh Hugging Face forward. `LeanDecoder`
refuses configurations it does not implement
(sliding windows, non-default RoPE, another architecture) instead of computing something else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.qwen2.modeling_qwen2 import rotate_half

from dara.tiny import gemm
from dara.tiny.gemm import attention_of, linear_function


class LeanDecoder:
    """Prefill a left-padded batch, then decode one token per row per call, with a preallocated KV cache.

    Each `forward` call takes the new tokens, their ``position_ids`` (for left padding: cumulative mask - 1, as
    ``token_logprobs`` builds them) and the attention mask of the whole cache after the call (1 on real tokens);
    it returns the logits of the last new position. ``capacity`` bounds the cached length. The decoder copies the
    weights it stacks when it is built: build one per rollout, never across an optimiser step.
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
        if model.model.embed_tokens.weight.dtype != torch.float32:
            raise ValueError("LeanDecoder computes in float32 only (the tiny policies' dtype)")
        self.model = model
        # the stacked projections multiply with the library of the model's own linear layers (dara.tiny.gemm)
        self.linear = linear_function(model)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.rows, self.length, self.capacity = rows, 0, capacity
        shape = (rows, self.kv_heads, capacity, self.head_dim)
        embeddings = model.model.embed_tokens.weight
        self.device = embeddings.device  # the cache and every mask live with the weights
        # attention's products as the policy's config names them (on the CPU; on a GPU torch's, as its layers')
        self.openblas_attention = attention_of(config) == "openblas" and self.device.type == "cpu"
        self.keys = [torch.zeros(shape, dtype=embeddings.dtype, device=self.device) for _ in model.model.layers]
        self.values = [torch.zeros(shape, dtype=embeddings.dtype, device=self.device) for _ in model.model.layers]
        # Per-call overhead, not arithmetic, is the cost at this size, so fewer and larger calls: the rotary
        # cos/sin of every position once (the rotary module's own computation, elementwise in the position, so a
        # table row equals a per-call result), and each layer's q/k/v and gate/up projections as one matrix each.
        with torch.no_grad():
            positions = torch.arange(capacity, device=self.device)[None]
            cos, sin = model.model.rotary_emb(embeddings[:1, None], positions)
            self.cos_table, self.sin_table = cos[0], sin[0]
            self.qkv = [_stacked(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
                        for layer in model.model.layers]
            self.gate_up = [_stacked(layer.mlp.gate_proj, layer.mlp.up_proj) for layer in model.model.layers]
            # the other linear maps called directly, as the modules' own forward would (the same function:
            # nn.Linear's F.linear, or OpenBlasLinear's openblas_linear), without nn.Module's call machinery
            self.o_proj = [_weights(layer.self_attn.o_proj, self.linear) for layer in model.model.layers]
            self.down_proj = [_weights(layer.mlp.down_proj, self.linear) for layer in model.model.layers]
            self.lm_head = _weights(model.lm_head, self.linear)

    def select(self, rows: torch.Tensor) -> None:
        """Make the cache's rows these rows of the current ones (indices, in order, repeats allowed): the sampler
        copies each distinct prompt's prefill to the rows of its group, and drops rows that have ended, so that the
        decoding steps after them compute only the rows still being sampled."""
        self.keys = [cache.index_select(0, rows) for cache in self.keys]
        self.values = [cache.index_select(0, rows) for cache in self.values]
        self.rows = len(rows)

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
        if end > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; this call would fill {end}")
        hidden = core.embed_tokens(input_ids)
        # (rows, new, 1, head_dim): broadcast over the heads of the (rows, new, heads, head_dim) projections
        cos, sin = self.cos_table[position_ids][:, :, None], self.sin_table[position_ids][:, :, None]
        # Who may attend to whom: real keys only, and no key after the query (causal within the new tokens).
        allowed = attention_mask.bool()[:, None, None, :]
        if new > 1:
            allowed = allowed & torch.ones(new, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
            # A query at a padding position sees no key; let it see itself so that softmax stays finite (its
            # output is never read: left padding puts every real token after the padding).
            allowed = allowed | (torch.arange(new, device=self.device)[:, None] + start
                                 == torch.arange(end, device=self.device)[None, :])
        rows, heads, kv_heads, head_dim = self.rows, self.heads, self.kv_heads, self.head_dim
        group = heads // kv_heads  # query heads per key/value head (head h reads kv head h // group, as repeat_kv)
        # Attention as two batched matrix products, one batch entry per (row, kv head) holding its group's queries:
        # a third cheaper per decoded token than scaled_dot_product_attention at this size, and no copy of the
        # cache for grouped heads. Forbidden keys get -inf added to their scores. A policy whose attention computes
        # with OpenBLAS (dara.tiny.gemm) multiplies the same operands there.
        bias = torch.zeros(rows, 1, 1, new, end, device=self.device).masked_fill_(
            ~allowed.expand(rows, 1, new, end)[:, :, None], float("-inf"))
        bias = bias.expand(rows, kv_heads, group, new, end).reshape(rows * kv_heads, group * new, end)
        q_width, kv_width = heads * head_dim, kv_heads * head_dim
        for index, layer in enumerate(core.layers):
            attention = layer.self_attn
            x = _rms_norm(layer.input_layernorm, hidden)
            qkv = self.linear(x, *self.qkv[index])
            q, k = rotated_queries_and_keys(qkv[..., :q_width + kv_width], cos, sin, heads, head_dim)
            v = qkv[..., q_width + kv_width:].view(rows, new, kv_heads, head_dim).transpose(1, 2)
            self.keys[index][:, :, start:end] = k
            self.values[index][:, :, start:end] = v
            keys = self.keys[index][:, :, :end].reshape(rows * kv_heads, end, head_dim)
            values = self.values[index][:, :, :end].reshape(rows * kv_heads, end, head_dim)
            queries = q.reshape(rows * kv_heads, group * new, head_dim)
            if self.openblas_attention:  # the policy's attention products through OpenBLAS, as in its training
                # through the module: the profile counts the products where it wraps gemm._matmul
                scores = torch.from_numpy(gemm._matmul(queries.numpy(), keys.numpy().swapaxes(1, 2)))
                scores = scores.mul_(attention.scaling).add_(bias)
                out = gemm._times_values(torch.softmax(scores, dim=-1).numpy(), values.numpy())
                out = out.reshape(rows, heads, new, head_dim)
            else:
                scores = torch.baddbmm(bias, queries, keys.transpose(1, 2), alpha=attention.scaling)
                out = torch.bmm(torch.softmax(scores, dim=-1), values).view(rows, heads, new, head_dim)
            hidden = hidden + self.linear(out.transpose(1, 2).reshape(rows, new, -1), *self.o_proj[index])
            normed = _rms_norm(layer.post_attention_layernorm, hidden)
            gate, up = self.linear(normed, *self.gate_up[index]).chunk(2, dim=-1)
            hidden = hidden + self.linear(F.silu(gate) * up, *self.down_proj[index])
        self.length = end
        return self.linear(_rms_norm(core.norm, hidden[:, -1]), *self.lm_head)


def rotated_queries_and_keys(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int,
                             head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's rotary embedding (``apply_rotary_pos_emb``'s formula) of the query and key heads at once.

    ``qk``: (rows, new, (heads + kv heads) x head_dim), the projections' query then key columns; ``cos``, ``sin``:
    (rows, new, 1, head_dim). Returns q (rows, heads, new, head_dim) and k (rows, kv heads, new, head_dim), views of
    one rotated tensor. The formula is elementwise (two products and a sum per element, no fused multiply-add), so
    rotating both in one pass gives the numbers rotating them apart gives, bit for bit (tested), in half the calls.
    """
    rows, new = qk.shape[:2]
    qk = qk.view(rows, new, -1, head_dim)
    qk = (qk * cos) + (rotate_half(qk) * sin)
    return qk[:, :, :heads].transpose(1, 2), qk[:, :, heads:].transpose(1, 2)


def _stacked(*projections) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weight and bias of one linear map that computes ``projections`` side by side."""
    weight = torch.cat([projection.weight for projection in projections])
    biases = [projection.bias for projection in projections]
    if all(bias is None for bias in biases):
        return weight, None
    return weight, torch.cat([bias if bias is not None else weight.new_zeros(p.out_features)
                              for bias, p in zip(biases, projections)])


def _weights(linear, function) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weight and bias of a linear module whose own forward is ``function`` (``F.linear`` for ``nn.Linear``,
    `gemm.openblas_linear` for `gemm.OpenBlasLinear`), so that calling ``function`` on them computes what the module
    would; any other module is refused."""
    expected = gemm.OpenBlasLinear if function is gemm.openblas_linear else torch.nn.Linear
    if type(linear) is not expected:
        raise ValueError(f"LeanDecoder calls the policy's linear maps as {function.__name__}, which is "
                         f"{expected.__name__}'s forward; got a {type(linear).__name__}")
    return linear.weight, linear.bias


def _rms_norm(norm, hidden: torch.Tensor) -> torch.Tensor:
    """A Qwen2RMSNorm's arithmetic through torch's fused op (same float32 formula, fewer calls)."""
    return F.rms_norm(hidden, norm.weight.shape, norm.weight, norm.variance_epsilon)
