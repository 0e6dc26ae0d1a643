"""helpers.run.trl_patches: every patch on TRL's private methods is named in its table, and nothing else is patched."""

from helpers.config import get_preset
from helpers.run import trl_patches
from tests.test_cpu_compat import tiny_grpo_trainer


def _instance_overrides(obj) -> set[str]:
    """Attributes set on this instance that shadow a method of its class (what a patch on the instance does)."""
    return {name for name in vars(obj) if callable(getattr(type(obj), name, None))}


def _patched(trainer) -> dict[str, set[str]]:
    return {"": _instance_overrides(trainer), "accelerator": _instance_overrides(trainer.accelerator),
            "callback_handler": _instance_overrides(trainer.callback_handler)}


def test_what_install_trainer_patches_changes_is_exactly_the_table(tmp_path):
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2, lambda completions, **kw: [0.0] * len(completions),
                                max_steps=2, num_iterations=2)  # cpu and num_iterations > 1: every patch applies
    before = _patched(trainer)
    trl_patches.install_trainer_patches(trainer, get_preset("cpu"))
    changed = {where: names - before[where] for where, names in _patched(trainer).items()}
    listed = {"": set(), "accelerator": set(), "callback_handler": set()}
    for targets in trl_patches.PATCHED_METHODS.values():
        for where, names in targets.items():
            listed[where] |= set(names)
    assert changed == listed, "a patch on TRL is missing from PATCHED_METHODS, or the table names one that is gone"
    trainer.train()  # the patched trainer still trains (two steps on one sampled batch)
    assert trainer.state.global_step == 2


def test_the_patches_go_in_once(tmp_path):
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2, lambda completions, **kw: [0.0] * len(completions))
    trl_patches.install_trainer_patches(trainer)
    timer, generate = trainer._step_timer, trainer._generate_single_turn
    trl_patches.install_trainer_patches(trainer)  # a cell run twice: no second wrapper (it would count time twice)
    assert trainer._step_timer is timer and trainer._generate_single_turn is generate


def test_every_patched_method_exists_in_the_pinned_trl():
    """The contract a TRL upgrade breaks first: each private method the table names is still there."""
    from accelerate import Accelerator
    from transformers.trainer_callback import CallbackHandler
    from trl import GRPOTrainer

    owners = {"": GRPOTrainer, "accelerator": Accelerator, "callback_handler": CallbackHandler}
    missing = [f"{owners[where].__name__}.{name}" for targets in trl_patches.PATCHED_METHODS.values()
               for where, names in targets.items() for name in names if not callable(getattr(owners[where], name, None))]
    assert not missing, f"the pinned TRL/transformers no longer has: {missing}"
