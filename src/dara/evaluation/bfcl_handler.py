"""A bfcl-eval model handler for policies trained in the ToolRL format, registered in code.

bfcl-eval (2026.3.23) has no Qwen2.5 entry and no ToolRL decoder. `register()` adds a `ModelConfig` under
`MODEL_NAME` (no `_`: bfcl-eval maps `_` to `/` in model names) whose handler
- builds ToolRL's system + "Dialogue Records History" prompt in Qwen2.5's ChatML (completion mode,
  `is_fc_model=False`), and
- decodes the JSON lines of the last `<tool_call>` block into bfcl's AST form `[{name: {param: value}}]`
  and executable form `["name(param=value)"]`, skipping calls named "none".

Only importable where bfcl-eval is (the .venv-bfcl environment). bfcl-eval creates result/ and score/
folders under BFCL_PROJECT_ROOT when imported: `dara.evaluation.bfcl_data.set_scratch_root()` first.
"""

from __future__ import annotations

import time
from typing import Any

from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING, ModelConfig
from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler
from bfcl_eval.model_handler.utils import convert_to_function_call
from overrides import override

from dara.evaluation.toolrl_format import decode_calls, qwen_completion_prompt

MODEL_NAME = "dara-toolrl-qwen2.5"

# Sampling of the paper's BFCL protocol (docs/evaluation.md). Its 32k context (prompt + completion; overflow counts as a failure) is the vLLM server's
# --max-model-len (workflow/rules/evaluate.smk), which rejects longer requests.
GENERATION = {"temperature": 0.6, "top_p": 0.95, "top_k": -1, "seed": 0, "max_new_tokens": 8192}


class ToolRLHandler(OSSHandler):
    """bfcl-eval handler: ToolRL prompt in, ToolRL `<tool_call>` JSON lines out."""

    def __init__(self, model_name, temperature, registry_name, is_fc_model, **kwargs) -> None:
        super().__init__(model_name, temperature, registry_name, is_fc_model, **kwargs)
        # Which served model to query (a checkpoint path); set by the generator.
        self.model_path_or_id = model_name

    @override
    def decode_ast(self, result, language, has_tool_call_tag):
        return [{call["name"]: call["parameters"]} for call in decode_calls(result)]

    @override
    def decode_execute(self, result, has_tool_call_tag):
        return convert_to_function_call([{call["name"]: call["parameters"]} for call in decode_calls(result)])

    @override
    def _format_prompt(self, messages, function):
        raise NotImplementedError("ToolRLHandler builds prompts in _query_prompting (it needs the turn type)")

    @override
    def _pre_query_processing_prompting(self, test_entry: dict) -> dict:
        # ToolRL's prompt replaces bfcl's default system prompt; it differs for multi-turn entries.
        return {
            "message": [],
            "function": test_entry["function"],
            "multi_turn": test_entry["id"].startswith("multi_turn"),
        }

    @override
    def _query_prompting(self, inference_data: dict):
        prompt = qwen_completion_prompt(
            inference_data["message"], inference_data["function"], multi_turn=inference_data["multi_turn"]
        )
        inference_data["inference_input_log"] = {"formatted_prompt": prompt}
        start = time.time()
        response = self.client.completions.create(
            model=self.model_path_or_id,
            prompt=prompt,
            temperature=GENERATION["temperature"],
            top_p=GENERATION["top_p"],
            max_tokens=GENERATION["max_new_tokens"],
            seed=GENERATION["seed"],
            extra_body={"top_k": GENERATION["top_k"]},
            timeout=72000,
        )
        return response, time.time() - start

    @override
    def _parse_query_response_prompting(self, api_response: Any) -> dict:
        return {
            "model_responses": api_response.choices[0].text,
            "input_token": api_response.usage.prompt_tokens,
            "output_token": api_response.usage.completion_tokens,
        }


def register(model_path: str | None = None) -> str:
    """Add (or replace) the `MODEL_NAME` entry of bfcl-eval's model table; returns the name."""
    if "_" in MODEL_NAME:
        raise ValueError(f"bfcl-eval model names must not contain '_': {MODEL_NAME!r}")
    MODEL_CONFIG_MAPPING[MODEL_NAME] = ModelConfig(
        model_name=model_path or MODEL_NAME,
        display_name="DARA policy, ToolRL format (Prompt)",
        url="",
        org="dara",
        license="apache-2.0",
        model_handler=ToolRLHandler,
        input_price=None,
        output_price=None,
        is_fc_model=False,
        underscore_to_dot=False,
    )
    return MODEL_NAME


def make_handler(model_path: str | None = None) -> ToolRLHandler:
    register(model_path)
    config = MODEL_CONFIG_MAPPING[MODEL_NAME]
    return ToolRLHandler(
        model_name=config.model_name,
        temperature=GENERATION["temperature"],
        registry_name=MODEL_NAME,
        is_fc_model=False,
    )
