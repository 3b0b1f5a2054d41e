"""`make profile-trainer`'s pieces at toy sizes: the FLOP and byte counts against hand counts, the phase split, and
the whole profile of a tiny policy's RL and supervised steps rendered to Markdown. No timing is asserted."""

import math

import pytest
import torch

from benchmarks import profile_trainer as pt
from dara.experiments import default_settings
from dara.runs import Run
from dara.tiny.policy import build_model
from dara.tiny.warmstart import warm_start
from experiment_defaults import default_warm_start

torch.set_num_threads(1)
ACT_OPTIONS = {"tag_rate": 0.5}
TOY_MODEL = {"hidden_size": 32, "layers": 1, "heads": 2, "kv_heads": 1, "intermediate_size": 64, "max_positions": 256}


def test_a_linear_layer_counts_its_hand_computed_flops_and_bytes():
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(5, 16)
    with pt.counting() as (flops, moved):
        layer(x)
    assert flops.get_total_flops() == 2 * 5 * 16 * 8
    # addmm reads the bias, the input and the (transposed, a view: not counted) weight, and writes the output
    assert moved.total == 4 * (8 + 5 * 16 + 16 * 8 + 5 * 8)
    # under inference mode linear reaches the counter undecomposed (as the sampler's layers do): still counted
    with torch.inference_mode(), pt.counting() as (flops, _):
        layer(x)
    assert flops.get_total_flops() == 2 * 5 * 16 * 8


def test_an_openblas_layer_counts_its_products_forward_and_backward():
    from dara.tiny.gemm import OpenBlasLinear

    layer = OpenBlasLinear(16, 8, bias=False)
    x = torch.randn(5, 16, requires_grad=True)
    with pt.counting() as (flops, moved):
        layer(x).sum().backward()
    products = flops.get_flop_counts()["Global"]
    # the output, the input's gradient and the weight's: 2 x 5 x 16 x 8 FLOPs each, none seen by the ATen counter
    assert products[pt.OPENBLAS_OP] == 3 * 2 * 5 * 16 * 8
    assert pt.flop_counts_by_op(flops)[pt.OPENBLAS_OP] == 3 * 2 * 5 * 16 * 8
    assert moved.total >= 4 * 3 * (5 * 16 + 16 * 8 + 5 * 8)


def test_openblas_attention_counts_each_stacked_product():
    """Attention's products are stacked (one per row and key/value head): each counts 2 m k n."""
    from dara.tiny.gemm import openblas_attention

    batch, heads, kv_heads, q_length, k_length, dim = 3, 4, 2, 5, 7, 16
    query = torch.randn(batch, heads, q_length, dim)
    key, value = torch.randn(batch, kv_heads, k_length, dim), torch.randn(batch, kv_heads, k_length, dim)
    with torch.no_grad(), pt.counting() as (flops, _):
        openblas_attention(query, key, value, None, 0.25)
    # scores (heads x Lq) x D x Lk and output (heads x Lq) x Lk x D, per row: 2 x 2 x B x H x Lq x Lk x D
    assert flops.get_flop_counts()["Global"][pt.OPENBLAS_OP] == 2 * 2 * batch * heads * q_length * k_length * dim


def test_counting_runs_each_op_whole_so_the_numbers_are_those_of_an_uncounted_pass():
    # FlopCounterMode on its own runs silu_backward through its decomposition, which rounds differently
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 192), torch.nn.SiLU(), torch.nn.Linear(192, 64))
    x = torch.randn(256, 64)

    def gradient():
        mlp.zero_grad(set_to_none=True)
        mlp(x).square().sum().backward()
        return mlp[0].weight.grad.clone()

    plain = gradient()
    with pt.counting() as (flops, _):
        counted = gradient()
    assert torch.equal(counted, plain)
    assert "aten.silu_backward" in flops.run_whole
    # two forward products; backward, the second layer's input and weight gradients, the first layer's weight
    # gradient only (its input needs none)
    assert flops.get_total_flops() == 5 * 2 * 256 * 64 * 192


def test_the_gemm_peak_is_the_highest_rate_measured():
    limits = {"squares": [{"case": "square, 512^3", "gflops": 30.0}, {"case": "square, 1024^3", "gflops": 38.0}]}
    policy = [{"case": "update minibatch, LM head", "gflops": 41.0}]
    peak = pt.set_gemm_peak(limits, policy)
    assert (peak["gemm_gflops"], peak["gemm_case"]) == (41.0, "update minibatch, LM head")
    assert pt.set_gemm_peak(limits, [])["gemm_case"] == "square, 1024^3"


def test_views_move_nothing_and_an_in_place_op_reads_and_writes_its_operand():
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    with pt.OpBytes() as moved:
        a.view(6, 4).t()
        a.unsqueeze(0).expand(3, 4, 6)
    assert moved.total == 0
    with pt.OpBytes() as moved:
        a.add_(b)
    assert moved.total == 3 * a.numel() * 4  # a and b read, a written


def test_the_model_arithmetic_by_hand_equals_the_counted_flops_of_a_forward():
    model = build_model(300, hidden_size=32, layers=2, heads=2, kv_heads=1, intermediate_size=64)
    arithmetic = pt.model_arithmetic(model)
    # q and o are hidden x hidden, k and v hidden x (kv_heads x head_dim), the MLP three hidden x intermediate
    assert arithmetic["layer_weights"] == 2 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 64)
    rows, tokens = 3, 10
    with torch.no_grad(), pt.counting() as (flops, _):
        model(input_ids=torch.randint(0, 300, (rows, tokens)))
    # every position is scored by the LM head; attention (SDPA's CPU kernel, counted by the benchmark's formula)
    # computes the full tokens x tokens products
    per_token = arithmetic["layer_flops"] + arithmetic["head_flops"] + tokens * \
        arithmetic["attention_flops_per_context_token"]
    by_op = pt.flop_counts_by_op(flops)
    assert by_op["aten._scaled_dot_product_flash_attention_for_cpu"] == rows * tokens * tokens * \
        arithmetic["attention_flops_per_context_token"]
    # the one product outside the hand count: the rotary table, head_dim / 2 frequencies times the positions
    rotary = 2 * (32 // 2 // 2) * tokens
    assert by_op["aten.bmm"] == rotary
    assert flops.get_total_flops() == rows * tokens * per_token + rotary


def test_the_meter_skips_warmup_counts_a_nested_phase_as_the_outer_one_and_refuses_missing_steps():
    meter = pt.PhaseMeter("count", ["outer", "inner"], warmup=1, steps=2)
    matrix = torch.randn(8, 8)
    with meter.measured():
        for _ in range(3):
            meter.begin_step()
            with meter.phase("outer"):
                with meter.phase("inner"):
                    matrix @ matrix
            matrix @ matrix  # outside every phase: other
            meter.end_step()
    assert len(meter.records) == 2
    for record in meter.records:
        assert record["outer"]["flops"] == 2 * 8 ** 3 and record["inner"]["flops"] == 0
        assert record["other"]["flops"] == 2 * 8 ** 3 and record["step"]["flops"] == 4 * 8 ** 3
    short = pt.PhaseMeter("time", ["outer"], warmup=0, steps=2)
    with pytest.raises(RuntimeError, match="recorded 1 steps, not 2"):
        with short.measured():
            short.begin_step()
            short.end_step()


def test_verdicts_follow_the_stated_rule():
    assert pt.verdict(1.5, 0.1) == "arithmetic-bound"
    assert pt.verdict(40.0, 0.3) == "overhead-bound"
    assert pt.verdict(40.0, 0.8) == "kernel-bound"
    assert pt.verdict(math.inf, 0.0) == "no work counted"


@pytest.fixture(scope="module")
def toy_profile(tmp_path_factory):
    """The whole profile of a small, briefly trained act_critic policy: one RL step and one supervised step."""
    policy = tmp_path_factory.mktemp("policy") / "act_critic"
    settings = {**default_warm_start(), **dict(
        vocab_size=400, corpus_items=200, sft_steps=20, sft_learning_rate=0.01, sft_batch_size=8, probe_prompts=2,
        probe_group_size=2, max_new_tokens=12, model=TOY_MODEL)}
    warm_start("act_critic", ACT_OPTIONS, policy, **settings)
    run_settings = dict(default_settings(), task_options=ACT_OPTIONS, responses_per_step=8, max_new_tokens=12,
                        prompt_pool=50, eval_every=5, state_every=5, kl_coef=0.1)
    run = Run(scale="tiny", backend="tiny", task="act_critic", method="dara_sym", group_size=4, seed=0,
              settings=run_settings, results=str(tmp_path_factory.mktemp("unused")))
    warm = {"task_name": "act_critic", "task_options": ACT_OPTIONS, "sft_batch_size": 4, "corpus_items": 50,
            "seed": 0, "sft_learning_rate": 0.001}
    result = pt.profile(run, policy, warm, warmup=0, steps=1, sft_warmup=0, sft_steps=1, gemm_sizes=[32, 64],
                        copy_megabytes=1, repeats=2)
    return {**result, "date": "2000-01-01", "revision": "0000000", "command": "python -m benchmarks.profile_trainer"}


@pytest.mark.parametrize("step, phases", [("rl", pt.RL_PHASES), ("sft", pt.SFT_PHASES)])
def test_a_toy_profile_has_work_in_its_phases_and_shares_that_add_up(toy_profile, step, phases):
    summary = toy_profile[step]
    rows = summary["phases"]
    assert set(rows) == {*phases, "step"}
    assert summary["same_steps"], "the timed, counted and profiled passes trained the same step"
    assert rows["step"]["flops"] > 0 and rows["step"]["bytes"] > 0
    for phase in phases:
        assert 0 <= rows[phase]["aten_share"] <= 1
        assert rows[phase]["seconds"] >= 0
    assert rows["update" if step == "rl" else "backward"]["flops"] > 0
    for key in ("seconds", "wall_seconds", "flops", "bytes", "profiled_seconds"):
        assert sum(rows[p][key] for p in phases) == pytest.approx(rows["step"][key], rel=1e-6)
    assert sum(rows[p]["seconds"] / rows["step"]["seconds"] for p in phases) == pytest.approx(1)
    assert 0 < rows["step"]["aten_share"] <= 1
    assert len(summary["top_ops"]) == 10 and all(0 <= op["share"] <= 1 for op in summary["top_ops"])
    assert sum(summary["flops_by_op"].values()) == pytest.approx(rows["step"]["flops"])


def test_a_toy_profile_knows_its_limits_and_renders_every_phase(toy_profile):
    assert toy_profile["peak"]["gemm_gflops"] > 0 and toy_profile["peak"]["copy_gbps"] > 0
    assert all(g["gflops"] > 0 for g in toy_profile["policy_gemms"])
    rl = toy_profile["rl"]["phases"]
    assert rl["logprobs"]["flops"] > 0, "a KL coefficient above 0 runs a reference forward outside the update"
    assert rl["sampling"]["flops"] > 0, "the sampler's products, under inference mode, are counted"
    text = pt.render(toy_profile)
    for name in [*pt.RL_PHASES.values(), *pt.SFT_PHASES.values()]:
        assert text.count(f"| {name} |") == 1 and f"- {name}: " in text
    assert toy_profile["machine"]["cpu"]["model_name"] in text
    assert "NOT training the same steps" not in text


def test_make_profile_trainer_runs_under_the_kernel_pin_and_writes_the_view():
    makefile = (pt.ROOT / "Makefile").read_text()
    recipe = makefile.split("\nprofile-trainer:", 1)[1].split("\n\n", 1)[0]
    assert "-m dara.kernels env" in recipe
    assert "-m benchmarks.profile_trainer --out docs/results/profile_trainer.md" in recipe


def test_every_phase_has_candidate_levers_for_every_verdict():
    for step, phases in (("rl", pt.RL_PHASES), ("sft", pt.SFT_PHASES)):
        for phase in phases:
            assert pt.lever(step, phase, "arithmetic-bound") == pt.ARITHMETIC_LEVER
            for found in ("overhead-bound", "kernel-bound"):
                assert pt.lever(step, phase, found), (step, phase, found)
    assert pt.lever("rl", "sampling", "overhead-bound") != pt.lever("rl", "sampling", "kernel-bound")
