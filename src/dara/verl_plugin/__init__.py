"""DARA inside verl without a fork (made for verl 0.9.1; see docs/paper_scale.md).

``pip install -e .`` writes a ``verl.plugins`` entry point (``dara = dara.verl_plugin.entry``) into the package
metadata. ``import verl`` imports that module, which calls `register`, in the driver and in every Ray process that
imports verl:

- our estimators enter verl's advantage registry (``dara_sym``, ``dara_asym``, ``dara_gdpo``, ``dara_dvao``,
  ``dara_gd2po_hard``, ``dara_static_sym``, ``dara_static_asym``, ``dara_grpo``, ``dara_shuffled``), and
- the V1 trainer ``dara_sync`` (`dara.verl_plugin.trainer.DaraPPOTrainer`) enters verl's trainer registry; it is
  the route by which the per-reward columns reach the estimators (select it with
  ``trainer.v1.trainer_mode=dara_sync``).

verl swallows plugin errors (logged at DEBUG), so `assert_registered` checks the outcome; the launcher and the
trainer call it, and a run never starts on a half-registered plugin.
"""

from __future__ import annotations

import logging

VERL_VERSION = "0.9.1"  # the verl release this plugin was written against; see docs/paper_scale.md
TRAINER_MODE = "dara_sync"


def policy_step(verl_step: int) -> int:
    """How many updates the policy had made when verl step ``verl_step`` sampled its rollout: verl 0.9.1 counts its
    global steps from 1 and the sync trainer hands the actor's weights to the rollout at the end of each step, so
    ``verl_step - 1``. It is the step of metrics.parquet's row for that rollout, as every backend numbers its rows
    (`dara.verl_backend.logs`)."""
    if verl_step < 1:
        raise ValueError(f"verl's training steps start at 1; got a rollout of step {verl_step}")
    return verl_step - 1

logger = logging.getLogger(__name__)
_REGISTRATION_ERRORS: list[str] = []


def register() -> None:
    """Register our estimators and trainer in verl's registries (idempotent); run by `dara.verl_plugin.entry`."""
    _REGISTRATION_ERRORS.clear()
    try:
        _register_estimators()
    except Exception as error:  # recorded for assert_registered: verl would swallow it silently
        _REGISTRATION_ERRORS.append(f"estimators: {error!r}")
        raise
    try:
        from dara.verl_plugin import trainer  # noqa: F401  (registers on import)
    except Exception as error:  # recorded for assert_registered, whatever went wrong
        _REGISTRATION_ERRORS.append(f"trainer {TRAINER_MODE!r}: {error!r}")
        if not isinstance(error, ImportError):
            raise
        # The V1 trainer needs verl's full runtime (transfer_queue, ray, ...); estimator-only use stays possible.
        logger.warning("dara: V1 trainer %r not registered: %s", TRAINER_MODE, error)


def _register_estimators() -> None:
    from verl.trainer.ppo import core_algos

    from dara.verl_plugin.estimators import ESTIMATORS

    for name, fn in ESTIMATORS.items():
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and existing is not fn:
            if getattr(existing, "__module__", "") == fn.__module__:
                continue  # already registered by an earlier import of this module
            raise ValueError(f"verl already has an estimator named {name!r} ({existing!r}); ours would clash")
        core_algos.register_adv_est(name)(fn)


def assert_registered(require_trainer: bool = True) -> None:
    """Raise if ``import verl`` did not register everything this plugin provides."""
    import verl  # noqa: F401  (loads the entry points)
    from verl.trainer.ppo import core_algos

    from dara.verl_plugin.estimators import ESTIMATORS

    missing = [name for name in ESTIMATORS if name not in core_algos.ADV_ESTIMATOR_REGISTRY]
    problems = []
    if missing:
        problems.append(f"estimators not in verl's registry: {missing}")
    if require_trainer:
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

        if TRAINER_MODE not in TRAINER_REGISTRY:
            problems.append(f"trainer {TRAINER_MODE!r} not in verl's trainer registry")
    if problems:
        detail = "; ".join(problems + _REGISTRATION_ERRORS)
        raise RuntimeError(
            f"the dara verl plugin is not registered ({detail}). Is dara installed in this environment "
            "(`pip install --no-deps -e .`, which writes the verl.plugins entry point), and is "
            "VERL_USE_EXTERNAL_PLUGINS unset, 'auto' or containing 'dara'?"
        )
