"""Tool calling in ToolRL's output format (the study's tool rewards, docs/rewards.md).

A prompt lists a few tools by signature and a user request; the answer is ``<think>...</think>`` then either a
``<tool_call>`` block of JSON lines or, when no listed tool fits, a ``<response>`` block. Rewards: format {0, 1}
and correctness [-3, 3] (ToolRL's formulas), plus, for ``toolcall3``, a think block of at most
``think_max_words`` words.

The warm start learns two near misses. A layout one: ``</think> <tool_call>`` (a space where ToolRL's format wants
a newline) in all but ``format_rate`` of the demonstrations, so format is rare at step 0, the imbalance the paper
starts from (Qwen2.5-1.5B: 0.2 % format compliance). And a content one: in ``wrong_key_rate`` of the demonstrations
the calls name their arguments ``"args"`` instead of ToolRL's ``"parameters"``, which the correctness reward scores
-3 and BFCL's decoder reads as a call without arguments, and in ``wrong_value_rate`` of them one argument holds
another value of its kind than the request's (a partial score). Correctness then varies inside most groups (dense)
and has room to grow, as the paper's base policy (7 % held-out accuracy) does.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dara.tasks.base import ASSISTANT_TURN, ScoredBatch, Task, check_rate

CITIES = ["Paris", "Rome", "Tokyo", "Cairo", "Lima", "Oslo", "Delhi", "Boston", "Madrid", "Seoul"]
UNITS = ["celsius", "fahrenheit"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "INR"]
ARTISTS = ["Adele", "Queen", "Drake", "Shakira", "Beyonce", "Coldplay"]
LANGUAGES = ["French", "German", "Spanish", "Italian", "Hindi"]
PHRASES = ["good morning", "thank you", "see you soon", "where is the station"]
SYMBOLS = ["AAPL", "MSFT", "TSLA", "AMZN", "NVDA"]
CONTACTS = ["Anna", "Ben", "Chloe", "David", "Emma"]
TIMES = ["6am", "7am", "8am", "9pm", "10pm"]
VALUE_POOLS = (CITIES, UNITS, CURRENCIES, ARTISTS, LANGUAGES, PHRASES, SYMBOLS, CONTACTS, TIMES)


def _schema(name: str, description: str, params: dict[str, tuple[str, str]], required: list[str]) -> dict:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {key: {"type": kind, "description": text} for key, (kind, text) in params.items()},
            "required": required,
        },
    }


TOOLS: dict[str, dict[str, Any]] = {
    tool["name"]: tool
    for tool in [
        _schema("weather", "Current weather of a city",
                {"city": ("string", "city name"), "unit": ("string", "celsius or fahrenheit")}, ["city"]),
        _schema("convert", "Convert an amount between currencies",
                {"amount": ("integer", "amount"), "source": ("string", "from currency"), "target": ("string", "to currency")},
                ["amount", "source", "target"]),
        _schema("alarm", "Set an alarm", {"time": ("string", "time of day")}, ["time"]),
        _schema("music", "Play songs by an artist", {"artist": ("string", "artist name")}, ["artist"]),
        _schema("translate", "Translate a phrase",
                {"text": ("string", "phrase"), "lang": ("string", "target language")}, ["text", "lang"]),
        _schema("stock", "Latest stock price", {"symbol": ("string", "ticker")}, ["symbol"]),
        _schema("message", "Send a text message",
                {"contact": ("string", "recipient"), "text": ("string", "message")}, ["contact", "text"]),
    ]
}


def _request(tool: str, rng: np.random.Generator) -> tuple[str, dict[str, Any], str]:
    """A user request for ``tool``: (text, call arguments, a short plan for the think block)."""
    pick = lambda pool: pool[int(rng.integers(len(pool)))]  # noqa: E731 - a one-line sampler reads best here
    if tool == "weather":
        city, unit = pick(CITIES), pick(UNITS)
        return f"What is the weather in {city} in {unit}?", {"city": city, "unit": unit}, f"weather in {city}"
    if tool == "convert":
        amount, source = int(rng.integers(2, 100)), pick(CURRENCIES)
        target = pick([c for c in CURRENCIES if c != source])
        return (f"Convert {amount} {source} to {target}.", {"amount": amount, "source": source, "target": target},
                f"convert {source} to {target}")
    if tool == "alarm":
        time = pick(TIMES)
        return f"Wake me up at {time}.", {"time": time}, f"alarm at {time}"
    if tool == "music":
        artist = pick(ARTISTS)
        return f"Play some songs by {artist}.", {"artist": artist}, f"music by {artist}"
    if tool == "translate":
        text, language = pick(PHRASES), pick(LANGUAGES)
        return (f"Say {text} in {language}.", {"text": text, "lang": language}, f"translate to {language}")
    if tool == "stock":
        symbol = pick(SYMBOLS)
        return f"How is {symbol} stock doing?", {"symbol": symbol}, f"price of {symbol}"
    if tool == "message":
        contact, text = pick(CONTACTS), pick(PHRASES)
        return (f"Text {contact} saying {text}.", {"contact": contact, "text": text}, f"message {contact}")
    raise ValueError(f"no request template for tool {tool!r}")


def _with_wrong_value(call: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """``call`` with one argument (drawn at random) replaced by another value of the same kind."""
    arguments = dict(call["arguments"])
    name = sorted(arguments)[int(rng.integers(len(arguments)))]
    value = arguments[name]
    if isinstance(value, int):
        arguments[name] = value + int(rng.integers(1, 10))
    else:
        pool = next(pool for pool in VALUE_POOLS if value in pool)
        others = [v for v in pool if v != value]
        arguments[name] = others[int(rng.integers(len(others)))]
    return {**call, "arguments": arguments}


NO_TOOL_REQUESTS = ["Tell me a joke.", "Who are you?", "Write a poem about rain.", "What is your favourite colour?"]
NO_TOOL_ANSWER = "I cannot do that with these tools."
# The near-miss key of ``wrong_key_rate`` demonstrations: ToolRL's calls carry their arguments under "parameters".
WRONG_KEY = "args"
# Words that lengthen a think block without changing its meaning (the three-reward variant's length axis).
THINK_FILLER = "first I read the request and then I check which of the listed tools fits it best".split()


class ToolCallTask(Task):
    """``toolcall`` (format, correctness) and ``toolcall3`` (format, correctness, think_length)."""

    def __init__(self, *, three_rewards: bool = False, tools_per_prompt: int = 3, no_tool_rate: float = 0.15,
                 format_rate: float = 0.05, think_max_words: int = 4, think_filler_max: int = 0,
                 wrong_key_rate: float = 0.0, wrong_value_rate: float = 0.0):
        if tools_per_prompt < 1 or tools_per_prompt > len(TOOLS):
            raise ValueError(f"tools_per_prompt must be in [1, {len(TOOLS)}], got {tools_per_prompt}")
        if think_max_words < 1 or think_filler_max < 0:
            raise ValueError("think_max_words must be >= 1 and think_filler_max >= 0")
        self.three_rewards = bool(three_rewards)
        self.name = "toolcall3" if self.three_rewards else "toolcall"
        self.reward_names = ("format", "correctness", "think_length") if self.three_rewards else ("format", "correctness")
        self.tools_per_prompt = tools_per_prompt
        self.no_tool_rate = check_rate("no_tool_rate", no_tool_rate)
        self.format_rate = check_rate("format_rate", format_rate)
        self.wrong_key_rate = check_rate("wrong_key_rate", wrong_key_rate)
        self.wrong_value_rate = check_rate("wrong_value_rate", wrong_value_rate)
        self.think_max_words = think_max_words
        self.think_filler_max = think_filler_max

    def _draw_item(self, rng: np.random.Generator) -> dict[str, Any]:
        names = sorted(TOOLS)
        offered = [names[i] for i in rng.choice(len(names), size=self.tools_per_prompt, replace=False)]
        if rng.random() < self.no_tool_rate:
            request = NO_TOOL_REQUESTS[int(rng.integers(len(NO_TOOL_REQUESTS)))]
            calls: list[dict[str, Any]] = []
            plan = "no listed tool fits"
        else:
            tool = offered[int(rng.integers(len(offered)))]
            request, arguments, plan = _request(tool, rng)
            calls = [{"name": tool, "arguments": arguments}]
        signatures = "; ".join(f"{n}({', '.join(TOOLS[n]['parameters']['properties'])})" for n in offered)
        prompt = f"Tools: {signatures}\nUser: {request}\n{ASSISTANT_TURN}"
        return {
            "prompt": prompt,
            "request": request,
            "tools": [TOOLS[n] for n in offered],
            "calls": calls,
            "plan": plan,
            "ground_truth": self.answer_text(plan, calls),
        }

    @staticmethod
    def answer_text(think: str, calls: list[dict[str, Any]], separator: str = "\n", key: str = "parameters") -> str:
        """ToolRL's layout; ``separator`` after ``</think>`` is a newline in the format the reward accepts, and
        ``key`` names each call's arguments ("parameters" in ToolRL's format)."""
        from dara.rewards.toolrl import render_answer

        if calls:
            text = render_answer(think, calls=[{"name": c["name"], "parameters": c["arguments"]} for c in calls])
            if key != "parameters":  # json.dumps writes the key once per call line, as '"parameters": {'
                text = text.replace('"parameters": {', f'"{key}": {{')
        else:
            text = render_answer(think, response=NO_TOOL_ANSWER)
        return text.replace("</think>\n", "</think>" + separator, 1)

    def demonstration(self, item: dict[str, Any], rng: np.random.Generator) -> str:
        n_filler = int(rng.integers(self.think_filler_max + 1))
        think = " ".join(THINK_FILLER[:n_filler] + item["plan"].split())
        separator = "\n" if rng.random() < self.format_rate else " "
        # A near miss at rate 0 draws nothing, so the demonstrations (and warm starts) of tasks without them are
        # those of the code before the option existed, random stream included.
        key = WRONG_KEY if self.wrong_key_rate and rng.random() < self.wrong_key_rate else "parameters"
        calls = item["calls"]
        if calls and self.wrong_value_rate and rng.random() < self.wrong_value_rate:
            calls = [_with_wrong_value(call, rng) for call in calls]
        return self.answer_text(think, calls, separator, key)

    def score_outcomes(self, responses: Sequence[str], items: Sequence[dict[str, Any]],
                       n_tokens: Sequence[int]) -> ScoredBatch:
        from dara.rewards import toolrl

        if len(responses) != len(items):
            raise ValueError(f"{len(responses)} responses for {len(items)} items")
        rows, failures = [], []
        for response, item in zip(responses, items):
            outcomes = [toolrl.format_outcome(response, item["ground_truth"]),
                        toolrl.correctness_outcome(response, item["ground_truth"])]
            if self.three_rewards:
                outcomes.append(toolrl.think_length_outcome(response, max_words=self.think_max_words))
            rows.append([outcome.score for outcome in outcomes])
            failures.append([outcome.failed for outcome in outcomes])
        shape = (len(responses), len(self.reward_names))
        return ScoredBatch(np.asarray(rows, dtype=np.float64).reshape(shape),
                           np.asarray(failures, dtype=bool).reshape(shape))
