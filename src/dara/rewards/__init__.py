"""The study's reward functions, as pure functions of model text.

- `dara.rewards.toolrl`: ToolRL's tool-calling rewards (format, correctness) and the 3-reward think-length channel.
- `dara.rewards.math`: boxed-answer correctness via math-verify (scored in worker processes) and the token budget.
- `dara.rewards.act`: the composite action reward of Agentic Critical Training (accuracy, admissible, format).

Submodules are imported on demand so that importing `dara.rewards.toolrl` does not load sympy.
"""
