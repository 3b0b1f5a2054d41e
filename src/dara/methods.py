"""The study's advantage methods, one row each: every other list of methods derives from this table.

The estimators (`dara.advantages`), the experiment schema's method enum, the figures' labels and colours, the verl
estimator names, the launchers and the trainers all read a method's properties here, and
``tests/test_methods.py`` checks that they agree. Adding a method means one row below and its loop in
`dara.advantages_loop` (the independent check); a new formula also means its estimator, one class registered under
the formula's name in `dara.advantages` (which refuses, at import, a row whose formula has none). The estimator
options a method reads (`Method.options`) follow from its columns.

Columns:
    formula      "grpo" (z-score of the summed rewards), "dvao" (DVAO's group-variance weighting), "per_channel"
                 (z-score each channel, weight, sum, batch-normalise: GDPO, GD2PO-Hard, static and DARA) or
                 "shuffled" (the drift control: GDPO's advantages permuted across the batch, so a response's
                 advantage carries no information about its own rewards)
    calibration  how a per-channel method applies its weights w_k: "sym" (w_k * Z_k) or "asym"
                 (Z_k + (w_k - 1) * max(Z_k, 0), i.e. only positive advantages scaled); None for the others
    weights      where w_k comes from: "unit" (all ones), "static" (fixed, from the experiment), "density"
                 (DARA's rule from the active-group densities); None where the formula has no channel weights
    verl_name    the name our estimator is registered under in verl's registry (distinct from verl's own names)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    formula: str
    calibration: str | None
    weights: str | None
    verl_name: str
    color: str
    marker: str

    @property
    def needs_static_weights(self) -> bool:
        """static_sym / static_asym: the experiment must give one fixed weight per reward."""
        return self.weights == "static"

    @property
    def is_density_weighted(self) -> bool:
        """DARA-Sym / DARA-Asym: the weights follow the active-group densities every step."""
        return self.weights == "density"

    @property
    def drops_conflicts(self) -> bool:
        """GD2PO-Hard: responses whose channels disagree in sign get advantage 0 and a per-response loss weight."""
        return self.name == "gd2po_hard"

    @property
    def options(self) -> tuple[str, ...]:
        """The estimator options (`dara.advantages.EstimatorOptions` fields) this method reads. Every method
        z-scores with ``eps`` and reports densities with ``tau``; the rest follows from its columns."""
        own = ["tau", "eps", "singletons"]
        if self.formula in ("per_channel", "shuffled"):
            own.append("batch_norm")
        if self.weights == "density":
            own.append("w_max")
        if self.weights == "static":
            own.append("static_weights")
        if self.drops_conflicts:
            own.append("sign_eps")
        if self.formula == "dvao":
            own += ["base_weights", "dvao_eps"]
        return tuple(own)


# Colours: the Okabe-Ito colour-blind-safe set; the two DARA variants share the blue family; the shuffled control is
# a neutral dark grey (darker than the figures' "base" grey, #7f7f7f, which marks the model before RL).
TABLE: tuple[Method, ...] = (
    Method("grpo", "GRPO", "grpo", None, None, "dara_grpo", "#E69F00", "s"),
    Method("gdpo", "GDPO", "per_channel", "sym", "unit", "dara_gdpo", "#D55E00", "D"),
    Method("dvao", "DVAO", "dvao", None, None, "dara_dvao", "#009E73", "v"),
    Method("gd2po_hard", "GD²PO-Hard", "per_channel", "sym", "unit", "dara_gd2po_hard", "#CC79A7", "^"),
    Method("static_sym", "Static-Sym", "per_channel", "sym", "static", "dara_static_sym", "#56B4E9", "<"),
    # Okabe-Ito yellow, darkened to read on white
    Method("static_asym", "Static-Asym", "per_channel", "asym", "static", "dara_static_asym", "#9A7D00", ">"),
    # the drift control: what training does when the advantages carry no signal (docs/methods.md)
    Method("shuffled", "Shuffled (control)", "shuffled", None, None, "dara_shuffled", "#595959", "h"),
    Method("dara_sym", "DARA-Sym", "per_channel", "sym", "density", "dara_sym", "#0072B2", "o"),
    Method("dara_asym", "DARA-Asym", "per_channel", "asym", "density", "dara_asym", "#000080", "P"),
)

METHODS: tuple[str, ...] = tuple(method.name for method in TABLE)
"""Every method name, in the paper's order (baselines first, then the shuffled control, DARA last)."""

_BY_NAME = {method.name: method for method in TABLE}


def get_method(name: str) -> Method:
    """The table row of ``name``; a ValueError naming the known methods otherwise."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}") from None


def _check_table() -> None:
    # which formulas exist is dara.advantages' registry of estimators, checked there
    calibrations, sources = {"sym", "asym"}, {"unit", "static", "density"}
    for method in TABLE:
        per_channel = method.formula == "per_channel"
        if per_channel != (method.calibration in calibrations) or per_channel != (method.weights in sources):
            raise ValueError(f"method {method.name}: calibration and weights are set for per-channel methods only")
    if len({m.verl_name for m in TABLE}) != len(TABLE) or len(_BY_NAME) != len(TABLE):
        raise ValueError("method names and verl names must be unique")


_check_table()
