"""verl's PPO entry point with the plugin checked first: ``python -m dara.verl_plugin.main <hydra overrides>``.

It runs `verl.trainer.main_ppo.main` unchanged (same Hydra config, same overrides) after `assert_registered`, so a
run never starts when ``import verl`` failed to register our estimators and trainer (verl hides plugin errors).
Afterwards it shuts down the local Ray cluster it started and waits for the cluster's own processes (verl leaves
that to Ray's exit hook, which does not wait); Ray's workers notice and exit a moment later.
"""

from dara.verl_plugin import assert_registered


def main() -> None:
    assert_registered(require_trainer=True)
    from verl.trainer.main_ppo import main as verl_main

    try:
        verl_main()
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown(wait_for_processes=True)


if __name__ == "__main__":
    main()
