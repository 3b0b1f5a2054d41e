"""Which library multiplies the tiny policy's linear layers: torch's (MKL, pinned to its SSE2 branch) or numpy's
OpenBLAS (pinned to its Haswell kernels: AVX2 and FMA).

Why a second GEMM: every job runs under the kernel pin (`dara.kernels`), so that a run writes the same bytes on every
x86-64 CPU. For torch's GEMMs that pin is ``MKL_CBWR=COMPATIBLE``, MKL's one branch documented to repeat across
vendors, and it is SSE2: about 40 GFLOP/s on one core, where the CPU's AVX2 units do two to three times that
(docs/performance.md). OpenBLAS picks its kernels from the CPU too, but it can be told which (``OPENBLAS_CORETYPE``):
with ``Haswell`` forced, every CPU with AVX2 and FMA runs the same kernel code with the same blocking, so the bytes
repeat as they do under MKL's pin, at AVX2 speed. OpenBLAS's source has one path that ignores the core type: on a
CPU with AVX-512, a small product of two untransposed row-major matrices may go to an AVX-512 "direct" kernel. The
build numpy 2.4.6 carries (OpenBLAS 0.3.31) compiles it out (measured: the same bytes either way under the Haswell
pin); every product here hands at least one operand transposed anyway, so no build would take it. A product with one
row goes to OpenBLAS's matrix-vector kernel (or numpy's own loop for one element), fixed by the core type too.
numpy's wheels carry OpenBLAS, so no package is added; the pin (`dara.kernels.PIN`) sets its core type and one thread
for every job.

What goes through it: the linear layers (``nn.Linear``: q/k/v/o, gate/up/down, the LM head) of a policy whose
Hugging Face config says ``dara_matmul: openblas`` (`MATMUL_KEY`), forward and backward, and the sampler's stacked
projections (`dara.tiny.decoder.LeanDecoder`); and, where the config says ``dara_attention: openblas``
(`ATTENTION_KEY`), attention's six products (scores and output forward; the value's, the probabilities', the
query's and the key's gradients backward), in training and in the sampler (`openblas_attention`). Softmax, norms and
the optimiser stay torch's. Why attention too: torch's CPU attention (SDPA's flash kernel, after Hugging Face copies
the grouped keys and values per query head) ran at 13-16 GFLOP/s on these 16-wide heads, a sixth of an RL step and
over a quarter of a supervised one (docs/results/profile_trainer_before_attention.md); the same arithmetic as
batched OpenBLAS products, with each key/value head's query heads stacked into one product (no copies), takes about
half the time forward and backward (docs/results/bench_attention.md).

The choices are the warm start's (``warm_start.matmul`` and ``warm_start.attention`` in an experiment;
`dara.tiny.policy.build_model`), saved in the policy's ``config.json``, so every checkpoint trained from it, its
reference copy and its evaluation compute the same way (`dara.tiny.policy.load_policy` routes them, `route_products`).
A policy without a key computes that part with torch, as every policy made before the key existed. Other trainers
(verl) load the same checkpoint and ignore the keys; on a GPU the device's own kernels compute (a GPU run records its
device and rounds otherwise anyway).

The two libraries round differently, so the same policy and seed train other numbers under each: a switch of
``matmul`` or ``attention`` is a new draw of the study, not a free speed-up.
"""

from __future__ import annotations

import numpy
import torch
import torch.nn.functional as F
from torch import nn

# The Hugging Face config attribute that names the policy's GEMM library (absent: "torch").
MATMUL_KEY = "dara_matmul"
MATMULS = ("torch", "openblas")
# The attribute that names what computes its attention (absent: "sdpa", Hugging Face's torch path).
ATTENTION_KEY = "dara_attention"
ATTENTIONS = ("sdpa", "openblas")
# The name `openblas_attention` is registered under with Hugging Face (its attention and mask interfaces).
HF_ATTENTION = "dara_openblas"


def checked_matmul(name: str) -> str:
    """``name`` if it is one of `MATMULS`, else a ValueError naming it."""
    if name not in MATMULS:
        raise ValueError(f"matmul must be one of {', '.join(MATMULS)}; got {name!r}")
    return name


def matmul_of(config) -> str:
    """The GEMM library a policy's Hugging Face config names (`MATMUL_KEY`; "torch" where absent)."""
    return checked_matmul(getattr(config, MATMUL_KEY, "torch"))


def _matmul(a: numpy.ndarray, b: numpy.ndarray) -> numpy.ndarray:
    """The one place a product is computed (numpy's ``matmul``: OpenBLAS's SGEMM for float32 matrices whose strides
    BLAS can read); benchmarks/profile_trainer.py counts its FLOPs here."""
    return a @ b


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` as one numpy ``matmul`` of two float32 matrices (OpenBLAS's SGEMM; numpy hands it the
    transposed weight as a flag, without a copy), on tensors that carry no autograd history."""
    # contiguous rows: numpy hands only strides BLAS can read to OpenBLAS (else its own loop, other numbers)
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.from_numpy(_matmul(rows.numpy(), weight.numpy().T))
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


class _OpenBlasLinear(torch.autograd.Function):
    """`_product` with both products of the backward through OpenBLAS too."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.with_bias = bias is not None
        return _product(x.detach(), weight.detach(), None if bias is None else bias.detach())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_rows = grad.reshape(-1, weight.shape[0]).contiguous()
        grad_numpy = grad_rows.numpy()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # grad @ weight with the weight handed over transposed (a transposed copy's .T): OpenBLAS's source may
            # send a product of two untransposed row-major operands on an AVX-512 CPU to an AVX-512 kernel whatever
            # OPENBLAS_CORETYPE says (interface/gemm.c, support_avx512()); numpy's build compiles that out today
            weight_as_transposed = numpy.ascontiguousarray(weight.detach().numpy().T).T
            grad_x = torch.from_numpy(_matmul(grad_numpy, weight_as_transposed))
            grad_x = grad_x.reshape(*grad.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            rows = x.detach().reshape(-1, weight.shape[1]).contiguous().numpy()
            grad_weight = torch.from_numpy(_matmul(grad_numpy.T, rows))
        if ctx.with_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_rows.sum(0)
        return grad_x, grad_weight, grad_bias


def openblas_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` through OpenBLAS for float32 CPU tensors. On another device (a GPU run, which records its device
    and rounds otherwise anyway) the device's own GEMM computes it, `F.linear`; a CPU tensor of another dtype is a
    ValueError (no path of the project makes one, and OpenBLAS would not compute what the policy names). Without a
    gradient to record (sampling, the reference forward) the product runs without the autograd function, whose call
    costs about as much as a decoding step's small product: the same numbers either way."""
    if x.device.type != "cpu":
        return F.linear(x, weight, bias)
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise ValueError(f"the OpenBLAS matmul takes float32 CPU tensors; got {x.dtype} and {weight.dtype} on the "
                         "CPU")
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _OpenBlasLinear.apply(x, weight, bias)
    return _product(x.detach(), weight.detach(), None if bias is None else bias.detach())


class OpenBlasLinear(nn.Linear):
    """An ``nn.Linear`` whose forward is `openblas_linear`; same parameters and state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return openblas_linear(x, self.weight, self.bias)


def linear_function(model):
    """The linear map a model's own code paths use (the sampler's stacked projections): `openblas_linear` for a
    policy whose config names OpenBLAS, else `F.linear`."""
    return openblas_linear if matmul_of(model.config) == "openblas" else F.linear


def checked_attention(name: str) -> str:
    """``name`` if it is one of `ATTENTIONS`, else a ValueError naming it."""
    if name not in ATTENTIONS:
        raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}; got {name!r}")
    return name


def attention_of(config) -> str:
    """What computes a policy's attention, as its Hugging Face config names it (`ATTENTION_KEY`; "sdpa" where
    absent)."""
    return checked_attention(getattr(config, ATTENTION_KEY, "sdpa"))


# Masked scores: the float32 minimum, not -inf, so that a row with no allowed key (a padding query of a left-padded
# prompt, whose output nothing reads) stays finite instead of NaN, forward and backward. On a row with an allowed key
# exp(minimum - max) is exactly 0, as exp(-inf).
_MASKED = torch.finfo(torch.float32).min


def _stacked_queries(query: torch.Tensor, kv_heads: int) -> numpy.ndarray:
    """(B, H, Lq, D) -> (B * kv_heads, H / kv_heads * Lq, D): each key/value head's query heads one below the other
    (query head h reads key/value head h // group, as Hugging Face's repeat_kv), so one product serves the group."""
    batch, heads, length, dim = query.shape
    return query.detach().reshape(batch * kv_heads, heads // kv_heads * length, dim).numpy()


def _attention_probabilities(q: numpy.ndarray, k: numpy.ndarray, allowed: torch.Tensor, shape: tuple[int, ...],
                             scaling: float) -> torch.Tensor:
    """softmax(scaling * q @ k^T, masked): (N, rows, Lk) for the stacked queries ``q`` and keys ``k`` (N, Lk, D);
    ``allowed`` (B, 1, Lq, Lk) bool, broadcast over the heads; ``shape`` (B, kv heads, group, Lq, Lk)."""
    scores = torch.from_numpy(_matmul(q, k.swapaxes(1, 2))).view(shape)
    scores.mul_(scaling).masked_fill_(~allowed[:, :, None], _MASKED)
    return torch.softmax(scores.view(q.shape[0], q.shape[1], k.shape[1]), dim=-1)


def _times_values(probabilities: numpy.ndarray, values: numpy.ndarray) -> torch.Tensor:
    """probabilities @ values (N, rows, D), computed as its transpose values^T @ probabilities^T so that both operands
    are handed transposed (the rule of the module's docstring), then viewed back (not contiguous)."""
    return torch.from_numpy(_matmul(values.swapaxes(1, 2), probabilities.swapaxes(1, 2))).transpose(1, 2)


class _OpenBlasAttention(torch.autograd.Function):
    """`openblas_attention` with its backward's products through OpenBLAS too: for O = P V, P = softmax(S),
    S = scaling Q K^T, dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ = scaling dS K, dK = scaling dS^T Q,
    per stacked key/value head (dK and dV then sum over the group's query heads by the product itself)."""

    @staticmethod
    def forward(ctx, query, key, value, allowed, scaling):
        batch, heads, q_length, dim = query.shape
        kv_heads, k_length = key.shape[1], key.shape[2]
        q = _stacked_queries(query, kv_heads)
        k = key.detach().reshape(batch * kv_heads, k_length, dim).numpy()
        v = value.detach().reshape(batch * kv_heads, k_length, dim).numpy()
        probabilities = _attention_probabilities(q, k, allowed, (batch, kv_heads, heads // kv_heads, q_length,
                                                                 k_length), scaling)
        out = _times_values(probabilities.numpy(), v)
        ctx.save_for_backward(query, key, value, probabilities, out)
        ctx.scaling = scaling
        return out.reshape(batch, heads, q_length, dim).transpose(1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad):
        query, key, value, probabilities, out = ctx.saved_tensors
        batch, heads, q_length, dim = query.shape
        kv_heads, k_length = key.shape[1], key.shape[2]
        # (B, Lq, H, D) -> the stacked layout of the queries
        grad_out = grad.transpose(1, 2).reshape(batch * kv_heads, heads // kv_heads * q_length, dim).contiguous()
        g, p = grad_out.numpy(), probabilities.numpy()
        k = key.detach().reshape(batch * kv_heads, k_length, dim).numpy()
        v = value.detach().reshape(batch * kv_heads, k_length, dim).numpy()
        grad_value = torch.from_numpy(_matmul(p.swapaxes(1, 2), g))
        grad_p = torch.from_numpy(_matmul(g, v.swapaxes(1, 2)))
        grad_scores = probabilities * (grad_p - (grad_out * out).sum(-1, keepdim=True))
        grad_scores.mul_(ctx.scaling)
        s = grad_scores.numpy()
        grad_query = _times_values(s, k)  # dS K, handed over transposed as the forward's P V
        grad_key = torch.from_numpy(_matmul(s.swapaxes(1, 2), _stacked_queries(query, kv_heads)))
        return (grad_query.reshape(batch, heads, q_length, dim), grad_key.view(batch, kv_heads, k_length, dim),
                grad_value.view(batch, kv_heads, k_length, dim), None, None)


def openblas_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None,
                       scaling: float) -> torch.Tensor:
    """softmax(scaling Q K^T + mask) V for query (B, H, Lq, D) and grouped key/value (B, Hkv, Lk, D), returned as
    (B, Lq, H, D) (Hugging Face's layout after attention). ``allowed``: bool (B, 1, Lq, Lk), True where a query may
    attend; None: causal, the queries being the last Lq of the Lk positions. Float32 CPU tensors through OpenBLAS
    (autograd only where a gradient is wanted, as `openblas_linear`); on another device the device's SDPA."""
    q_length, k_length = query.shape[2], key.shape[2]
    if allowed is None:
        allowed = torch.ones(q_length, k_length, dtype=torch.bool, device=query.device).tril(k_length - q_length)
        allowed = allowed[None, None]
    if query.device.type != "cpu":
        return F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scaling,
                                              enable_gqa=True).transpose(1, 2).contiguous()
    if not all(t.dtype == torch.float32 for t in (query, key, value)):
        raise ValueError(f"the OpenBLAS attention takes float32 CPU tensors; got {query.dtype}, {key.dtype}, "
                         f"{value.dtype}")
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"{query.shape[1]} query heads do not share {key.shape[1]} key/value heads evenly")
    allowed = allowed.expand(query.shape[0], 1, q_length, k_length)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        return _OpenBlasAttention.apply(query, key, value, allowed, scaling)
    return _OpenBlasAttention.forward(_NoContext(), query, key, value, allowed, scaling)


class _NoContext:
    """A stand-in for autograd's context where no gradient is wanted: `_OpenBlasAttention.forward` saves nothing."""

    def save_for_backward(self, *tensors):
        pass


def _hugging_face_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                            scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """`openblas_attention` in Hugging Face's attention interface (what ``_attn_implementation`` names calls)."""
    if dropout:
        raise ValueError(f"the OpenBLAS attention has no dropout; got {dropout}")
    if is_causal is False or not getattr(module, "is_causal", True):
        raise ValueError("the OpenBLAS attention computes causal attention only (a decoder's)")
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise ValueError(f"the OpenBLAS attention takes a bool mask (sdpa_mask's); got {attention_mask.dtype}")
    scaling = module.scaling if scaling is None else scaling
    return openblas_attention(query, key, value, attention_mask, scaling), None


def _register_with_hugging_face() -> None:
    """`HF_ATTENTION` as an attention implementation, with SDPA's mask (bool, True where allowed; None where a
    causal mask without padding suffices)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(HF_ATTENTION, _hugging_face_attention)
    AttentionMaskInterface.register(HF_ATTENTION, sdpa_mask)


_register_with_hugging_face()


def route_products(model) -> nn.Module:
    """Route ``model``'s products as its config names them: every ``nn.Linear`` an `OpenBlasLinear` (the parameters
    stay the same tensors) for ``dara_matmul: openblas``, its attention `openblas_attention` for ``dara_attention:
    openblas``; nothing otherwise. Returns the model."""
    if matmul_of(model.config) == "openblas":
        for module in model.modules():
            if type(module) is nn.Linear:
                module.__class__ = OpenBlasLinear
    if attention_of(model.config) == "openblas":
        model.set_attn_implementation(HF_ATTENTION)
    return model
