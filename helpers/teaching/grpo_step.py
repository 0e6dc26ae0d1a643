"""TRL's own GRPO loss on given log-probabilities: the truth lesson 08 (one GRPO step from scratch) checks against.

    from helpers.teaching.grpo_step import trl_loss
    trl_loss(logps, old_logps, advantages, mask)   # GRPOTrainer._compute_loss, TRL's defaults, no model

GRPOTrainer._compute_loss starts with the model's forward pass; here that pass is replaced by the log-probabilities
given, and everything after it is TRL's code, run as is: the ratio, the clipping, the loss type's averaging. The
settings it reads are GRPOConfig's defaults (loss_type "dapo", epsilon 0.2, beta 0 in TRL 1.15), taken from the
dataclass, so a TRL that changes a default changes the truth with it. One process, no vLLM, no accumulation: one
generation batch, as lesson 08 has. tests/test_grpo_step.py checks it against helpers.teaching.grpo_math.policy_loss.
"""

from __future__ import annotations

import collections
import types


def trl_default(name: str):
    """The default of one GRPOConfig field (read from the dataclass: building a GRPOConfig sets up accelerate)."""
    from trl import GRPOConfig

    return GRPOConfig.__dataclass_fields__[name].default


class _OneProcess:
    """What _compute_loss asks of accelerate, for one process: gather and reduce are the identity."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(logps, old_logps, advantages, mask, epsilon: float | None = None, loss_type: str | None = None):
    """GRPOTrainer._compute_loss on these per-token log-probabilities (completions x tokens), with the old policy's
    log-probabilities, one advantage per completion and the completion mask. epsilon and loss_type default to
    GRPOConfig's. Returns TRL's loss tensor (with a gradient back to logps when logps has one)."""
    import torch
    from trl import GRPOTrainer

    epsilon = trl_default("epsilon") if epsilon is None else epsilon
    high = trl_default("epsilon_high")
    mask = torch.as_tensor(mask).float()
    advantages = torch.as_tensor(advantages, dtype=torch.float32)
    trainer = types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        top_entropy_quantile=trl_default("top_entropy_quantile"),
        off_policy_mask_threshold=trl_default("off_policy_mask_threshold"),
        importance_sampling_level=trl_default("importance_sampling_level"), beta=0.0,
        args=types.SimpleNamespace(use_bias_correction_kl=trl_default("use_bias_correction_kl"),
                                   delta=trl_default("delta"), steps_per_generation=1),
        loss_type=trl_default("loss_type") if loss_type is None else loss_type,
        epsilon_low=epsilon, epsilon_high=epsilon if high is None else high,
        use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=logps.size(1), accelerator=_OneProcess(),
        _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics={"train": collections.defaultdict(list)},
    )
    b, t = logps.shape
    inputs = {"prompt_ids": torch.zeros(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1, dtype=torch.long),
              "completion_ids": torch.zeros(b, t, dtype=torch.long), "completion_mask": mask,
              "advantages": advantages, "old_per_token_logps": old_logps, "num_items_in_batch": mask.sum()}
    return GRPOTrainer._compute_loss(trainer, None, inputs)
