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
projections (`dara.tiny.decoder.LeanDecoder`). Attention's products, softmax, norms and the optimiser stay torch's.
The choice is the warm start's (``warm_start.matmul`` in an experiment; `dara.tiny.policy.build_model`), saved in
the policy's ``config.json``, so every checkpoint trained from it, its reference copy and its evaluation compute the
same way (`dara.tiny.policy.load_policy` routes them). A policy without the key computes with torch, as every policy
made before the key existed. Other trainers (verl) load the same checkpoint and ignore the key; on a GPU the device's
own GEMM computes (a GPU run records its device and rounds otherwise anyway).

The two libraries round differently, so the same policy and seed train other numbers under each: a switch of
``matmul`` is a new draw of the study, not a free speed-up.
"""

from __future__ import annotations

import numpy
import torch
import torch.nn.functional as F
from torch import nn

# The Hugging Face config attribute that names the policy's GEMM library (absent: "torch").
MATMUL_KEY = "dara_matmul"
MATMULS = ("torch", "openblas")


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


def route_linear_layers(model) -> nn.Module:
    """Make every ``nn.Linear`` of ``model`` an `OpenBlasLinear` when its config names OpenBLAS (the parameters stay
    the same tensors); nothing otherwise. Returns the model."""
    if matmul_of(model.config) == "openblas":
        for module in model.modules():
            if type(module) is nn.Linear:
                module.__class__ = OpenBlasLinear
    return model
