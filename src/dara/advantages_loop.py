"""A plain per-group loop implementation of every estimator, in float64 NumPy.

Written independently of the vectorised :mod:`dara.advantages` to check it: tests compare the two, and the
benchmark times the vectorised code against this loop. Read it as the formulas spelled out; do not use it to train.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

SIGN_EPS = 1e-8
DVAO_DENOM_EPS = 1e-8
WHITEN_EPS = 1e-8


def _groups(index) -> dict:
    groups: dict = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    return groups


def _zscore(values: list[float], eps: float) -> list[float]:
    n = len(values)
    if max(values) == min(values):
        return [0.0] * n
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [(v - mean) / (std + eps) for v in values]


def _normalise(scores: np.ndarray, keep: np.ndarray, eps: float, lengths) -> np.ndarray:
    out = np.zeros_like(scores)
    rows = [i for i in range(len(scores)) if keep[i]]
    if lengths is None:
        if len(rows) <= 1:
            return out
        kept = [scores[i] for i in rows]
        mean = sum(kept) / len(kept)
        std = math.sqrt(sum((s - mean) ** 2 for s in kept) / (len(kept) - 1))
        for i in rows:
            out[i] = (scores[i] - mean) / (std + eps)
        return out
    # token-weighted: each response's scalar repeated over its tokens
    tokens = [scores[i] for i in rows for _ in range(int(lengths[i]))]
    if len(tokens) <= 1:
        return out
    mean = sum(tokens) / len(tokens)
    var = sum((t - mean) ** 2 for t in tokens) / (len(tokens) - 1)
    for i in rows:
        out[i] = (scores[i] - mean) / math.sqrt(var + WHITEN_EPS)
    return out


def _shuffled_order(r: np.ndarray) -> list[int]:
    """The shuffled control's permutation, from its rule (not from dara.advantages): sha256 over a domain tag, the
    shape as two little-endian int64 and the rewards as little-endian float64 row by row (-0.0 as 0.0); its first 8
    bytes, little-endian, top bit dropped, seed torch.randperm (the one shared piece: torch's generator)."""
    import torch

    n, k = r.shape
    payload = bytearray(b"dara/shuffled/v1")
    payload += n.to_bytes(8, "little", signed=True) + k.to_bytes(8, "little", signed=True)
    for i in range(n):
        for c in range(k):
            payload += np.float64(r[i, c] + 0.0).astype("<f8").tobytes()
    seed = int.from_bytes(hashlib.sha256(bytes(payload)).digest()[:8], "little") >> 1
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


# The methods written out below, named here rather than read from dara.methods (this module shares nothing with
# the estimators); tests/test_extending.py checks that it is the method table's list.
LOOP_METHODS = ("grpo", "gdpo", "dvao", "gd2po_hard", "static_sym", "static_asym", "shuffled", "dara_sym", "dara_asym")


def loop_advantages(
    method: str,
    rewards,
    index,
    *,
    w_max: float = 5.0,
    tau: float = 1e-8,
    eps: float = 1e-6,
    static_weights=None,
    base_weights=None,
    lengths=None,
    batch_norm: str = "response",
    sign_eps: float = SIGN_EPS,
    dvao_eps: float = DVAO_DENOM_EPS,
) -> dict:
    """Loop version of :func:`dara.advantages.compute_advantages`; returns a dict of NumPy arrays."""
    if method not in LOOP_METHODS:  # a method without its loop here must not fall through to GDPO's
        raise ValueError(f"no loop reference for method {method!r}; it has {', '.join(LOOP_METHODS)}")
    r = np.asarray(rewards, dtype=np.float64)
    n, k = r.shape
    groups = _groups(list(index))
    z = np.zeros((n, k))
    active = np.zeros(k)
    for rows in groups.values():
        for c in range(k):
            zs = _zscore([r[i, c] for i in rows], eps)
            for i, value in zip(rows, zs):
                z[i, c] = value
            if sum(abs(v) for v in zs) > tau:
                active[c] += 1
    density = active / len(groups)
    weights = np.ones(k)
    loss_weights = np.ones(n)

    if method == "grpo":
        adv = np.zeros(n)
        for rows in groups.values():
            for i, value in zip(rows, _zscore([r[i].sum() for i in rows], eps)):
                adv[i] = value
        return dict(advantages=adv, density=density, weights=weights, loss_weights=loss_weights)

    if method == "dvao":
        b = np.full(k, 1.0 / k) if base_weights is None else np.asarray(base_weights, dtype=float)
        adv = np.zeros(n)
        for rows in groups.values():
            mu = [sum(r[i, c] for i in rows) / len(rows) for c in range(k)]
            sigma = [math.sqrt(sum((r[i, c] - mu[c]) ** 2 for i in rows) / len(rows)) for c in range(k)]
            sigma = [0.0 if max(r[i, c] for i in rows) == min(r[i, c] for i in rows) else s for c, s in enumerate(sigma)]
            denominator = sum(b[c] * sigma[c] for c in range(k))
            for i in rows:
                if denominator > dvao_eps:
                    adv[i] = sum(b[c] * (r[i, c] - mu[c]) for c in range(k) if sigma[c] > 0) / denominator
        return dict(advantages=adv, density=density, weights=weights, loss_weights=loss_weights)

    if method == "shuffled":  # GDPO's advantages, then response i takes the one of row order[i]
        gdpo = loop_advantages("gdpo", r, index, tau=tau, eps=eps, lengths=lengths, batch_norm=batch_norm)
        order = _shuffled_order(r)
        adv = np.array([gdpo["advantages"][order[i]] for i in range(n)])
        return dict(advantages=adv, density=density, weights=weights, loss_weights=loss_weights)

    if method in ("dara_sym", "dara_asym"):
        reference = density.max()
        weights = np.array([min(w_max, math.sqrt(reference / p)) if p > 0 else 1.0 for p in density])
    elif method in ("static_sym", "static_asym"):
        weights = np.asarray(static_weights, dtype=float)
    asymmetric = method in ("dara_asym", "static_asym")
    scores = np.zeros(n)
    for i in range(n):
        for c in range(k):
            if asymmetric:
                scores[i] += z[i, c] + (weights[c] - 1.0) * max(z[i, c], 0.0)
            else:
                scores[i] += weights[c] * z[i, c]
    keep = np.ones(n, dtype=bool)
    if method == "gd2po_hard":
        for i in range(n):
            keep[i] = not (any(z[i, c] > sign_eps for c in range(k)) and any(z[i, c] < -sign_eps for c in range(k)))
        for rows in groups.values():
            fraction = sum(keep[i] for i in rows) / len(rows)
            for i in rows:
                loss_weights[i] = fraction
        scores = scores * keep
    if batch_norm == "none":
        adv = scores
    else:
        adv = _normalise(scores, keep, eps, lengths if batch_norm == "token" else None)
    return dict(advantages=adv, density=density, weights=weights, loss_weights=loss_weights)
