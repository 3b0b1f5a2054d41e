"""One colour, label and marker per method, shared by every figure so a method looks the same everywhere.

Colours are the Okabe-Ito colour-blind-safe set (chosen in `dara.methods`); the two DARA variants share a hue
family (blue) and the baselines take the others. Unknown method names raise instead of getting a fallback colour.
"""

from __future__ import annotations

from dara.methods import TABLE

# Every method's label, colour and marker live in the method table (dara.methods); "base" (the model before RL, a
# row of the evaluation tables) is the one entry that is not a method.
BASE = {"label": "Base", "color": "#7f7f7f", "marker": "x"}
METHOD_ORDER: tuple[str, ...] = ("base", *(method.name for method in TABLE))
METHOD_LABELS: dict[str, str] = {"base": BASE["label"], **{method.name: method.label for method in TABLE}}
METHOD_COLORS: dict[str, str] = {"base": BASE["color"], **{method.name: method.color for method in TABLE}}
METHOD_MARKERS: dict[str, str] = {"base": BASE["marker"], **{method.name: method.marker for method in TABLE}}


def _check(method: str) -> str:
    if method not in METHOD_COLORS:
        raise ValueError(f"unknown method {method!r}; known: {list(METHOD_ORDER)}")
    return method


def color(method: str) -> str:
    return METHOD_COLORS[_check(method)]


def label(method: str) -> str:
    return METHOD_LABELS[_check(method)]


def marker(method: str) -> str:
    return METHOD_MARKERS[_check(method)]


def ordered(methods) -> list[str]:
    """The given methods in the paper's order (baselines first, DARA last)."""
    methods = {_check(method) for method in methods}
    return [method for method in METHOD_ORDER if method in methods]
