"""The tiny policy: tokenizer training, model construction, loading, sampling and token log-probabilities.

Other code (the evaluation stage) calls ``load_policy`` and ``generate``:

    tokenizer, model = load_policy("results/tiny/runs/toolcall/dara_sym/G8/seed0/checkpoints/step20")
    texts, n_tokens = generate(model, tokenizer, prompts, seed=0, max_new_tokens=48, temperature=0.6, top_p=0.95)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import DynamicCache, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

# DEVICES and torch_device live in dara.devices (a light module the verl launcher imports too); re-exported here
# for the callers that load a policy anyway (benchmarks/gpu_check.py, the trainers' command line).
from dara.devices import DEVICES, torch_device  # noqa: F401
from dara.io import replace_dir_atomically
from dara.tiny.decoder import LeanDecoder
from dara.tiny.gemm import ATTENTION_KEY, MATMUL_KEY, checked_attention, checked_matmul, route_products

PAD, EOS = "<pad>", "<eos>"
# The sampler drops rows that have ended from its decoder once they are this share of the decoder's rows (see rollout).
ENDED_SHARE_TO_DROP = 0.25


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts`` with Qwen2's normaliser and pre-tokenizer (any text
    round-trips).

    The pipeline must be Qwen2's own: ``AutoTokenizer`` (what verl and most training code call) loads a saved policy,
    whose ``config.json`` says ``qwen2``, as ``Qwen2Tokenizer``, which keeps the saved vocabulary and merges but
    rebuilds the normaliser and pre-tokenizer. With any other pre-tokenizer, the same text would become other ids
    there than here, and a policy trained here would read garbage there."""
    if not texts:
        raise ValueError("cannot train a tokenizer on an empty corpus")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, padding_side="left")


def build_model(vocab_size: int, *, hidden_size: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                intermediate_size: int = 192, max_positions: int = 256, pad_token_id: int = 0,
                eos_token_id: int = 1, matmul: str = "torch", attention: str = "sdpa") -> Qwen2ForCausalLM:
    """A Qwen2-architecture causal LM; the defaults give about 0.12 M parameters for a 500-token vocabulary.

    ``matmul``: the library of its linear layers, ``attention``: what computes its attention (`dara.tiny.gemm`), each
    saved in its config (only where not the default, so that a policy made the old way saves the same config.json)
    for every later load."""
    extra = {MATMUL_KEY: checked_matmul(matmul)} if matmul != "torch" else {}
    if checked_attention(attention) != "sdpa":
        extra[ATTENTION_KEY] = attention
    config = Qwen2Config(**extra,
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=eos_token_id,
    )
    return route_products(Qwen2ForCausalLM(config))


def load_policy(path: str | os.PathLike) -> tuple[PreTrainedTokenizerFast, Qwen2ForCausalLM]:
    """Tokenizer and model saved with ``save_pretrained`` under ``path`` (model in eval mode, float32; its linear
    layers computing with the library its config names, `dara.tiny.gemm`)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no Hugging Face checkpoint (config.json) under {path}")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    model = route_products(Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32))
    model.eval()
    return tokenizer, model


# What decides a saved policy's computation: its Hugging Face config (the GEMM library among it), weights and tokenizer;
# not the records a warm start or an evaluation add to its folder (timings, revisions), which differ run to run.
_DEFINING_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def policy_digest(path: str | os.PathLike) -> str:
    """sha256 over a saved policy's defining files (`_DEFINING_FILES` and its ``*.safetensors``, names and bytes):
    which policy a run trained from, by content, so that a run's ``config.yaml`` names it and a resume state from
    another policy at the same path is not resumed (`dara.tiny.trainer.train`)."""
    path = Path(path)
    weights = sorted(path.glob("*.safetensors"))
    missing = [name for name in _DEFINING_FILES if not (path / name).is_file()]
    if missing or not weights:
        raise FileNotFoundError(f"{path} is not a saved policy: missing {', '.join(missing) or '*.safetensors'}")
    digest = hashlib.sha256()
    for file in sorted([path / name for name in _DEFINING_FILES] + weights):
        digest.update(file.name.encode() + b"\0" + hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def save_policy(model, tokenizer, path: str | os.PathLike) -> None:
    """``save_pretrained`` both into a temporary sibling folder, then move it into place (no half-written checkpoints)."""

    def save(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    replace_dir_atomically(path, save)


def encode_prompts(tokenizer, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask (whatever padding side the tokenizer was saved with: the sampler
    reads each row's last position)."""
    batch = tokenizer(list(prompts), return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    return batch["input_ids"], batch["attention_mask"]


def rollout(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 1.0,
            top_p: float = 1.0) -> dict[str, torch.Tensor]:
    """The project's one sampler (training rollouts, the warm-start probe, held-out evaluation): one response per
    prompt (repeat prompts for groups), drawn from the global torch RNG (seed it first for reproducible draws; the
    trainer saves its state for resumable runs). The tensors live on the model's device; the random numbers come
    from the CPU generator on every device, so one seed draws the same uniforms on a GPU as on the CPU.

    Returns ``input_ids`` (prompt + response, padded), ``attention_mask`` (1 on prompt tokens and on response
    tokens up to and including EOS), ``response_mask`` (1 on response tokens up to and including EOS),
    ``prompt_length`` (the padded prompt width) and ``logprobs`` (B, response width): the log-probability of each
    response token under ``model`` at temperature 1 (0 after EOS), i.e. what ``token_logprobs`` of a fresh forward
    gives for those tokens, up to float rounding (about 1e-6), so PPO can use them as its old log-probs instead of
    a second forward pass.

    Tokens are drawn from softmax(logits / temperature), restricted with ``top_p`` < 1 to the nucleus (the most
    likely tokens whose mass first reaches top_p, renormalised; no top-k). A row that has sampled EOS gets padding;
    the loop stops when every row has ended or after ``max_new_tokens`` tokens. It is a KV-cache loop over
    `dara.tiny.decoder.LeanDecoder`, because Hugging Face ``generate``'s per-token machinery costs more than the forward of a
    model this small. A token is drawn by inverting the CDF with one uniform per row, much cheaper than
    ``torch.multinomial``, which draws one exponential per vocabulary entry. Rows that have ended leave the decoder
    in batches (``ENDED_SHARE_TO_DROP``); every row still draws its uniform at every step, so which rows are in the
    decoder changes no draw (tested), only float rounding of the log-probs (about 1e-6: a smaller batch). Rows
    that repeat a prompt (a prompt group's) share its prefill: each distinct prompt is computed once and its cache
    copied to its rows: about a fifth of a toolcall rollout at G = 4, for the same draws (tested).

    Sampling runs under ``torch.inference_mode``, which also skips the version counting and view tracking that
    ``no_grad`` keeps: 6-9 % of a rollout at this size, with the same draws and log-probs bit for bit (tested; every
    run of a whole ``make reproduce`` wrote the same metrics as under ``no_grad``). Tensors made in inference mode
    cannot be saved for a backward pass, and the trainer's update differentiates through ``input_ids``; so the caller
    gets ordinary copies.
    """
    with torch.inference_mode():
        batch = _sample(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
    return {name: tensor.clone() for name, tensor in batch.items()}


def _sample(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int, temperature: float,
            top_p: float) -> dict[str, torch.Tensor]:
    """`rollout`'s loop, in the caller's grad mode."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (sampling), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    was_training = model.training
    model.eval()
    # Every tensor lives on the model's device; the random draws do not (below).
    device = model.device
    # A prompt group's rows share their prompt: each distinct prompt is prefilled once and its keys, values and
    # logits are copied to its rows (left padding to the widest distinct prompt is the padding of the whole batch).
    distinct, prompt_of_row = _distinct_prompts(prompts)
    distinct_ids, distinct_mask = encode_prompts(tokenizer, distinct)
    distinct_ids, distinct_mask, prompt_of_row = (t.to(device) for t in (distinct_ids, distinct_mask, prompt_of_row))
    prompt_ids, prompt_mask = distinct_ids[prompt_of_row], distinct_mask[prompt_of_row]
    rows, width = prompt_ids.shape
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    response = torch.full((rows, max_new_tokens), pad, dtype=torch.long, device=device)
    logprobs = torch.zeros(rows, max_new_tokens, device=device)
    attention = torch.cat([prompt_mask, torch.ones(rows, max_new_tokens, dtype=prompt_mask.dtype, device=device)],
                          dim=1)
    # Positions as token_logprobs builds them from the mask: a response token sits right after the real prompt.
    distinct_positions = (distinct_mask.cumsum(-1) - 1).clamp(min=0)
    positions = distinct_positions[prompt_of_row]
    decoder = LeanDecoder(model, len(distinct), width + max_new_tokens)
    logits = decoder.forward(distinct_ids, distinct_positions, distinct_mask)
    if len(distinct) < rows:
        decoder.select(prompt_of_row)
        logits = logits[prompt_of_row]
    next_position = positions[:, -1:] + 1
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    # The rows still in the decoder (indices into the batch): a row that has ended is padding from then on, so once
    # ENDED_SHARE_TO_DROP of the decoder's rows have ended they leave it, and later tokens cost only the others.
    live = torch.arange(rows, device=device)
    length = 0
    for t in range(max_new_tokens):
        logits = logits.float()
        probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
        sampling_probs = probs
        if top_p < 1.0:
            sampling_probs = _nucleus(probs, top_p)
        cdf = sampling_probs.cumsum(dim=-1)
        # First index whose cumulative probability exceeds u * total: token i with probability p_i is drawn with
        # probability p_i (scaling by the total absorbs the cumsum's rounding; the clamp only guards u * total
        # rounding up to the total itself). One uniform per row of the batch, dropped rows included, so the draws
        # do not depend on when rows leave the decoder. The uniforms come from the global CPU generator whatever the
        # model's device (and are then moved there): a seed draws the same numbers on a GPU as on the CPU.
        draw = torch.rand(rows, 1).to(device)[live] * cdf[:, -1:]
        token = torch.searchsorted(cdf, draw, right=True).clamp(max=cdf.shape[1] - 1).squeeze(1)
        ended = finished[live]
        token = token.masked_fill(ended, pad)
        # The log-probability at temperature 1: log of the softmax already computed when T = 1 (one softmax per
        # token instead of a log-softmax and an exp; float32 rounding stays near 1e-7), else logit - logsumexp.
        if temperature == 1.0:
            token_logp = probs.gather(1, token[:, None]).squeeze(1).log()
        else:
            token_logp = logits.gather(1, token[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
        response[live, t] = token
        logprobs[live, t] = token_logp.masked_fill(ended, 0.0)
        length = t + 1
        finished[live] |= token == eos
        if bool(finished.all()) or length == max_new_tokens:
            break
        ended = finished[live]
        if int(ended.sum()) >= ENDED_SHARE_TO_DROP * len(live):
            kept = (~ended).nonzero().squeeze(1)
            decoder.select(kept)
            live, token = live[kept], token[kept]
        # Rows that ended but are still in the decoder keep decoding padding, as Hugging Face's generate does;
        # their tokens are masked out of the response.
        logits = decoder.forward(token[:, None], next_position[live] + t, attention[live, :width + length])
    model.train(was_training)
    response, logprobs = response[:, :length], logprobs[:, :length]
    is_eos = response == eos
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    response_mask = (~after_eos).long()
    return {
        "input_ids": torch.cat([prompt_ids, response], dim=1),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        "response_mask": response_mask,
        "prompt_length": torch.tensor(width),
        "logprobs": logprobs,
    }


def _distinct_prompts(prompts: Sequence[str]) -> tuple[list[str], torch.Tensor]:
    """The distinct prompts in order of first appearance, and for each row the index of its prompt among them."""
    index_of: dict[str, int] = {}
    prompt_of_row = [index_of.setdefault(prompt, len(index_of)) for prompt in prompts]
    return list(index_of), torch.tensor(prompt_of_row, dtype=torch.long)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Probabilities with every token outside the nucleus set to 0 (not renormalised: the sampler scales by the
    total). The nucleus holds the most likely tokens up to and including the one whose cumulative mass reaches
    top_p, so it is never empty."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p * sorted_probs.sum(dim=-1, keepdim=True)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return probs * keep


def decode_responses(tokenizer, batch: dict[str, torch.Tensor]) -> tuple[list[str], list[int]]:
    """Response texts (EOS and padding removed) and their token counts (EOS counted, as verl counts it)."""
    width = int(batch["prompt_length"])
    eos = tokenizer.eos_token_id  # an attribute lookup on a Hugging Face tokenizer is slow: once, not per token
    texts, lengths = [], []
    for kept in (ids[mask].tolist() for ids, mask in zip(batch["input_ids"][:, width:], batch["response_mask"].bool())):
        lengths.append(len(kept))
        texts.append(tokenizer.decode([t for t in kept if t != eos]))
    return texts, lengths


def generate(model, tokenizer, prompts: Sequence[str], *, seed: int, max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 256) -> tuple[list[str], list[int]]:
    """Texts and token counts of one sampled response per prompt, reproducible from ``seed``."""
    torch.manual_seed(seed)
    texts, lengths = [], []
    for start in range(0, len(prompts), batch_size):
        batch = rollout(model, tokenizer, prompts[start:start + batch_size], max_new_tokens=max_new_tokens,
                        temperature=temperature, top_p=top_p)
        chunk_texts, chunk_lengths = decode_responses(tokenizer, batch)
        texts += chunk_texts
        lengths += chunk_lengths
    return texts, lengths


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, with_entropy: bool = False,
                   start: int = 1, entropy_grad: bool = False, prompt_group_size: int = 1,
                   scored: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given its prefix, shape (B, T-start) aligned with ``input_ids[:, start:]``.

    Position ids follow the attention mask exactly as `rollout` (and Hugging Face's ``generate``) build them for
    left-padded prompts, so the training forward scores the very distribution that was sampled. The output
    projection and softmax are by far the costliest part of a forward with a 1,000-token vocabulary and 64 hidden
    units, so they run only where a log-prob is wanted: from ``start`` on (the prompt width, for the trainer), and
    there only at the ``scored`` positions (bool, (B, T-start); default all), for the trainer a row's response tokens
    up to its EOS, which leaves out the padding after shorter responses (about a quarter of a step's response
    positions). Unscored positions get log-prob 0 and entropy 0; scored ones the values of scoring every position,
    to float rounding (tested). The entropy carries a gradient only with ``entropy_grad`` (an entropy bonus); when
    it is only logged, its graph would double the backward's softmax work.

    ``prompt_group_size`` > 1: the rows come in consecutive groups of that many that share their first ``start``
    tokens and mask (a prompt group's responses, as the trainer lays them out; checked). Each prompt is then computed
    once, and its keys and values are repeated for the group's rows (Hugging Face's cache, differentiable): the
    same log-probs to float rounding (below 1e-5, tested; about 1e-7 to 1e-6 seen) for a fraction of the prompt
    positions' work.
    """
    if not 1 <= start < input_ids.shape[1]:
        raise ValueError(f"start must be in [1, {input_ids.shape[1] - 1}], got {start}")
    targets = input_ids[:, start:]
    if scored is None:
        scored = torch.ones_like(targets, dtype=torch.bool)
    elif scored.dtype != torch.bool or scored.shape != targets.shape:
        raise ValueError(f"scored must be a bool mask of shape {tuple(targets.shape)} (the positions from start on), "
                         f"got {scored.dtype} {tuple(scored.shape)}")
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    if prompt_group_size == 1:
        hidden = model.model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1],
                             position_ids=position_ids[:, :-1]).last_hidden_state[:, start - 1:]
    else:
        hidden = _hidden_with_shared_prompts(model, input_ids, attention_mask, position_ids, start, prompt_group_size)
    logp_all = torch.log_softmax(model.lm_head(hidden[scored]).float(), dim=-1)
    logp = logp_all.gather(-1, targets[scored][:, None]).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = logp.new_zeros(scored.shape).masked_scatter(scored, -(logp_all.exp() * logp_all).sum(-1))
    return logp.new_zeros(scored.shape).masked_scatter(scored, logp), entropy


def _hidden_with_shared_prompts(model, input_ids, attention_mask, position_ids, start: int,
                                group_size: int) -> torch.Tensor:
    """The last hidden states (B, T-start, hidden) that predict ``input_ids[:, start:]``, with each group's prompt
    computed once: a prefill of one row per group (`shared_prompt_prefill`), whose last position predicts the first
    response token, then the responses' forward over the prefill's keys and values repeated ``group_size`` times."""
    first, cache = shared_prompt_prefill(model, input_ids, attention_mask, position_ids, start, group_size)
    first = first.repeat_interleave(group_size, 0)
    if input_ids.shape[1] - start == 1:
        return first
    cache.batch_repeat_interleave(group_size)
    rest = model.model(input_ids=input_ids[:, start:-1], attention_mask=attention_mask[:, :-1],
                       position_ids=position_ids[:, start:-1], past_key_values=cache, use_cache=True).last_hidden_state
    return torch.cat([first, rest], dim=1)


def shared_prompt_prefill(model, input_ids, attention_mask, position_ids, start: int,
                          group_size: int) -> tuple[torch.Tensor, DynamicCache]:
    """The prompts of rows in consecutive groups of ``group_size`` that share their first ``start`` tokens and mask
    (checked), computed once per group: the last prompt position's hidden state (groups, 1, hidden), which predicts
    the first response token, and the prefill's cache (one row per group)."""
    rows = input_ids.shape[0]
    if group_size < 1 or rows % group_size:
        raise ValueError(f"prompt_group_size={group_size} does not divide the batch's {rows} rows")
    prompt_ids, prompt_mask = input_ids[:, :start], attention_mask[:, :start]
    first_ids, first_mask = prompt_ids[::group_size], prompt_mask[::group_size]
    if not (torch.equal(prompt_ids, first_ids.repeat_interleave(group_size, 0))
            and torch.equal(prompt_mask, first_mask.repeat_interleave(group_size, 0))):
        raise ValueError(f"rows in groups of {group_size} do not share their first {start} tokens and mask: "
                         "prompt_group_size needs each group's responses to one prompt in consecutive rows")
    cache = DynamicCache(config=model.config)
    first = model.model(input_ids=first_ids, attention_mask=first_mask, position_ids=position_ids[::group_size, :start],
                        past_key_values=cache, use_cache=True).last_hidden_state[:, -1:]
    return first, cache
