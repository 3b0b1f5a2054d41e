"""Multi-reward advantage estimators: GRPO, GDPO, DVAO, GD2PO-Hard, static weights, DARA and a shuffled control.

One entry point serves the tiny CPU trainer and verl alike::

    result = compute_advantages("dara_asym", rewards, index)
    result.advantages    # (N,) float32, one scalar per response (broadcast over its tokens by the caller)
    result.loss_weights  # (N,) per-response weight of the policy loss (GD2PO-Hard's kept fraction, else 1)

Shapes: ``rewards`` is (N, K): N responses, K reward channels. ``index`` holds N group ids (the prompt uid); rows of
a group need not be contiguous, and every group needs at least two responses.

Per group g and channel k the reward is z-scored with the Bessel-corrected standard deviation,
``Z = (r - mean_g) / (std_g + eps)``. A group is *active* for channel k when ``sum_g |Z_k| > tau``; the channel's
active-group density is ``pi_k = active groups / groups``. DARA weights channel k by
``w_k = min(w_max, sqrt(max_j pi_j / pi_k))`` (1 when ``pi_k = 0``): DARA-Sym multiplies every Z_k by w_k,
DARA-Asym only the positive ones, so sparse channels are not drowned by dense ones. The static variants apply the
same calibration with fixed weights. Definitions and constants follow the paper's release; docs/methods.md states
them with their sources.

The shuffled control (``"shuffled"``, not a method of the paper) computes GDPO's advantages for the batch (same
z-scores, same ``batch_norm`` and ``lengths``) and permutes them across the whole batch: response i gets
``A_gdpo[perm[i]]``. ``perm`` is `shuffle_permutation` of the rewards, a pure function of the batch (seeded by a
SHA-256 of the rewards' float64 bytes and shape), so the same batch gives the same advantages in every process, rank
and resume, and different batches get different permutations. The advantage a response gets is then independent
of its own rewards while its magnitudes are exactly the per-channel methods': training on it shows the drift of the
pipeline without signal (the advantages' sum over the batch and their spread stay those of GDPO).

Each formula of `dara.methods` (its rows' ``formula`` column: ``grpo``, ``dvao``, ``per_channel``, ``shuffled``) is
one class registered where it is defined (``@register_estimator("grpo")``, as verl's ``register_adv_est``), giving
both the advantages and the per-channel parts of `channel_contributions`; `compute_advantages` does what every
method shares around it (validation, grouping, z-scores, densities, diagnostics, the caller's row order).

Everything is computed in float64 and returned as float32: a group whose values are all equal gets exactly 0 (and
is inactive) whatever the input dtype, unlike a float32 mean/std where rounding leaves |A| = 0.029 for a constant
group of eight 0.3 rewards (verl 0.9.1's GRPO; up to 0.19 over constant groups of the values 0.01 to 3.00).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from dara.methods import METHODS, TABLE, Method, get_method

BATCH_NORMS = ("response", "token", "none")
BATCH_NORM = "response"  # the default final normalisation (per response; verl's tool stack uses "token")
# What to do with a group of one response (it has no z-score): "raise" (the library's default: such a batch is a
# caller's bug) or "zero" (advantage 0, counted as an inactive group; verl can hand one over when rollouts fail or a
# filter drops rows, and a long run should log it rather than die).
SINGLETON_POLICIES = ("raise", "zero")

W_MAX = 5.0  # DARA's weight cap
TAU = 1e-8  # a group is active for a channel when the sum of its |Z| exceeds this
EPS = 1e-6  # added to every group (and response-normalisation) standard deviation

SIGN_EPS = 1e-8  # GD2PO-Hard: |Z| at or below this counts as neutral, not as a sign
DVAO_DENOM_EPS = 1e-8  # DVAO: a denominator at or below this gives advantage 0
WHITEN_EPS = 1e-8  # token-level whitening: (S - m) / sqrt(var + WHITEN_EPS), as verl's masked_whiten
SHUFFLE_SEED_DOMAIN = b"dara/shuffled/v1"  # prefix of the hashed bytes that seed the shuffled control's permutation
# The namespace every trainer (verl, TRL) logs an estimator's `AdvantageResult.metrics` under: dara/density/<reward>, ...
METRIC_PREFIX = "dara/"


@dataclass(frozen=True)
class AdvantageResult:
    """What an estimator returns.

    advantages: (N,) float32, one scalar per response.
    density: (K,) float32, active-group density pi_k of each channel (a diagnostic for every method).
    weights: (K,) float32, the channel weights applied (1 where a method has none).
    loss_weights: (N,) float32, per-response multiplier of the policy loss (GD2PO-Hard's kept fraction of the group).
    metrics: scalar diagnostics named ``<quantity>/<channel>`` plus ``n_groups`` (and GD2PO-Hard's conflict ratio).
    """

    advantages: torch.Tensor
    density: torch.Tensor
    weights: torch.Tensor
    loss_weights: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupLayout:
    """Group membership of N rows: ``codes[i]`` is row i's group in [0, n_groups).

    ``block_size`` is set when groups are contiguous, equal-size blocks (verl's layout), which allows reshapes
    instead of scatters.
    """

    codes: torch.Tensor
    counts: torch.Tensor
    n_groups: int
    block_size: int | None


# Options every method accepts because an experiment states them once for a whole sweep of methods: the methods
# without a weight cap or a batch normalisation (GRPO, DVAO, GDPO, ...) ignore them. Every other option is one method
# family's own, and a value other than its default for a method that does not read it is an error.
SWEEP_OPTIONS = ("w_max", "batch_norm")


@dataclass(frozen=True)
class EstimatorOptions:
    """The estimators' options, one object for every method (as verl hands every estimator one config).

    Which fields a method reads is stated with the method (`dara.methods.Method.options`); `compute_advantages`
    takes the object as it is. A trainer builds one from its run's settings; code that runs several methods on one
    configuration (the diagnostics) asks `for_method` for the fields each reads.

        options = EstimatorOptions(w_max=3.0, batch_norm="token")
        compute_advantages("dara_sym", rewards, index, options, lengths=lengths)

    w_max: DARA's weight cap (>= 1); ``w_max=1`` makes DARA exactly GDPO.
    tau: a group is active for a channel when the sum of its |Z| exceeds tau.
    eps: added to the per-group std (and the response-level batch std).
    batch_norm: final normalisation of the methods that have one (GDPO, GD2PO-Hard, static, DARA, shuffled):
        "response" (per-response, math stack), "token" (token-weighted whitening, tool stack; needs lengths) or
        "none". GRPO and DVAO have no batch normalisation by definition.
    static_weights: K fixed weights (each >= 1), required by ``static_sym``/``static_asym``.
    base_weights: K positive DVAO channel weights (default equal).
    sign_eps: GD2PO-Hard: |Z| at or below this counts as neutral, not as a sign.
    dvao_eps: DVAO: a group whose denominator is at or below this gets advantage 0.
    singletons: "raise" (default) refuses a group of one response; "zero" gives its rows advantage 0, counts it as
        a group that is inactive for every channel and reports ``singleton_groups`` in ``metrics``.
    """

    w_max: float = W_MAX
    tau: float = TAU
    eps: float = EPS
    batch_norm: str = BATCH_NORM
    static_weights: tuple[float, ...] | None = None
    base_weights: tuple[float, ...] | None = None
    sign_eps: float = SIGN_EPS
    dvao_eps: float = DVAO_DENOM_EPS
    singletons: str = "raise"

    def __post_init__(self):
        for name in ("static_weights", "base_weights"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in np.asarray(value, dtype=float).reshape(-1)))
        if self.batch_norm not in BATCH_NORMS:
            raise ValueError(f"unknown batch_norm {self.batch_norm!r}; valid values: {', '.join(BATCH_NORMS)}")
        if self.singletons not in SINGLETON_POLICIES:
            raise ValueError(f"unknown singletons policy {self.singletons!r}; valid values: "
                             f"{', '.join(SINGLETON_POLICIES)}")
        if not (np.isfinite(self.w_max) and self.w_max >= 1.0):
            raise ValueError(f"w_max must be a finite number >= 1, got {self.w_max}")
        if not (np.isfinite(self.tau) and self.tau >= 0.0):
            raise ValueError(f"tau must be a finite number >= 0, got {self.tau}")
        if not (np.isfinite(self.eps) and self.eps > 0.0):
            raise ValueError(f"eps must be a finite number > 0, got {self.eps}")
        for name in ("sign_eps", "dvao_eps"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if self.static_weights is not None and (not np.all(np.isfinite(self.static_weights))
                                                or min(self.static_weights) < 1.0):
            raise ValueError(f"static_weights must be finite and each >= 1, got {list(self.static_weights)}")
        if self.base_weights is not None and (not np.all(np.isfinite(self.base_weights))
                                              or min(self.base_weights) <= 0.0):
            raise ValueError(f"base_weights must be finite and > 0, got {list(self.base_weights)}")

    def for_method(self, method: str) -> "EstimatorOptions":
        """These options with every field ``method`` does not read (`Method.options`) back at its default."""
        reads = set(get_method(method).options) | set(SWEEP_OPTIONS)
        return replace(self, **{f.name: f.default for f in fields(self) if f.name not in reads})

    def check_for(self, method: str, n_channels: int, labels: Mapping[str, str] | None = None) -> None:
        """Raise, naming the option, where ``method`` cannot run with these options on ``n_channels`` rewards.
        ``labels``: how a caller's users spell an option (verl's ``algorithm.dara.gd2po_sign_eps`` for
        ``sign_eps``), so that the error names the key they wrote."""
        spec = get_method(method)
        label = (lambda name: name) if labels is None else (lambda name: labels.get(name, name))
        for option in fields(self):
            if option.name in spec.options or option.name in SWEEP_OPTIONS:
                continue
            if getattr(self, option.name) != option.default:
                readers = [m for m in METHODS if option.name in get_method(m).options]
                raise ValueError(f"{label(option.name)} is only read by {', '.join(readers)}, not by {method}")
        if spec.needs_static_weights and self.static_weights is None:
            raise ValueError(f"{method} needs {label('static_weights')}, one per reward channel (each >= 1)")
        for name in ("static_weights", "base_weights"):
            value = getattr(self, name)
            if value is not None and len(value) != n_channels:
                raise ValueError(f"{label(name)} has {len(value)} values but rewards have {n_channels} channels")


def _options(options: EstimatorOptions | None, values: dict) -> EstimatorOptions:
    """``options`` (default: the library's) with the keyword ``values`` of a direct call in place."""
    known = {f.name for f in fields(EstimatorOptions)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"unknown estimator option(s) {unknown}; options: {', '.join(sorted(known))}")
    return replace(options or EstimatorOptions(), **values)


def group_layout(index, n_rows: int, device: torch.device | None = None) -> GroupLayout:
    """Map group ids (strings, ints, numpy object array, int tensor) to integer codes."""
    if isinstance(index, torch.Tensor):
        if index.dtype.is_floating_point or index.dtype == torch.bool or index.dtype.is_complex:
            raise ValueError(f"index tensor must hold integer group ids, got dtype {index.dtype}")
        ids = index.reshape(-1)
        if ids.numel() != n_rows:
            raise ValueError(f"index has {ids.numel()} entries but rewards have {n_rows} rows")
        _, codes = torch.unique(ids, return_inverse=True)
        codes = codes.to(device=device)
        counts = torch.bincount(codes)
        block_size = _contiguous_block_size(codes, counts)
        if block_size is not None and block_size >= 2:
            return _block_layout(len(counts), block_size, device)
    else:
        ids = index if isinstance(index, np.ndarray) else np.asarray(index, dtype=object)
        ids = ids.reshape(-1)
        if ids.shape[0] != n_rows:
            raise ValueError(f"index has {ids.shape[0]} entries but rewards have {n_rows} rows")
        if ids.dtype.kind in "fc" or any(isinstance(v, float) for v in ids[:1]):
            raise ValueError("index must hold group ids (strings or integers), got floating-point values")
        block_size = _block_size_of_ids(ids)
        if block_size is not None:  # verl's layout: skip hashing every id
            return _block_layout(n_rows // block_size, block_size, device)
        if ids.dtype.kind in "iu":
            _, inverse = np.unique(ids, return_inverse=True)
        else:  # strings / objects (verl's uids): hash-based, no sort, no coercion of 1 to "1"
            inverse, _ = pd.factorize(ids, use_na_sentinel=False)
        codes = torch.as_tensor(inverse.reshape(-1), dtype=torch.long, device=device)
    n_groups = int(codes.max().item()) + 1
    counts = torch.bincount(codes, minlength=n_groups)
    if int(counts.min().item()) < 2:
        singleton = int(torch.nonzero(counts < 2)[0].item())
        raise ValueError(
            f"every group needs at least two responses to be z-scored; group #{singleton} has "
            f"{int(counts[singleton].item())}"
        )
    # Contiguous equal blocks were taken above (ids checked directly); what is left needs the scatter path or the
    # sort into blocks done by compute_advantages.
    return GroupLayout(codes=codes, counts=counts, n_groups=n_groups, block_size=None)


def _block_layout(n_groups: int, block_size: int, device) -> GroupLayout:
    codes = torch.arange(n_groups, device=device).repeat_interleave(block_size)
    counts = torch.full((n_groups,), block_size, dtype=torch.long, device=device)
    return GroupLayout(codes=codes, counts=counts, n_groups=n_groups, block_size=block_size)


def _block_size_of_ids(ids: np.ndarray) -> int | None:
    """G when ``ids`` are contiguous runs of G equal ids, each id in one run only (G >= 2); else None."""
    if len(ids) < 2:
        return None
    starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    size = int(starts[0]) if len(starts) else len(ids)
    if size < 2 or len(ids) % size or len(starts) != len(ids) // size - 1:
        return None
    if np.any(starts != np.arange(1, len(ids) // size) * size):
        return None
    heads = ids[::size]
    return size if len(set(heads.tolist())) == len(heads) else None


def _contiguous_block_size(codes: torch.Tensor, counts: torch.Tensor) -> int | None:
    size = int(counts[0].item())
    if not bool((counts == size).all()):
        return None
    blocks = codes.view(-1, size)
    return size if bool((blocks == blocks[:, :1]).all()) else None


def _group_sum(values: torch.Tensor, layout: GroupLayout) -> torch.Tensor:
    """Sum rows of ``values`` (N, ...) per group -> (n_groups, ...)."""
    if layout.block_size is not None:
        return values.reshape(layout.n_groups, layout.block_size, *values.shape[1:]).sum(dim=1)
    out = values.new_zeros((layout.n_groups, *values.shape[1:]))
    return out.index_add_(0, layout.codes, values)


def _group_extreme(values: torch.Tensor, layout: GroupLayout, reduce: str) -> torch.Tensor:
    if layout.block_size is not None:
        blocks = values.reshape(layout.n_groups, layout.block_size, *values.shape[1:])
        return blocks.amax(dim=1) if reduce == "amax" else blocks.amin(dim=1)
    out = values.new_zeros((layout.n_groups, *values.shape[1:]))
    target = layout.codes.view(-1, *([1] * (values.dim() - 1))).expand_as(values)
    return out.scatter_reduce_(0, target, values, reduce=reduce, include_self=False)


def exact_sqrt(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root on every device and CPU.

    On the CPU, ATen hands ``torch.sqrt`` of a float tensor to MKL's vector math, whose result is not correctly
    rounded (about 15 % of float32 and 1 % of float64 values off by an ulp, measured) and depends on the CPU's
    approximate reciprocal instructions, whose tables differ between Intel and AMD: the same inputs give other bytes
    on another CPU, kernel pin or not (docs/tiny_scale.md, "Machine dependence"). numpy's square root is the
    instruction's, correct to the last bit everywhere. On CUDA torch's is correctly rounded already.
    """
    if x.device.type != "cpu":
        return torch.sqrt(x)
    values = x.numpy()
    return torch.from_numpy(np.sqrt(values, out=np.empty_like(values)))  # an array for 0-d input too


def group_zscores(values: torch.Tensor, layout: GroupLayout, eps: float, population_std: bool = False):
    """Per-group z-scores of ``values`` (N, K) in float64, exactly 0 for constant groups.

    Returns ``(z, mean, std, constant)`` with mean/std/constant of shape (n_groups, K).
    """
    counts = layout.counts.to(values.dtype).view(-1, *([1] * (values.dim() - 1)))
    mean = _group_sum(values, layout) / counts
    centred = values - mean[layout.codes]
    dof = counts if population_std else counts - 1
    std = exact_sqrt(_group_sum(centred * centred, layout) / dof)
    constant = _group_extreme(values, layout, "amax") == _group_extreme(values, layout, "amin")
    z = centred / (std[layout.codes] + eps)
    return z.masked_fill(constant[layout.codes], 0.0), mean, std, constant


def channel_density(z: torch.Tensor, layout: GroupLayout, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Active groups per channel (sum of |z| in the group above tau) and the density pi_k = active / groups."""
    active = (_group_sum(z.abs(), layout) > tau).sum(dim=0)
    return active, active.to(torch.float64) / layout.n_groups


def density_weights(density: torch.Tensor, w_max: float) -> torch.Tensor:
    """DARA's weights: min(w_max, sqrt(max_j pi_j / pi_k)); 1 for a channel that is never active."""
    reference = density.max()
    weights = torch.ones_like(density)
    live = density > 0
    weights[live] = torch.clamp(exact_sqrt(reference / density[live]), max=w_max)
    return weights


def calibrate(z: torch.Tensor, weights: torch.Tensor, mode: str) -> torch.Tensor:
    """Apply channel weights to z-scores (N, K): "sym" scales all of Z_k, "asym" only its positive part."""
    if mode == "sym":
        return z * weights
    return z + (weights - 1.0) * z.clamp(min=0.0)


def batch_normalise(scores: torch.Tensor, eps: float, lengths: torch.Tensor | None, keep=None) -> torch.Tensor:
    """Normalise per-response scores over the batch (or over the ``keep`` rows).

    Without ``lengths``: equal weight per response, ``(S - m) / (std_bessel + eps)``, zeros when one element or fewer.
    With ``lengths``: token-weighted as verl's ``masked_whiten``, ``(S - m) / sqrt(var_bessel_tokens + 1e-8)``.
    Rows outside ``keep`` get 0.
    """
    keep = torch.ones_like(scores, dtype=torch.bool) if keep is None else keep
    out = torch.zeros_like(scores)
    if lengths is None:
        kept = scores[keep]
        if kept.numel() <= 1:
            return out
        out[keep] = (kept - kept.mean()) / (kept.std(unbiased=True) + eps)
        return out
    tokens = lengths.to(scores.dtype) * keep
    n_tokens = tokens.sum()
    if n_tokens <= 1:
        return out
    mean = (tokens * scores).sum() / n_tokens
    var = (tokens * (scores - mean) ** 2).sum() / n_tokens * (n_tokens / (n_tokens - 1))
    out[keep] = ((scores - mean) * torch.rsqrt(var + WHITEN_EPS))[keep]
    return out


def shuffle_permutation(rewards) -> torch.Tensor:
    """The shuffled control's permutation of the N rows of ``rewards`` (N, K): a (N,) int64 CPU tensor.

    A pure function of the batch: ``torch.randperm(N)`` drawn from a ``torch.Generator`` seeded with the first 8
    bytes (little-endian, top bit dropped) of ``sha256(SHUFFLE_SEED_DOMAIN + int64 N + int64 K + rewards)``, the
    rewards as little-endian float64 in row order (-0.0 counted as 0.0). Python's ``hash`` is not used: it is salted
    per process. Stable across processes and machines for one torch version (``randperm``'s algorithm is torch's).
    """
    if isinstance(rewards, torch.Tensor):
        values = rewards.detach().to("cpu", torch.float64).numpy()
    else:
        values = np.asarray(rewards, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"rewards must be 2-D (responses, channels), got shape {values.shape}")
    values = np.ascontiguousarray(values + 0.0, dtype="<f8")  # + 0.0 turns -0.0 into 0.0
    n_rows, n_channels = values.shape
    digest = hashlib.sha256(SHUFFLE_SEED_DOMAIN + struct.pack("<qq", n_rows, n_channels) + values.tobytes()).digest()
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.randperm(n_rows, generator=generator)


# The estimators: one class per formula of `dara.methods`, registered where it is defined (module docstring).


@dataclass(frozen=True)
class Batch:
    """One batch as an estimator sees it: validated, grouped, z-scored, its channel densities known.

    rewards: (N, K) float64, rows in the order of ``layout`` (`compute_advantages` sorts equal-size groups into
        contiguous blocks; ``order`` maps those rows back to the caller's).
    z: (N, K) per-group z-scores of ``rewards`` (`group_zscores`); active, density: each channel's active groups
        and density pi_k, (K,) (`channel_density`).
    method: the method's row of `dara.methods`; options: its `EstimatorOptions`, already checked for it.
    caller_rewards: the rewards in the caller's row order (the shuffled control's permutation is a function of them).
    token_lengths: (N,) token counts where ``options.batch_norm == "token"``, else None.
    order: None, or the caller's row of each row of ``rewards``.
    """

    rewards: torch.Tensor
    layout: GroupLayout
    z: torch.Tensor
    active: torch.Tensor
    density: torch.Tensor
    method: Method
    options: EstimatorOptions
    caller_rewards: torch.Tensor
    token_lengths: torch.Tensor | None = None
    order: torch.Tensor | None = None

    @classmethod
    def of(cls, method: Method, rewards: torch.Tensor, layout: GroupLayout, options: EstimatorOptions, *,
           caller_rewards: torch.Tensor, token_lengths: torch.Tensor | None = None,
           order: torch.Tensor | None = None) -> "Batch":
        z, _, _, _ = group_zscores(rewards, layout, options.eps)
        active, density = channel_density(z, layout, options.tau)
        return cls(rewards=rewards, layout=layout, z=z, active=active, density=density, method=method,
                   options=options, caller_rewards=caller_rewards, token_lengths=token_lengths, order=order)

    def in_caller_order(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with rows in this batch's order, put in the caller's."""
        if self.order is None:
            return values
        return torch.empty_like(values).index_copy_(0, self.order, values)

    def in_batch_order(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with rows in the caller's order, put in this batch's."""
        return values if self.order is None else values[self.order]

    def batch_normalised(self, scores: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``scores`` (N,) after the final normalisation ``options.batch_norm`` (over the ``keep`` rows)."""
        if self.options.batch_norm == "none":
            return scores
        return batch_normalise(scores, self.options.eps, self.token_lengths, keep)


@dataclass(frozen=True)
class Scores:
    """What an estimator's ``advantages`` returns, rows in the batch's order; `compute_advantages` adds the
    diagnostics every method shares and puts the rows back in the caller's order.

    advantages: (N,) float64.
    weights: (K,) the channel weights applied; None where the formula has none (reported as ones).
    loss_weights: (N,) per-response multiplier of the policy loss; None for ones.
    calibrated: (N, K) the weighted z-scores whose energies ``energy_*_calibrated`` report; None for the z-scores.
    metrics: the formula's own diagnostics (GD2PO-Hard's ``gd2po_hard/conflict_ratio``).
    """

    advantages: torch.Tensor
    weights: torch.Tensor | None = None
    loss_weights: torch.Tensor | None = None
    calibrated: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class Estimator(Protocol):
    """An advantage estimator: the formula of the `dara.methods` rows that name it in their ``formula`` column."""

    def advantages(self, batch: Batch) -> Scores:
        """The advantages of ``batch.method`` and what it weighted."""

    def contributions(self, batch: Batch) -> torch.Tensor:
        """(N, K) float64: each channel's part of each response's score before the batch normalisation, summing
        over channels to that score (`channel_contributions`)."""


# formula name (a `dara.methods` row's ``formula``) -> its estimator; filled by @register_estimator
REGISTERED_ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(formula: str) -> Callable[[type], type]:
    """Class decorator: register an `Estimator` (a class with ``advantages`` and ``contributions`` static methods)
    under ``formula``. A formula registered twice is refused, so that no import silently replaces an estimator."""

    def register(estimator: type) -> type:
        if formula in REGISTERED_ESTIMATORS:
            raise ValueError(f"an estimator is already registered for formula {formula!r}: "
                             f"{REGISTERED_ESTIMATORS[formula].__name__}")
        missing = [name for name in ("advantages", "contributions") if not callable(getattr(estimator, name, None))]
        if missing:
            raise TypeError(f"estimator {estimator.__name__} for formula {formula!r} lacks {', '.join(missing)}")
        REGISTERED_ESTIMATORS[formula] = estimator
        return estimator

    return register


def estimator_for(formula: str) -> Estimator:
    """The estimator registered for ``formula``; a ValueError naming the registered formulas otherwise."""
    try:
        return REGISTERED_ESTIMATORS[formula]
    except (KeyError, TypeError):
        raise ValueError(f"no estimator is registered for formula {formula!r}; registered formulas: "
                         f"{', '.join(REGISTERED_ESTIMATORS)}") from None


@register_estimator("grpo")
class GRPO:
    """The z-score of the summed rewards per group: no channel weights, no batch normalisation."""

    @staticmethod
    def advantages(batch: Batch) -> Scores:
        z, _, _, _ = group_zscores(batch.rewards.sum(dim=1, keepdim=True), batch.layout, batch.options.eps)
        return Scores(advantages=z[:, 0])

    @staticmethod
    def contributions(batch: Batch) -> torch.Tensor:
        """Channel k's part: ``(r_k - mean_g r_k) / (std_g(sum r) + eps)``, 0 in a group whose sum is constant."""
        x, layout, eps = batch.rewards, batch.layout, batch.options.eps
        counts = layout.counts.to(x.dtype).unsqueeze(1)
        centred = x - (_group_sum(x, layout) / counts)[layout.codes]
        _, _, std, constant = group_zscores(x.sum(dim=1, keepdim=True), layout, eps)
        parts = centred / (std[layout.codes] + eps)
        return parts.masked_fill(constant[layout.codes], 0.0)


@register_estimator("dvao")
class DVAO:
    """``A = sum_k b_k (r_k - mu_k) / sum_k b_k sigma_k`` per group, population sigma (b: ``base_weights``, equal
    by default); a denominator at or below ``dvao_eps`` gives 0. No batch normalisation."""

    @staticmethod
    def advantages(batch: Batch) -> Scores:
        weighted, safe, live = DVAO.terms(batch)
        numerator = weighted.sum(dim=1)
        codes = batch.layout.codes
        return Scores(advantages=torch.where(live[codes], numerator / safe[codes], torch.zeros_like(numerator)))

    @staticmethod
    def contributions(batch: Batch) -> torch.Tensor:
        """Channel k's part: ``b_k (r_k - mu_k) / sum_j b_j sigma_j``."""
        weighted, safe, live = DVAO.terms(batch)
        codes = batch.layout.codes
        return torch.where(live[codes, None], weighted / safe[codes, None], torch.zeros_like(weighted))

    @staticmethod
    def terms(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The per-channel numerators ``b_k (r_k - mu_k)`` (N, K, zero in a channel's constant groups), each group's
        denominator ``sum_k b_k sigma_k`` (1 where it is at or below ``dvao_eps``) and whether it is above it."""
        x, layout, options = batch.rewards, batch.layout, batch.options
        n_channels = x.shape[1]
        b = torch.full((n_channels,), 1.0 / n_channels, dtype=torch.float64, device=x.device)
        if options.base_weights is not None:
            b = torch.as_tensor(options.base_weights, dtype=torch.float64, device=x.device)
        counts = layout.counts.to(x.dtype).unsqueeze(1)
        mean = _group_sum(x, layout) / counts
        centred = x - mean[layout.codes]
        sigma = exact_sqrt(_group_sum(centred * centred, layout) / counts)
        constant = _group_extreme(x, layout, "amax") == _group_extreme(x, layout, "amin")
        centred = centred.masked_fill(constant[layout.codes], 0.0)
        sigma = sigma.masked_fill(constant, 0.0)
        denominator = (sigma * b).sum(dim=1)
        live = denominator > options.dvao_eps
        safe = torch.where(live, denominator, torch.ones_like(denominator))
        return centred * b, safe, live


@register_estimator("per_channel")
class PerChannel:
    """GDPO, GD²PO-Hard, the static methods and DARA: each channel's z-scores times its weight (the row's
    ``weights``: unit, static or density; its ``calibration``: Sym scales every z, Asym only the positive ones),
    summed over channels and batch-normalised. GD²PO-Hard (``drops_conflicts``) gives 0 to a response whose channels
    disagree in sign, normalises over the rest and weights each response's loss by its group's kept fraction."""

    @staticmethod
    def advantages(batch: Batch) -> Scores:
        weights, calibrated, keep = PerChannel.weighted(batch)
        scores = calibrated.sum(dim=1)
        if keep is None:
            return Scores(advantages=batch.batch_normalised(scores), weights=weights, calibrated=calibrated)
        layout = batch.layout
        kept_fraction = _group_sum(keep.to(torch.float64), layout) / layout.counts
        return Scores(advantages=batch.batch_normalised(scores * keep, keep), weights=weights,
                      loss_weights=kept_fraction[layout.codes], calibrated=calibrated,
                      metrics={"gd2po_hard/conflict_ratio": 1.0 - float(keep.to(torch.float64).mean())})

    @staticmethod
    def contributions(batch: Batch) -> torch.Tensor:
        """Channel k's part: its weighted z-score (zero where GD²PO-Hard drops the response)."""
        _, calibrated, keep = PerChannel.weighted(batch)
        return calibrated if keep is None else calibrated * keep[:, None]

    @staticmethod
    def weighted(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The channel weights (K,), the calibrated z-scores (N, K) and, for GD²PO-Hard, the responses kept."""
        spec, options, z = batch.method, batch.options, batch.z
        if spec.weights == "density":
            weights = density_weights(batch.density, options.w_max)
        elif spec.weights == "static":  # checked by EstimatorOptions: one per channel, each >= 1
            weights = torch.as_tensor(options.static_weights, dtype=torch.float64, device=z.device)
        else:
            weights = torch.ones(z.shape[1], dtype=torch.float64, device=z.device)
        keep = None
        if spec.drops_conflicts:
            keep = ~((z > options.sign_eps).any(dim=1) & (z < -options.sign_eps).any(dim=1))
        return weights, calibrate(z, weights, spec.calibration), keep


@register_estimator("shuffled")
class Shuffled:
    """The drift control: GDPO's advantages (unit weights, Sym, the same ``batch_norm``) permuted across the batch
    by `shuffle_permutation` of the caller's rewards: the caller's row i gets row ``perm[i]``'s advantage."""

    @staticmethod
    def advantages(batch: Batch) -> Scores:
        return Scores(advantages=Shuffled.permuted(batch, batch.batch_normalised(batch.z.sum(dim=1))))

    @staticmethod
    def contributions(batch: Batch) -> torch.Tensor:
        """Row i's parts: the z-scores of row ``perm[i]`` (GDPO's parts, permuted)."""
        return Shuffled.permuted(batch, batch.z)

    @staticmethod
    def permuted(batch: Batch, values: torch.Tensor) -> torch.Tensor:
        """``values`` (rows in the batch's order) permuted as the caller's rows, returned in the batch's order."""
        permutation = shuffle_permutation(batch.caller_rewards).to(values.device)
        return batch.in_batch_order(batch.in_caller_order(values)[permutation])


def _check_every_method_has_an_estimator() -> None:
    """The method table and the registry agree: a row whose formula has no estimator fails at import."""
    for spec in TABLE:
        try:
            estimator_for(spec.formula)
        except ValueError as error:
            raise ValueError(f"method {spec.name!r} of dara.methods: {error}") from None


_check_every_method_has_an_estimator()


def compute_advantages(
    method: str,
    rewards,
    index,
    options: EstimatorOptions | None = None,
    *,
    lengths=None,
    channel_names: Sequence[str] | None = None,
    **option_values,
) -> AdvantageResult:
    """Advantages of one method for a batch of multi-reward responses.

    Args:
        method: one of ``METHODS``.
        rewards: (N, K) rewards, torch tensor or numpy array, finite.
        index: N group ids (str, int, numpy object array as verl passes uids, or an integer tensor).
        options: the estimator options (`EstimatorOptions`; default: the library's). The method reads the fields
            its row of `dara.methods` names; another field away from its default is an error, except the sweep
            settings w_max and batch_norm, which the methods without a cap or a normalisation ignore.
        lengths: (N,) response lengths in tokens, required by ``batch_norm="token"`` and only used by it.
        channel_names: names used in ``metrics`` keys (default "0", "1", ...).
        **option_values: single `EstimatorOptions` fields for a direct call (``w_max=1.0``), in place of those of
            ``options``.

    What the method computes is its formula's registered estimator (`REGISTERED_ESTIMATORS`); this function does
    what every method shares around it.
    """
    options = _options(options, option_values)
    x, device = _validated_rewards(rewards)
    n_rows, n_channels = x.shape
    names = _channel_names(channel_names, n_channels)
    options.check_for(method, n_channels)
    spec = get_method(method)
    estimator = estimator_for(spec.formula)
    if lengths is not None and options.batch_norm != "token":
        raise ValueError(f"lengths are only used by batch_norm='token', got batch_norm={options.batch_norm!r}")
    if options.singletons == "zero":
        return _without_singletons(method, x, index, names, options, lengths)
    token_lengths = _validated_lengths(lengths, n_rows, device) if options.batch_norm == "token" else None
    layout = group_layout(index, n_rows, device=device)
    caller_rewards = x
    # Equal-size groups in any order: sort rows into blocks so every group statistic is a reshape, undo at the end.
    order = None
    if layout.block_size is None and bool((layout.counts == layout.counts[0]).all()):
        order = torch.argsort(layout.codes, stable=True)
        x = x[order]
        token_lengths = None if token_lengths is None else token_lengths[order]
        layout = _block_layout(layout.n_groups, int(layout.counts[0]), device)
    batch = Batch.of(spec, x, layout, options, caller_rewards=caller_rewards, token_lengths=token_lengths,
                     order=order)

    scores = estimator.advantages(batch)
    weights = scores.weights
    if weights is None:
        weights = torch.ones(n_channels, dtype=torch.float64, device=device)
    loss_weights = scores.loss_weights
    if loss_weights is None:
        loss_weights = torch.ones(n_rows, dtype=torch.float64, device=device)
    calibrated = batch.z if scores.calibrated is None else scores.calibrated

    metrics = {"n_groups": float(layout.n_groups), **scores.metrics}
    # one reduction per quantity for all channels, one host transfer
    per_channel = torch.stack(
        [batch.density, weights, batch.active.to(torch.float64), *_energies(batch.z), *_energies(calibrated)]
    ).tolist()
    quantities = ("density", "weight", "active_groups", "energy_pos", "energy_neg",
                  "energy_pos_calibrated", "energy_neg_calibrated")
    for quantity, values in zip(quantities, per_channel):
        metrics.update({f"{quantity}/{name}": value for name, value in zip(names, values)})
    return AdvantageResult(
        advantages=batch.in_caller_order(scores.advantages).to(torch.float32),
        density=batch.density.to(torch.float32),
        weights=weights.to(torch.float32),
        loss_weights=batch.in_caller_order(loss_weights).to(torch.float32),
        metrics=metrics,
    )


def channel_contributions(method: str, rewards, index, options: EstimatorOptions | None = None,
                          **option_values) -> torch.Tensor:
    """Each channel's part of each response's score under ``method``, before batch normalisation: (N, K) float64.

    Summed over channels a row gives the response's score: GRPO's and DVAO's advantage itself, the per-channel
    methods' weighted z-sum (zero where GD2PO-Hard drops a response) that ``batch_norm`` then normalises, the
    shuffled control's permuted GDPO z-sum. GRPO's part of channel k is ``(r_k - mean_g r_k) / (std_g(sum r) + eps)``
    (zero in a group whose summed reward is constant), DVAO's ``b_k (r_k - mu_k) / sum_j b_j sigma_j``.
    `contribution_shares` turns them into each channel's share of the per-channel energies: how much of the score
    each channel carries under the method, for any method of the table. Cross terms between channels are left out
    (two channels that cancel in GRPO's sum still count), as in the trainers' ``energy_*`` metrics; the batch
    normalisation that follows rescales every part alike, and its mean shift (not split by channel) and
    GD2PO-Hard's loss weights are outside these parts. Options as `compute_advantages`
    (``batch_norm`` and ``singletons`` play no part). The parts are the registered estimator's ``contributions``.
    """
    options = _options(options, option_values)
    x, device = _validated_rewards(rewards)
    n_rows, n_channels = x.shape
    options.check_for(method, n_channels)
    spec = get_method(method)
    estimator = estimator_for(spec.formula)
    layout = group_layout(index, n_rows, device=device)
    return estimator.contributions(Batch.of(spec, x, layout, options, caller_rewards=x))


def contribution_shares(contributions: torch.Tensor) -> torch.Tensor:
    """(K,) each channel's share of the per-channel energies (sums of squares over the batch) of
    `channel_contributions`, cross terms left out; NaN when every part is 0."""
    energy = (contributions.to(torch.float64) ** 2).sum(dim=0)
    total = energy.sum()
    return energy / total if total > 0 else torch.full_like(energy, float("nan"))


def energy_shares(metrics, channels: Sequence[str], calibrated: bool = False) -> dict:
    """Each channel's share of the advantage energy in logged ``metrics`` (an `AdvantageResult.metrics` dict, a
    metrics row, or a frame of rows): its ``energy_pos`` + ``energy_neg`` (sum of z^2 over the batch; with
    ``calibrated``, of the weighted z) over all channels'. Under GDPO the uncalibrated share is the share the
    channel gets; NaN where no channel has energy."""
    suffix = "_calibrated" if calibrated else ""
    energy = {name: metrics[f"energy_pos{suffix}/{name}"] + metrics[f"energy_neg{suffix}/{name}"] for name in channels}
    total = sum(energy.values())
    if isinstance(total, (pd.Series, pd.DataFrame)):
        return {name: (value / total).where(total > 0) for name, value in energy.items()}
    return {name: (value / total if total > 0 else float("nan")) for name, value in energy.items()}


def _group_sizes(index, n_rows: int) -> np.ndarray:
    """Each row's group size (any id kind `group_layout` accepts), without group_layout's two-response check."""
    if isinstance(index, torch.Tensor):
        ids = index.reshape(-1).cpu().numpy()
    else:
        ids = (index if isinstance(index, np.ndarray) else np.asarray(index, dtype=object)).reshape(-1)
    if ids.shape[0] != n_rows:
        raise ValueError(f"index has {ids.shape[0]} entries but rewards have {n_rows} rows")
    codes, _ = pd.factorize(ids, use_na_sentinel=False)
    return np.bincount(codes)[codes]


def _without_singletons(method: str, x: torch.Tensor, index, names: list[str], options: EstimatorOptions,
                        lengths) -> AdvantageResult:
    """``singletons="zero"``: the estimator on the rows of groups of two or more, advantage 0 elsewhere.

    A singleton group counts as a group that is active for no channel, so densities are divided by every group.
    DARA's weights depend only on density ratios, which the extra inactive groups leave unchanged; batch
    normalisation runs over the rows that have a group.
    """
    n_rows, n_channels = x.shape
    sizes = _group_sizes(index, n_rows)
    multi = sizes >= 2
    n_single = int((~multi).sum())
    if lengths is not None:
        lengths = torch.as_tensor(np.asarray(lengths) if not isinstance(lengths, torch.Tensor) else lengths).reshape(-1)
        if lengths.numel() != n_rows:
            raise ValueError(f"lengths has {lengths.numel()} entries but rewards have {n_rows} rows")
    advantages = torch.zeros(n_rows, dtype=torch.float32, device=x.device)
    loss_weights = torch.ones(n_rows, dtype=torch.float32, device=x.device)
    if multi.any():
        rows = torch.as_tensor(np.flatnonzero(multi), device=x.device)
        if isinstance(index, torch.Tensor):
            sub_index = index.reshape(-1)[torch.as_tensor(np.flatnonzero(multi), device=index.device)]
        else:
            sub_index = (index if isinstance(index, np.ndarray) else np.asarray(index, dtype=object)).reshape(-1)[multi]
        inner = compute_advantages(method, x[rows], sub_index, replace(options, singletons="raise"),
                                   channel_names=names, lengths=None if lengths is None else lengths[rows.cpu()])
        advantages[rows] = inner.advantages.to(x.device)
        loss_weights[rows] = inner.loss_weights.to(x.device)
        n_multi = int(inner.metrics["n_groups"])
        scale = n_multi / (n_multi + n_single)
        density = inner.density * scale
        weights = inner.weights
        metrics = dict(inner.metrics)
        for name, value in zip(names, density.tolist()):
            metrics[f"density/{name}"] = value
    else:  # nothing to compare: every channel inactive, unit weights, zero energies
        density = torch.zeros(n_channels, dtype=torch.float32)
        weights = torch.ones(n_channels, dtype=torch.float32)
        metrics = {}
        for quantity in ("energy_pos", "energy_neg", "energy_pos_calibrated", "energy_neg_calibrated",
                         "active_groups", "density"):
            metrics.update({f"{quantity}/{name}": 0.0 for name in names})
        metrics.update({f"weight/{name}": 1.0 for name in names})
        if get_method(method).drops_conflicts:
            metrics["gd2po_hard/conflict_ratio"] = 0.0
        n_multi = 0
    metrics["n_groups"] = float(n_multi + n_single)
    metrics["singleton_groups"] = float(n_single)
    return AdvantageResult(advantages=advantages, density=density, weights=weights, loss_weights=loss_weights,
                           metrics=metrics)


def _energies(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive and negative advantage energy per channel: sums of squared positive / negative parts of z."""
    return (z.clamp(min=0.0) ** 2).sum(dim=0), (z.clamp(max=0.0) ** 2).sum(dim=0)


def _validated_rewards(rewards) -> tuple[torch.Tensor, torch.device]:
    if isinstance(rewards, torch.Tensor):
        device = rewards.device
        x = rewards.detach().to(torch.float64)
    elif isinstance(rewards, np.ndarray):
        if rewards.dtype.kind not in "biuf":
            raise ValueError(f"rewards must be numeric, got numpy dtype {rewards.dtype}")
        device = torch.device("cpu")
        x = torch.as_tensor(rewards, dtype=torch.float64)
    else:
        raise ValueError(f"rewards must be a torch tensor or a numpy array, got {type(rewards).__name__}")
    if x.dim() != 2:
        raise ValueError(f"rewards must be 2-D (responses, channels), got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"rewards must hold at least one response and one channel, got shape {tuple(x.shape)}")
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        row, col = (int(v) for v in torch.nonzero(bad)[0])
        raise ValueError(f"rewards must be finite; row {row}, channel {col} is {x[row, col].item()}")
    return x, device


def _validated_lengths(lengths, n_rows: int, device) -> torch.Tensor:
    if lengths is None:
        raise ValueError("batch_norm='token' needs per-response token lengths (lengths=...)")
    values = torch.as_tensor(np.asarray(lengths) if not isinstance(lengths, torch.Tensor) else lengths)
    values = values.to(device=device, dtype=torch.float64).reshape(-1)
    if values.numel() != n_rows:
        raise ValueError(f"lengths has {values.numel()} entries but rewards have {n_rows} rows")
    if bool((values < 0).any()) or not bool(torch.isfinite(values).all()):
        raise ValueError("lengths must be finite token counts >= 0")
    return values


def _channel_names(channel_names, n_channels: int) -> list[str]:
    if channel_names is None:
        return [str(k) for k in range(n_channels)]
    names = [str(name) for name in channel_names]
    if len(names) != n_channels:
        raise ValueError(f"channel_names has {len(names)} names but rewards have {n_channels} channels")
    if len(set(names)) != len(names):
        raise ValueError(f"channel_names must be distinct, got {names}")
    return names
