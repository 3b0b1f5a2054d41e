"""The ToolRL (RLLA) prompt and output format, as used to evaluate on BFCL (docs/evaluation.md).

Plain Python (no bfcl-eval, no torch). The policy was trained on ToolRL's prompt: a system message with
the tool list and the output contract, and a user message "**Dialogue Records History**" with `<user>`
and `<obs>` turns. It answers

    <think> ... </think>
    <tool_call>
    {"name": ..., "parameters": {...}}      one JSON object per line
    </tool_call>
    <response> ... </response>              optional

Decoding takes the JSON lines of the *last* `<tool_call>` block and skips calls named "none"
(the prompt tells the model to call "None" when no tool applies). Unlike the training reward
(`dara.rewards.toolrl.parse_tool_calls`, which fails the whole block), undecodable lines are dropped one by
one, as ToolRL's BFCL handler does. Answers are written with `dara.rewards.toolrl.render_answer`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

TOOL_CALL_EXAMPLE = (
    '{"name": "Tool name", "parameters": {"Parameter name": "Parameter content", "... ...": "... ..."}}\n'
    '{"name": "... ...", "parameters": {"... ...": "... ...", "... ...": "... ..."}}'
)

SYSTEM_TEMPLATE = """You are a helpful multi-turn dialogue assistant capable of leveraging tool calls to solve user tasks and provide structured chat responses.

**Available Tools**
In your response, you can use the following tools:
{tools}

**Steps for Each Turn**
1. **Think:** Recall relevant context and analyze the current user goal.
2. **Decide on Tool Usage:** If a tool is needed, specify the tool and its parameters.
3. **Respond Appropriately:** If a response is needed, generate one while maintaining consistency across user queries.

**Output Format**
```plaintext
<think> Your thoughts and reasoning </think>
<tool_call>
{tool_call_example}
...
</tool_call>
<response> AI's final response </response>
```

**Important Notes**
1. You must always include the `<think>` field to outline your reasoning. Provide at least one of `<tool_call>` or `<response>`. Decide whether to use `<tool_call>` (possibly multiple times), `<response>`, or both.
2. You can invoke multiple tool calls simultaneously in the `<tool_call>` fields. Each tool call should be a JSON object with a "name" field and an "parameters" field containing a dictionary of parameters. If no parameters are needed, leave the "parameters" field an empty dictionary.
3. Refer to the previous dialogue records in the history, including the user's queries, previous `<tool_call>`, `<response>`, and any tool feedback noted as `<obs>` (if exists).
"""

SINGLE_TURN_INSTRUCTION = (
    "If there's no appropriate tools to apply or required parameters are missing, please directly inform "
    "me in your response without any tool call, or call the tool with the name as 'None'. Otherwise, you "
    "should use one or more necessary tool calls to complete the given task in this turn."
)
MULTI_TURN_INSTRUCTION = (
    "Use the one or more necessary tool calls to complete the task. You could perform tool calls for "
    "multiple rounds so you can try and error. Please make a comprehensive plan about how to achieve the "
    "goal step by step, and begin to call the tool step by step. If no tools apply or required parameters "
    "are missing, please also directly state this in your response without tool calls."
)
AFTER_OBSERVATION_INSTRUCTION = (
    "If you think you have completed the current task, or the task cannot be finished, please respond "
    "directly without additional tool calls. If you encounter an error during tool execution or the task "
    "remains unfinished, retry with the one or more necessary tool calls according to your thought and "
    "plan until completion. Based on the tool execution feedback, reflect on if understanding or "
    "selectioin of tool is wrong, what tool calling step is missing, and how to achieve the task goal "
    "from now on."
)

# The three Format selectors of the paper's BFCL protocol (docs/evaluation.md): an output passes if the ToolRL format reward accepts it
# against a ground truth of any of these shapes (tool call only, response only, both).
FORMAT_SELECTORS = ("<tool_call>", "<response>", "<tool_call><response>")
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def render_tools(functions: Sequence[Mapping]) -> str:
    """Numbered tool list: name, description and the JSON of the parameter properties."""
    lines = []
    for number, function in enumerate(functions, start=1):
        for key in ("name", "description", "parameters"):
            if key not in function:
                raise ValueError(f"function doc #{number} lacks {key!r}: {function}")
        properties = function["parameters"].get("properties", {})
        lines.append(
            f"{number}. Name: {function['name']}\nDescription: {function['description']}\n"
            f"Parameters: {json.dumps(properties)}"
        )
    return "\n".join(lines)


def system_prompt(functions: Sequence[Mapping]) -> str:
    return SYSTEM_TEMPLATE.format(tools=render_tools(functions), tool_call_example=TOOL_CALL_EXAMPLE)


def user_prompt(messages: Sequence[Mapping], *, multi_turn: bool) -> str:
    """The dialogue history as one user message; `messages` hold roles user / assistant / tool
    (system messages are dropped: the tool list replaces them)."""
    text = "**Dialogue Records History**\n"
    instruction = MULTI_TURN_INSTRUCTION if multi_turn else SINGLE_TURN_INSTRUCTION
    for position, message in enumerate(messages):
        role = message["role"]
        content = str(message.get("content", "")).strip()
        if role == "system":
            continue
        if role == "user":
            text += f"<user> {content}\n{instruction} </user>\n"
        elif role == "tool":
            text += f"<obs> You have made the tool call {str(message['name']).strip()}. Execution returns: {content} </obs>\n"
            if position == len(messages) - 1:
                text += f"\n<user> {AFTER_OBSERVATION_INSTRUCTION} </user>\n"
        elif role == "assistant":
            text += f"\n{content}\n"
        else:
            raise ValueError(f"unknown message role {role!r}")
    return text.strip()


def chat_messages(messages: Sequence[Mapping], functions: Sequence[Mapping], *, multi_turn: bool) -> list[dict]:
    """System + user chat messages, ready for a tokenizer's chat template."""
    return [
        {"role": "system", "content": system_prompt(functions)},
        {"role": "user", "content": user_prompt(messages, multi_turn=multi_turn)},
    ]


def qwen_completion_prompt(messages: Sequence[Mapping], functions: Sequence[Mapping], *, multi_turn: bool) -> str:
    """The same conversation in Qwen2.5's ChatML, for completion-mode serving."""
    system, user = chat_messages(messages, functions, multi_turn=multi_turn)
    return (
        f"<|im_start|>system\n{system['content']}<|im_end|>\n"
        f"<|im_start|>user\n{user['content']}<|im_end|>\n<|im_start|>assistant\n"
    )


def last_tool_call_block(output: str) -> str | None:
    """The text of the last closed `<tool_call>...</tool_call>` block, or None without one.

    Blocks are read left to right, each from an opening tag to the next closing tag (what
    `re.findall(r"<tool_call>(.*?)</tool_call>", DOTALL)` returns, whose last item this is), in linear time:
    the regular expression rescans the rest of the text from every unclosed opening tag, which takes minutes
    on a long output that repeats the tag.
    """
    last, position = None, 0
    while (start := output.find(TOOL_CALL_OPEN, position)) >= 0:
        body_start = start + len(TOOL_CALL_OPEN)
        end = output.find(TOOL_CALL_CLOSE, body_start)
        if end < 0:
            break  # no closing tag after this opening tag, hence none after any later one
        last, position = output[body_start:end], end + len(TOOL_CALL_CLOSE)
    return last


def decode_calls(output: str) -> list[dict]:
    """Calls `{"name": str, "parameters": dict}` from the last `<tool_call>` block.

    No block -> []. Lines that are not a JSON object with a string `name` and a dict `parameters`
    (`arguments` accepted as an alias) are dropped, as are lines `dara.rewards.toolrl.decode_json` refuses
    (JSON nested deeper than `MAX_JSON_DEPTH`, integers over 4300 digits); calls named "none" (any case)
    are skipped.
    """
    from dara.rewards.toolrl import ToolCallParseError, decode_json  # plain Python, importable in the bfcl env

    if not isinstance(output, str):
        raise TypeError(f"output must be a str, got {type(output).__name__}")
    block = last_tool_call_block(output)
    if block is None:
        return []
    calls = []
    for line in block.strip().split("\n"):
        if not line.lstrip().startswith("{"):
            continue  # not a JSON object: skipped without decoding (a block of many such lines stays fast)
        try:
            call = decode_json(line)
        except ToolCallParseError:
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        parameters = call.get("parameters", call.get("arguments", {}))
        if not isinstance(parameters, dict):
            continue
        if call["name"].strip().lower() == "none":
            continue
        calls.append({"name": call["name"], "parameters": parameters})
    return calls


def format_score(output: str) -> float:
    """1.0 if the ToolRL format reward accepts `output` for any of the three selectors, else 0.0."""
    from dara.rewards.toolrl import format_reward  # plain Python, importable in the bfcl env

    return float(any(format_reward(output, selector) > 0 for selector in FORMAT_SELECTORS))


def case_format(outputs: Sequence[str]) -> float:
    """Mean format score over a case's assistant outputs; a case without outputs scores 0."""
    if not outputs:
        return 0.0
    return sum(format_score(output) for output in outputs) / len(outputs)


def case_think_length(outputs: Sequence[str], max_words: int = 16) -> float:
    """Mean think-length reward (last think block of at most `max_words` words) over a case's outputs; 0 if none.
    The three-reward study's Length metric, aggregated like Format (docs/rewards.md, docs/evaluation.md)."""
    from dara.rewards.toolrl import think_length_reward

    if not outputs:
        return 0.0
    return sum(think_length_reward(output, max_words=max_words) for output in outputs) / len(outputs)
