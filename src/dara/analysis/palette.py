"""One colour, label and marker per method, shared by every figure so a method looks the same everywhere.

Colours are the Okabe-Ito colour-blind-safe set; the two DARA variants share a hue family (blue) and
the baselines take the others. Unknown method names raise instead of getting a fallback colour.
"""

from __future__ import annotations

METHOD_ORDER: tuple[str, ...] = (
    "base",
    "grpo",
    "gdpo",
    "dvao",
    "gd2po_hard",
    "static_sym",
    "static_asym",
    "dara_sym",
    "dara_asym",
)

METHOD_LABELS: dict[str, str] = {
    "base": "Base",
    "grpo": "GRPO",
    "gdpo": "GDPO",
    "dvao": "DVAO",
    "gd2po_hard": "GD²PO-Hard",
    "static_sym": "Static-Sym",
    "static_asym": "Static-Asym",
    "dara_sym": "DARA-Sym",
    "dara_asym": "DARA-Asym",
}

METHOD_COLORS: dict[str, str] = {
    "base": "#7f7f7f",
    "grpo": "#E69F00",
    "gdpo": "#D55E00",
    "dvao": "#009E73",
    "gd2po_hard": "#CC79A7",
    "static_sym": "#56B4E9",
    "static_asym": "#9A7D00",  # Okabe-Ito yellow, darkened to read on white
    "dara_sym": "#0072B2",
    "dara_asym": "#000080",
}

METHOD_MARKERS: dict[str, str] = {
    "base": "x",
    "grpo": "s",
    "gdpo": "D",
    "dvao": "v",
    "gd2po_hard": "^",
    "static_sym": "<",
    "static_asym": ">",
    "dara_sym": "o",
    "dara_asym": "P",
}


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
