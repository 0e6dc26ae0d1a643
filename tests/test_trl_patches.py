"""helpers.run.trl_patches: every patch on TRL's private methods is named in its table, and nothing else is patched;
every read of TRL's private state (GRPOTrainer._logs, GRPOTrainer._compute_loss) names only what the pinned TRL has."""

import inspect
import re
from types import SimpleNamespace

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
    logs = trl_patches.latest_batch_logs(trainer)  # what the dashboard and AdvantageStats read, after real steps
    assert set(trl_patches.LOG_KEYS) <= set(logs) and len(logs["completion"]) == len(logs["advantages"]) == 4  # 2 x 2


def test_the_patches_go_in_once(tmp_path):
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2, lambda completions, **kw: [0.0] * len(completions))
    trl_patches.install_trainer_patches(trainer)
    logps, generate = trainer._get_per_token_logps_and_entropies, trainer._generate_single_turn
    trl_patches.install_trainer_patches(trainer)  # a cell run twice: no second wrapper around the CPU versions
    assert trainer._get_per_token_logps_and_entropies is logps and trainer._generate_single_turn is generate


def test_every_patched_method_exists_in_the_pinned_trl():
    """The contract a TRL upgrade breaks first: each private method the table names is still there."""
    from accelerate import Accelerator
    from transformers.trainer_callback import CallbackHandler
    from trl import GRPOTrainer

    owners = {"": GRPOTrainer, "accelerator": Accelerator, "callback_handler": CallbackHandler}
    missing = [f"{owners[where].__name__}.{name}" for targets in trl_patches.PATCHED_METHODS.values()
               for where, names in targets.items() for name in names if not callable(getattr(owners[where], name, None))]
    assert not missing, f"the pinned TRL/transformers no longer has: {missing}"


def test_the_logs_the_kit_reads_are_built_and_filled_by_the_pinned_trl():
    """Contract for latest_batch_logs: GRPOTrainer.__init__ builds self._logs with every key the kit reads, and each
    generation batch fills them (outside any log_completions branch: the kit does not turn that on)."""
    from trl import GRPOTrainer

    attr, init = trl_patches.LOGS_ATTRIBUTE, inspect.getsource(GRPOTrainer.__init__)
    built = init[init.index(f"self.{attr} = {{"):]
    built = built[:built.index("}")]
    missing = [key for key in trl_patches.LOG_KEYS if f'"{key}":' not in built]
    assert not missing, f"GRPOTrainer.__init__ no longer builds self.{attr} with {missing}"
    fill = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert all(f'self.{attr}["{key}"]' in fill for key in trl_patches.LOG_KEYS)
    assert "if self.log_completions" not in fill[:fill.index(f'self.{attr}["completion"]')]


def test_latest_batch_logs_is_the_trainers_dict_or_none():
    logs = {"completion": ["7"], "advantages": [0.5]}
    assert trl_patches.latest_batch_logs(SimpleNamespace(_logs=logs)) is logs
    assert trl_patches.latest_batch_logs(SimpleNamespace()) is None  # a TRL without the store: curves only
    assert trl_patches.latest_batch_logs(SimpleNamespace(_logs=[1])) is None
    assert trl_patches.latest_batch_logs(None) is None


def test_the_loss_stand_in_gives_only_what_the_pinned_compute_loss_reads():
    """Contract for trl_compute_loss: _compute_loss(self, model, inputs) reads every attribute the stand-in trainer
    sets (a renamed one would silently fall back to nothing), every input key given, and every config field exists."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    assert list(inspect.signature(GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]
    src = inspect.getsource(GRPOTrainer._compute_loss)
    config = {name: GRPOConfig.__dataclass_fields__[name].default for name in trl_patches.LOSS_CONFIG_FIELDS}
    stand_in = trl_patches._loss_stand_in(torch.zeros(2, 3), config, 3)
    read = {name: set(re.findall(rf"self\.{name}\.(\w+)", src)) for name in ("args", "accelerator", "model")}
    unread = [n for n in vars(stand_in) if f"self.{n}" not in src]
    unread += [f"{where}.{n}" for where in read for n in vars(getattr(stand_in, where)) if n not in read[where]]
    unread += [f"accelerator.{n}" for n in dir(stand_in.accelerator) if not n.startswith("_")
               and n not in read["accelerator"]]
    assert not unread, f"the pinned GRPOTrainer._compute_loss no longer reads {unread}"
    zeros = torch.zeros(2, 3)
    keys = trl_patches._loss_inputs(zeros, zeros, [1.0, -1.0], torch.ones(2, 3), ref_logps=zeros)
    assert [k for k in keys if f'inputs["{k}"]' not in src and f'inputs.get("{k}"' not in src] == []
