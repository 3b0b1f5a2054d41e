"""verl's PPO entry point with the plugin checked first: ``python -m dara.verl_plugin.main <hydra overrides>``.

It runs `verl.trainer.main_ppo.main` unchanged (same Hydra config, same overrides) after `assert_registered`, so a
run never starts when ``import verl`` failed to register our estimators and trainer (verl hides plugin errors).
"""

from dara.verl_plugin import assert_registered


def main() -> None:
    assert_registered(require_trainer=True)
    from verl.trainer.main_ppo import main as verl_main

    verl_main()


if __name__ == "__main__":
    main()
