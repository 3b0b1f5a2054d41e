"""dara.advantages against the loop reference, the invariants the paper's release checks (docs/methods.md) and bad input."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dara.advantages import METHODS, compute_advantages, exact_sqrt, shuffle_permutation
from dara.advantages_loop import loop_advantages

torch.set_num_threads(1)

STATIC = {"static_sym": [1.0, 3.0], "static_asym": [1.0, 5.0]}


def _kwargs(method, n_channels):
    if method in STATIC:
        return {"static_weights": ([1.0] * (n_channels - 1) + [5.0])[:n_channels]}
    return {}


def _batch(kind: str, n_groups: int, group_size: int, n_channels: int, rng: np.random.Generator):
    shape = (n_groups * group_size, n_channels)
    if kind == "random":
        return rng.normal(size=shape)
    if kind == "sparse":  # channel 0 dense, the others rarely vary inside a group
        r = (rng.random(shape) < 0.5).astype(float)
        r[:, 1:] = (rng.random((shape[0], n_channels - 1)) < 0.03).astype(float)
        return r
    if kind == "constant":
        return np.repeat(rng.normal(size=(n_groups, 1, n_channels)), group_size, axis=1).reshape(shape)
    if kind == "conflict":  # channels anti-correlated: every varying row is a conflict
        a = (rng.random((shape[0], 1)) < 0.5).astype(float)
        return np.concatenate([a, 1 - a] + [a] * (n_channels - 2), axis=1)
    if kind == "partial":  # ToolRL-like partial credit in [-3, 3]
        return np.round(rng.uniform(-3, 3, size=shape) * 2) / 2
    raise AssertionError(kind)


def _index(n_groups, group_size, shuffled, rng):
    ids = np.repeat(np.arange(n_groups), group_size)
    order = rng.permutation(len(ids)) if shuffled else np.arange(len(ids))
    return ids[order], order


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("group_size", [2, 4, 8, 16])
@pytest.mark.parametrize("kind", ["random", "sparse", "constant", "conflict", "partial"])
@pytest.mark.parametrize("shuffled", [False, True])
def test_matches_loop_reference(method, group_size, kind, shuffled):
    # A seed stable across processes (str hashes are randomised per process), distinct per case.
    rng = np.random.default_rng(zlib.crc32(f"{method}/{group_size}/{kind}/{shuffled}".encode()))
    n_groups, n_channels = 6, 3
    rewards = _batch(kind, n_groups, group_size, n_channels, rng)
    index, order = _index(n_groups, group_size, shuffled, rng)
    rewards = rewards[order]
    kwargs = _kwargs(method, n_channels)
    got = compute_advantages(method, rewards, index, **kwargs)
    want = loop_advantages(method, rewards, index, **kwargs)
    np.testing.assert_allclose(got.advantages.numpy(), want["advantages"], atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(got.density.numpy(), want["density"], atol=1e-7)
    np.testing.assert_allclose(got.weights.numpy(), want["weights"], rtol=1e-6)
    np.testing.assert_allclose(got.loss_weights.numpy(), want["loss_weights"], rtol=1e-6)


@pytest.mark.parametrize("method", ["gdpo", "dara_sym", "dara_asym", "gd2po_hard"])
def test_token_whitening_matches_reference(method):
    rng = np.random.default_rng(7)
    rewards = _batch("sparse", 5, 4, 2, rng)
    index = np.repeat(np.arange(5), 4)
    lengths = rng.integers(1, 9, size=20)
    got = compute_advantages(method, rewards, index, lengths=lengths, batch_norm="token")
    want = loop_advantages(method, rewards, index, lengths=lengths, batch_norm="token")
    np.testing.assert_allclose(got.advantages.numpy(), want["advantages"], atol=2e-5, rtol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    method=st.sampled_from(METHODS),
    n_groups=st.integers(1, 7),
    group_size=st.integers(2, 9),
    n_channels=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    binary=st.booleans(),
)
def test_property_random_shapes(method, n_groups, group_size, n_channels, seed, binary):
    rng = np.random.default_rng(seed)
    shape = (n_groups * group_size, n_channels)
    rewards = (rng.random(shape) < rng.random()).astype(float) if binary else rng.normal(size=shape)
    index = rng.permutation(np.repeat(np.arange(n_groups), group_size))
    kwargs = _kwargs(method, n_channels)
    got = compute_advantages(method, rewards, index, **kwargs)
    want = loop_advantages(method, rewards, index, **kwargs)
    assert got.advantages.shape == (shape[0],) and got.advantages.dtype == torch.float32
    assert torch.isfinite(got.advantages).all()
    np.testing.assert_allclose(got.advantages.numpy(), want["advantages"], atol=5e-5, rtol=1e-5)
    assert ((got.density >= 0) & (got.density <= 1)).all()
    assert (got.weights >= 1).all() and (got.weights <= 5).all()


# --- invariants the paper's release checks (check_advantages.py) ---------------------------------------------------------------------------


def test_w_max_one_is_exactly_gdpo():
    rng = np.random.default_rng(0)
    rewards = _batch("sparse", 16, 8, 2, rng)
    index = np.repeat(np.arange(16), 8)
    lengths = rng.integers(1, 50, size=128)
    gdpo = compute_advantages("gdpo", rewards, index, lengths=lengths, batch_norm="token")
    for method in ("dara_sym", "dara_asym"):
        dara = compute_advantages(method, rewards, index, w_max=1.0, lengths=lengths, batch_norm="token")
        assert torch.equal(dara.advantages, gdpo.advantages)
    # and the density rule really reweights when the cap allows it
    assert not torch.equal(compute_advantages("dara_sym", rewards, index).advantages,
                           compute_advantages("gdpo", rewards, index).advantages)


def test_static_unit_weights_sym_is_gdpo_and_static_asym_matches_dara_asym_weights():
    rng = np.random.default_rng(1)
    rewards = _batch("sparse", 16, 8, 2, rng)
    index = np.repeat(np.arange(16), 8)
    gdpo = compute_advantages("gdpo", rewards, index)
    assert torch.equal(compute_advantages("static_sym", rewards, index, static_weights=[1, 1]).advantages,
                       gdpo.advantages)
    dara = compute_advantages("dara_asym", rewards, index)
    static = compute_advantages("static_asym", rewards, index, static_weights=dara.weights.double().tolist())
    torch.testing.assert_close(static.advantages, dara.advantages)


def test_row_permutation_permutes_output():
    rng = np.random.default_rng(2)
    rewards = _batch("partial", 10, 4, 3, rng)
    index = np.array([f"uid-{i}" for i in np.repeat(np.arange(10), 4)], dtype=object)
    perm = rng.permutation(40)
    for method in METHODS:
        kwargs = _kwargs(method, 3)
        base = compute_advantages(method, rewards, index, **kwargs)
        permuted = compute_advantages(method, rewards[perm], index[perm], **kwargs)
        if method == "shuffled":  # by design a function of row order: another draw of the same advantages
            torch.testing.assert_close(permuted.advantages.sort().values, base.advantages.sort().values)
            continue
        torch.testing.assert_close(permuted.advantages, base.advantages[perm], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(permuted.loss_weights, base.loss_weights[perm])


def test_group_energy_is_g_minus_one_shrunk_by_eps():
    rng = np.random.default_rng(3)
    group_size, eps = 8, 1e-6
    values = rng.normal(scale=0.01, size=(group_size, 1))  # small sigma makes the eps shrinkage visible
    res = compute_advantages("gdpo", values, [0] * group_size, eps=eps)
    sigma = values[:, 0].std(ddof=1)
    expected = (group_size - 1) * (sigma / (sigma + eps)) ** 2
    energy = res.metrics["energy_pos/0"] + res.metrics["energy_neg/0"]
    assert energy == pytest.approx(expected, rel=1e-9)
    assert expected < group_size - 1  # the shrinkage is real


def test_channel_energy_is_batch_density_times_g_minus_one():
    group_size, n_groups = 8, 40
    rng = np.random.default_rng(4)
    rewards = np.zeros((n_groups * group_size, 2))
    rewards[:, 0] = rng.integers(0, 2, size=n_groups * group_size)
    rewards[::group_size, 0], rewards[1::group_size, 0] = 0, 1  # every group active on channel 0
    active = rng.choice(n_groups, size=10, replace=False)  # channel 1 active in a quarter of the groups
    for g in active:
        rewards[g * group_size, 1] = 1.0
    res = compute_advantages("dara_sym", rewards, np.repeat(np.arange(n_groups), group_size), channel_names=["dense", "sparse"])
    assert res.metrics["density/dense"] == 1.0 and res.metrics["density/sparse"] == 0.25
    for name, pi in (("dense", 1.0), ("sparse", 0.25)):
        energy = res.metrics[f"energy_pos/{name}"] + res.metrics[f"energy_neg/{name}"]
        assert energy == pytest.approx(n_groups * pi * (group_size - 1), rel=1e-4)
    assert res.metrics["weight/sparse"] == pytest.approx(2.0)
    # DARA-Sym equalises the calibrated energy (the cap does not bind here)
    calibrated = res.metrics["energy_pos_calibrated/sparse"] + res.metrics["energy_neg_calibrated/sparse"]
    assert calibrated == pytest.approx(n_groups * 1.0 * (group_size - 1), rel=1e-4)


def test_asym_keeps_negative_energy_and_scales_positive_by_w_squared():
    # toy of check_advantages.py: pi_len = 0.5 gives w_len = sqrt(2)
    rewards = np.array([[1, 1], [0, 0], [1, 0], [0, 0], [1, 0], [0, 0], [1, 1], [0, 0]], dtype=float)
    index = [0, 0, 1, 1, 2, 2, 3, 3]
    res = compute_advantages("dara_asym", rewards, index, channel_names=["correct", "length"])
    assert res.metrics["weight/length"] == pytest.approx(math.sqrt(2))
    assert res.metrics["energy_neg_calibrated/length"] == pytest.approx(res.metrics["energy_neg/length"])
    assert res.metrics["energy_pos_calibrated/length"] == pytest.approx(2 * res.metrics["energy_pos/length"])
    sym = compute_advantages("dara_sym", rewards, index)
    assert not torch.allclose(sym.advantages, res.advantages)


def test_dvao_toy_from_the_release():
    res = compute_advantages("dvao", np.array([[1, 0], [1, 0], [0, 0], [1, 1]], float), ["a", "a", "b", "b"])
    assert res.advantages.tolist() == [0.0, 0.0, -1.0, 1.0]


def test_gd2po_all_conflict_is_finite_zero_and_query_weight_is_kept_fraction():
    rewards = np.array([[1, 0], [0, 1]] * 4, dtype=float)
    res = compute_advantages("gd2po_hard", rewards, np.repeat(np.arange(4), 2))
    assert torch.equal(res.advantages, torch.zeros(8)) and torch.equal(res.loss_weights, torch.zeros(8))
    # one group: rows 0,1 conflict, rows 2,3 agree -> q = 0.5 for all four
    rewards = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], dtype=float)
    res = compute_advantages("gd2po_hard", rewards, [0, 0, 0, 0])
    assert res.loss_weights.tolist() == [0.5] * 4
    assert res.advantages[:2].tolist() == [0.0, 0.0] and res.advantages[2] > 0 > res.advantages[3]
    assert res.metrics["gd2po_hard/conflict_ratio"] == 0.5


def test_constant_groups_are_exact_zero_and_inactive_in_float32():
    rewards = torch.full((8, 2), 0.3, dtype=torch.float32)
    rewards[:, 1] = 2.1
    for method in ("grpo", "gdpo", "dara_sym", "dara_asym", "gd2po_hard", "dvao", "shuffled"):
        res = compute_advantages(method, torch.cat([rewards, rewards]), [0] * 8 + [1] * 8)
        assert torch.equal(res.advantages, torch.zeros(16)), method
        assert res.density.tolist() == [0.0, 0.0]
    # zero rewards everywhere: finite zeros, weights 1 (no channel is ever active)
    res = compute_advantages("dara_sym", np.zeros((6, 3)), [0, 0, 1, 1, 2, 2])
    assert torch.equal(res.advantages, torch.zeros(6)) and res.weights.tolist() == [1.0] * 3


def test_float32_input_matches_float64_computation():
    rng = np.random.default_rng(5)
    rewards64 = rng.normal(size=(256, 3)) * 3
    index = np.repeat(np.arange(32), 8)
    for method in METHODS:
        kwargs = _kwargs(method, 3)
        a32 = compute_advantages(method, torch.tensor(rewards64, dtype=torch.float32), index, **kwargs)
        want = loop_advantages(method, rewards64.astype(np.float32).astype(np.float64), index, **kwargs)
        np.testing.assert_allclose(a32.advantages.numpy(), want["advantages"], atol=1e-5)


def test_index_kinds_agree():
    rng = np.random.default_rng(6)
    rewards = _batch("sparse", 4, 4, 2, rng)
    codes = np.repeat(np.arange(4), 4)
    results = [
        compute_advantages("dara_asym", rewards, index).advantages
        for index in (
            codes.tolist(),
            [f"p{c}" for c in codes],
            np.array([f"p{c}" for c in codes], dtype=object),
            torch.tensor(codes),
            codes.astype(np.int32),
        )
    ]
    for other in results[1:]:
        assert torch.equal(other, results[0])


def test_one_is_not_the_string_one():
    res = compute_advantages("gdpo", np.array([[0.0], [1.0], [0.0], [1.0]]), [1, 1, "1", "1"])
    assert res.metrics["n_groups"] == 2.0


def test_device_and_dtype_of_outputs():
    res = compute_advantages("dara_sym", torch.rand(8, 2, dtype=torch.float64), [0] * 4 + [1] * 4)
    for tensor in (res.advantages, res.density, res.weights, res.loss_weights):
        assert tensor.dtype == torch.float32 and tensor.device.type == "cpu"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(rewards=np.array([[0.0], [np.nan]])), "finite; row 1"),
        (dict(rewards=np.array([[0.0], [np.inf]])), "finite"),
        (dict(index=[0, 1]), "group #0 has 1"),
        (dict(method="ppo"), "known methods: grpo, gdpo"),
        (dict(index=[0, 0, 0]), "index has 3 entries but rewards have 2 rows"),
        (dict(rewards=np.zeros((0, 2)), index=[]), "at least one response"),
        (dict(rewards=np.zeros(2)), "must be 2-D"),
        (dict(w_max=0.5), "w_max must be"),
        (dict(method="static_sym"), "needs static_weights"),
        (dict(method="static_sym", static_weights=[1, 1, 1]), "static_weights has 3 values"),
        (dict(method="static_asym", static_weights=[0.5]), "each >= 1"),
        (dict(static_weights=[1.0]), "static_weights is only read by static_sym, static_asym, not by dara_sym"),
        (dict(batch_norm="token"), "needs per-response token lengths"),
        (dict(batch_norm="token", lengths=[3]), "lengths has 1 entries"),
        (dict(lengths=[3, 3]), "only used by batch_norm='token'"),
        (dict(batch_norm="batch"), "unknown batch_norm"),
        (dict(index=[0.0, 0.0]), "floating-point"),
        (dict(rewards=[[0.0], [1.0]]), "torch tensor or a numpy array"),
        (dict(channel_names=["a", "b"]), "channel_names has 2"),
        (dict(method="dvao", base_weights=[0.0]), "base_weights must be"),
    ],
)
def test_bad_input_raises_naming_the_problem(kwargs, message):
    call = dict(method="dara_sym", rewards=np.array([[0.0], [1.0]]), index=[0, 0]) | kwargs
    method, rewards, index = call.pop("method"), call.pop("rewards"), call.pop("index")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compute_advantages(method, rewards, index, **call)


def test_contiguous_blocks_with_unsorted_ids_use_the_right_group_stats():
    # blocks are contiguous (fast path) but the ids are not in sorted order
    rewards = np.array([[0.0, 1.0], [1.0, 0.0], [5.0, 5.0], [7.0, 5.0]])
    for index in ([1, 1, 0, 0], torch.tensor([9, 9, 3, 3]), ["b", "b", "a", "a"]):
        for method in METHODS:
            kwargs = _kwargs(method, 2)
            got = compute_advantages(method, rewards, index, **kwargs)
            want = loop_advantages(method, rewards, list(np.asarray(index)), **kwargs)
            np.testing.assert_allclose(got.advantages.numpy(), want["advantages"], atol=2e-5)


def test_an_id_in_two_separate_blocks_is_one_group():
    rewards = np.array([[0.0], [1.0], [2.0], [2.0], [4.0], [5.0]])
    got = compute_advantages("gdpo", rewards, ["a", "a", "b", "b", "a", "a"], batch_norm="none")
    assert got.metrics["n_groups"] == 2.0 and got.metrics["active_groups/0"] == 1.0
    want = loop_advantages("gdpo", rewards, ["a", "a", "b", "b", "a", "a"], batch_norm="none")
    np.testing.assert_allclose(got.advantages.numpy(), want["advantages"], atol=1e-6)


# --- the shuffled control: GDPO's advantages, permuted by a pure function of the batch -----------------------------


@pytest.mark.parametrize("batch_norm", ["response", "token", "none"])
def test_shuffled_is_a_permutation_of_gdpo_with_gdpos_diagnostics(batch_norm):
    rng = np.random.default_rng(8)
    rewards = _batch("partial", 12, 4, 3, rng)
    index, order = _index(12, 4, True, rng)
    rewards = rewards[order]
    options = dict(batch_norm=batch_norm, channel_names=["a", "b", "c"])
    if batch_norm == "token":
        options["lengths"] = rng.integers(1, 30, size=48)
    gdpo = compute_advantages("gdpo", rewards, index, **options)
    shuffled = compute_advantages("shuffled", rewards, index, **options)
    assert torch.equal(shuffled.advantages.sort().values, gdpo.advantages.sort().values)  # the same multiset
    assert torch.equal(shuffled.advantages, gdpo.advantages[shuffle_permutation(rewards)])
    assert not torch.equal(shuffled.advantages, gdpo.advantages)
    assert torch.equal(shuffled.loss_weights, torch.ones(48))
    for field in ("density", "weights"):
        assert torch.equal(getattr(shuffled, field), getattr(gdpo, field))
    assert shuffled.metrics == gdpo.metrics


def test_shuffled_is_deterministic_and_its_permutation_follows_the_batch():
    rng = np.random.default_rng(9)
    rewards = _batch("random", 16, 8, 2, rng)
    index = np.repeat(np.arange(16), 8)
    first = compute_advantages("shuffled", rewards, index)
    again = compute_advantages("shuffled", rewards.copy(), [f"u{i}" for i in index])  # ids do not seed it
    assert torch.equal(first.advantages, again.advantages)
    assert torch.equal(shuffle_permutation(rewards), shuffle_permutation(torch.tensor(rewards)))
    # -0.0 is 0.0; any other change of the batch (one reward, the row count) draws another permutation
    zeros = np.zeros((128, 2))
    assert torch.equal(shuffle_permutation(zeros), shuffle_permutation(-zeros))
    nudged = rewards.copy()
    nudged[5, 1] += 1e-12
    draws = {tuple(shuffle_permutation(batch).tolist()) for batch in (rewards, nudged, _batch("random", 16, 8, 2, rng))}
    assert len(draws) == 3
    # dropping a group draws afresh: not the full batch's permutation restricted to the rows that are left
    restricted = [i for i in shuffle_permutation(rewards).tolist() if i < len(rewards) - 8]
    assert shuffle_permutation(rewards[:-8]).tolist() != restricted


def test_shuffled_advantages_carry_no_information_about_the_own_rewards():
    rng = np.random.default_rng(10)
    index = np.repeat(np.arange(8), 8)
    correlations = {"gdpo": [], "shuffled": []}
    for _ in range(200):
        rewards = np.stack([rng.integers(0, 2, 64), rng.normal(size=64)], axis=1).astype(float)
        for method, values in correlations.items():
            advantages = compute_advantages(method, rewards, index).advantages.double().numpy()
            values.append(np.corrcoef(advantages, rewards[:, 0])[0, 1])
    # one batch's correlation has a spread of about 1/sqrt(64); over 200 batches the mean's is below 0.01
    assert abs(np.mean(correlations["shuffled"])) < 0.04
    assert np.mean(correlations["gdpo"]) > 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exact_sqrt_is_correctly_rounded_where_torch_sqrt_is_not(dtype):
    """The estimators' square root: correctly rounded (the float64 result rounded once, for float32), with the input's
    dtype and shape, strided and 0-d inputs included; ATen's CPU sqrt is not correctly rounded on these values (MKL's
    vector math), which is why the estimators do not call it (tests/test_kernels.py: it also depends on the CPU)."""
    values = torch.from_numpy(np.random.default_rng(0).random(20_000) * 10).to(dtype)
    correct = np.sqrt(values.double().numpy()).astype(values.numpy().dtype)
    root = exact_sqrt(values)
    assert root.dtype == dtype and root.shape == values.shape
    assert np.array_equal(root.numpy(), correct)
    assert not np.array_equal(torch.sqrt(values).numpy(), correct)
    assert np.array_equal(exact_sqrt(values[::3]).numpy(), correct[::3])
    scalar = exact_sqrt(torch.tensor(2.0, dtype=dtype))
    assert scalar.shape == () and scalar.item() == float(correct.dtype.type(math.sqrt(2.0)))
