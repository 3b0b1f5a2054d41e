"""The warm start: Hugging Face files, a step-0 report, and the sparse reward left rare but the layout learned."""

import json
import re

import pytest
import torch

from dara.tiny.policy import generate, load_policy, train_tokenizer
from dara.tiny.warmstart import warm_start
from experiment_defaults import small_warm_start

torch.set_num_threads(1)


def test_warm_start_learns_the_layout_but_rarely_the_tag(tmp_path):
    report = warm_start("act_critic", {"tag_rate": 0.1}, tmp_path, **small_warm_start(
        corpus_items=300, sft_steps=150, sft_batch_size=32, probe_prompts=16))
    saved = json.loads((tmp_path / "warmstart.json").read_text())
    assert saved == json.loads(json.dumps(report))
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (tmp_path / name).is_file()
    step0 = report["step0"]
    assert set(step0) >= {"reward/accuracy", "reward/admissible", "reward/format", "density/format"}
    # The format penalty is -0.5 without the tag: a mean of -0.5 * (1 - tag rate). Demonstrations tag 10 %.
    tag_rate = 1 + step0["reward/format"] / 0.5
    assert tag_rate <= 0.35
    tokenizer, model = load_policy(tmp_path)
    texts, _ = generate(model, tokenizer, ["You are in the hall. You see: mug, key. Goal: get the key. The key is "
                                           "in the hall.\nAction 1: take key\nAction 2: go to office\nAssistant:\n"] * 32,
                        seed=0, max_new_tokens=20)
    # ... yet the policy answers in the demonstrations' layout (it learned the task, not noise).
    assert sum(("Action:" in t) or ("<action>" in t) for t in texts) >= 16


def test_tokenizer_round_trips_the_task_text():
    texts = ['<think>plan</think>\n<tool_call>\n{"name": "x", "parameters": {}}\n</tool_call>', "2 + 3 = 5. \\boxed{5}"]
    tokenizer = train_tokenizer(texts * 20, 300)
    for text in texts + ["unseen wörds\t and  spaces"]:
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_git_revision_outside_a_checkout_says_unknown(monkeypatch):
    from dara import provenance

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert provenance.revision_text() == "revision: unknown\ndirty: unknown\n"


def test_read_revision_returns_what_write_run_provenance_wrote(tmp_path):
    from dara import provenance

    provenance.write_run_provenance(tmp_path, {"seed": 0})
    assert provenance.read_revision(tmp_path) == provenance.git_revision()["revision"]
    (tmp_path / "git_revision.txt").write_text("dirty: false\n")
    with pytest.raises(ValueError, match=re.escape("does not hold 'revision: <sha>' and 'dirty: true|false|unknown' lines")):
        provenance.read_revision(tmp_path)


def test_read_revision_record_is_revision_texts_inverse(tmp_path, monkeypatch):
    """Both lines come back as git_revision gave them, dirty included (the emulated check refuses edited jobs by it);
    a file without the dirty line is refused by name."""
    from dara import provenance

    for found in ({"revision": "a" * 40, "dirty": True}, {"revision": "b" * 40, "dirty": False},
                  {"revision": "unknown", "dirty": None}):
        monkeypatch.setattr(provenance, "git_revision", lambda found=found: found)
        (tmp_path / "git_revision.txt").write_text(provenance.revision_text())
        assert provenance.read_revision_record(tmp_path) == found
    (tmp_path / "git_revision.txt").write_text("revision: " + "a" * 40 + "\n")
    with pytest.raises(ValueError, match="git_revision.txt does not hold"):
        provenance.read_revision_record(tmp_path)
    (tmp_path / "git_revision.txt").write_text("revision: " + "a" * 40 + "\ndirty: maybe\n")
    with pytest.raises(ValueError, match="says 'dirty: maybe', not one of true, false, unknown"):
        provenance.read_revision_record(tmp_path)


def test_git_revision_inside_the_checkout_names_the_commit():
    from dara import provenance

    found = provenance.git_revision()
    assert len(found["revision"]) == 40 and int(found["revision"], 16) >= 0 and found["dirty"] in (True, False)


def test_the_sft_loss_scores_answers_only_and_equals_the_full_computation():
    import numpy as np

    from dara.tasks import get_task
    from dara.tiny.policy import build_model, token_logprobs, train_tokenizer
    from dara.tiny.warmstart import sft_loss, supervised_batch

    task = get_task("toolcall")
    tokenizer = train_tokenizer(task.corpus(100), vocab_size=300)
    torch.manual_seed(0)
    model = build_model(len(tokenizer), hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    rng = np.random.default_rng(0)
    ids, attention, loss_mask = supervised_batch(tokenizer, task, task.items("train", 6), rng)
    assert loss_mask[:, 0].sum() == 0 and loss_mask.sum() > 0  # prompts come first: there is something to skip
    full, _ = token_logprobs(model, ids, attention)
    expected = -(full * loss_mask).sum() / loss_mask.sum()
    assert torch.allclose(sft_loss(model, ids, attention, loss_mask), expected, atol=1e-6)


def test_a_supervised_batch_from_pretokenized_prompts_equals_tokenizing_each_text():
    import numpy as np

    from dara.tasks import get_task
    from dara.tiny.policy import EOS, train_tokenizer
    from dara.tiny.warmstart import supervised_batch

    task = get_task("math_length")
    tokenizer = train_tokenizer(task.corpus(100), vocab_size=300)
    items = task.items("train", 5)
    prompt_ids = {item["prompt"]: tokenizer(item["prompt"], add_special_tokens=False)["input_ids"] for item in items}
    cached = supervised_batch(tokenizer, task, items, np.random.default_rng(3), prompt_ids)
    tokenized = supervised_batch(tokenizer, task, items, np.random.default_rng(3))
    for a, b in zip(cached, tokenized):
        assert torch.equal(a, b)
    # Row by row: the prompt, then the demonstration drawn with the same generator, right-aligned.
    rng = np.random.default_rng(3)
    ids, attention, _ = cached
    for row, item in enumerate(items):
        expected = prompt_ids[item["prompt"]] + tokenizer(task.demonstration(item, rng) + EOS,
                                                          add_special_tokens=False)["input_ids"]
        assert ids[row, attention[row].bool()].tolist() == expected
    with pytest.raises(KeyError):
        supervised_batch(tokenizer, task, task.items("train", 7)[5:], np.random.default_rng(3), prompt_ids)


@pytest.mark.parametrize("task_name", ["toolcall", "toolcall3", "math_length", "act_critic"])
def test_a_saved_policy_reads_the_same_ids_through_autotokenizer(task_name, tmp_path):
    """verl (and most training code) load tokenizers with AutoTokenizer, which rebuilds a qwen2 model's tokenizer as
    Qwen2Tokenizer; the tiny policy must tokenize every prompt and answer of its task the same way there."""
    import numpy as np
    from transformers import AutoTokenizer

    from dara.tasks import get_task
    from dara.tiny.policy import build_model, save_policy

    task = get_task(task_name)
    tokenizer = train_tokenizer(task.corpus(200), vocab_size=400)
    model = build_model(len(tokenizer), hidden_size=16, layers=1, heads=2, kv_heads=1, intermediate_size=32,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    save_policy(model, tokenizer, tmp_path / "policy")
    ours, _ = load_policy(tmp_path / "policy")
    auto = AutoTokenizer.from_pretrained(tmp_path / "policy")
    rng = np.random.default_rng(0)
    texts = [text for item in task.items("heldout", 20) for text in (item["prompt"], task.demonstration(item, rng))]
    texts.append("Problem: 8 + 6 - 5\nAssistant:\n  12,345 café\tend")  # digits, spaces, non-ASCII, tabs
    assert [auto(t, add_special_tokens=False)["input_ids"] for t in texts] == \
        [ours(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert (auto.eos_token_id, auto.pad_token_id) == (ours.eos_token_id, ours.pad_token_id)
    assert all(ours.decode(ours(t, add_special_tokens=False)["input_ids"]) == t for t in texts)
