"""The tiny CPU-scale study: a byte-level BPE tokenizer trained on each task's corpus, a Qwen2-architecture causal
LM well under a million parameters, a supervised warm start (``dara.tiny.warmstart``), and a readable RL trainer
(``dara.tiny.trainer``) that calls the same ``dara.advantages.compute_advantages`` verl calls at paper scale.
Everything is saved in Hugging Face format so that paper-scale tooling can load it.
"""
