"""The tiny policy: tokenizer training, model construction, loading, sampling and token log-probabilities.

Other code (the evaluation stage) calls ``load_policy`` and ``generate``:

    tokenizer, model = load_policy("results/tiny/runs/toolcall/dara_sym/G8/seed0/checkpoints/step40")
    texts, n_tokens = generate(model, tokenizer, prompts, seed=0, max_new_tokens=48, temperature=0.6, top_p=0.95)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from dara.io import replace_dir_atomically

PAD, EOS = "<pad>", "<eos>"


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (Qwen2's scheme, so any text round-trips) trained on ``texts``."""
    if not texts:
        raise ValueError("cannot train a tokenizer on an empty corpus")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, padding_side="left")


def build_model(vocab_size: int, *, hidden_size: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                intermediate_size: int = 192, max_positions: int = 256, pad_token_id: int = 0,
                eos_token_id: int = 1) -> Qwen2ForCausalLM:
    """A Qwen2-architecture causal LM; the defaults give about 0.12 M parameters for a 500-token vocabulary."""
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=eos_token_id,
    )
    return Qwen2ForCausalLM(config)


def load_policy(path: str | os.PathLike) -> tuple[PreTrainedTokenizerFast, Qwen2ForCausalLM]:
    """Tokenizer and model saved with ``save_pretrained`` under ``path`` (model in eval mode, float32)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no Hugging Face checkpoint (config.json) under {path}")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    model = Qwen2ForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return tokenizer, model


def save_policy(model, tokenizer, path: str | os.PathLike) -> None:
    """``save_pretrained`` both into a temporary sibling folder, then move it into place (no half-written checkpoints)."""

    def save(folder: Path) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    replace_dir_atomically(path, save)


def encode_prompts(tokenizer, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask."""
    batch = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    return batch["input_ids"], batch["attention_mask"]


@torch.no_grad()
def sample(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, seed: int | None = None) -> dict[str, torch.Tensor]:
    """Sample one response per prompt (repeat prompts for groups).

    Returns ``input_ids`` (prompt + response, padded), ``attention_mask`` (1 on prompt tokens and on response
    tokens up to and including EOS), ``response_mask`` (1 on response tokens up to and including EOS) and
    ``prompt_length`` (the padded prompt width). With ``seed`` the torch RNG is seeded first; without it the
    caller's RNG state drives sampling (the trainer, for resumable runs).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (sampling), got {temperature}")
    if seed is not None:
        torch.manual_seed(seed)
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    config = GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                              max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    was_training = model.training
    model.eval()
    output = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, generation_config=config)
    model.train(was_training)
    response = output[:, prompt_ids.shape[1]:]
    # Keep tokens up to and including the first EOS; generate pads finished rows afterwards.
    is_eos = response == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    response_mask = (~after_eos).long()
    return {
        "input_ids": output,
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        "response_mask": response_mask,
        "prompt_length": torch.tensor(prompt_ids.shape[1]),
    }


def decode_responses(tokenizer, batch: dict[str, torch.Tensor]) -> tuple[list[str], list[int]]:
    """Response texts (EOS and padding removed) and their token counts (EOS counted, as verl counts it)."""
    width = int(batch["prompt_length"])
    texts, lengths = [], []
    for ids, mask in zip(batch["input_ids"][:, width:], batch["response_mask"]):
        kept = ids[mask.bool()].tolist()
        lengths.append(len(kept))
        texts.append(tokenizer.decode([t for t in kept if t != tokenizer.eos_token_id]))
    return texts, lengths


def generate(model, tokenizer, prompts: Sequence[str], *, seed: int, max_new_tokens: int,
             temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 256) -> tuple[list[str], list[int]]:
    """Texts and token counts of one sampled response per prompt, reproducible from ``seed``."""
    torch.manual_seed(seed)
    texts, lengths = [], []
    for start in range(0, len(prompts), batch_size):
        batch = sample(model, tokenizer, prompts[start:start + batch_size], max_new_tokens=max_new_tokens,
                       temperature=temperature, top_p=top_p)
        chunk_texts, chunk_lengths = decode_responses(tokenizer, batch)
        texts += chunk_texts
        lengths += chunk_lengths
    return texts, lengths


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given its prefix, shape (B, T-1) aligned with ``input_ids[:, 1:]``.

    Position ids follow the attention mask exactly as ``generate`` builds them for left-padded prompts, so the
    training forward scores the very distribution that was sampled.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits[:, :-1]
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    logp = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy
