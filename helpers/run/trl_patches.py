"""Every patch the kit puts on TRL's private code, in one place: this is where a TRL upgrade breaks the kit first.

Written for trl 1.15.0 and transformers 5.17.0 (requirements*.txt). `install_trainer_patches(trainer, preset)`
installs them on one trainer instance (never the class), in this order; each later one wraps what the earlier ones
left (the lab's step timer, lab.step_timing, goes on after all of them, so it times the CPU versions):

| patched attribute                                   | by                                 | when                         |
|-----------------------------------------------------|------------------------------------|------------------------------|
| trl.trainer.utils._ChunkedLogProbFunction           | patch_trl_for_cpu                  | CPU PyTorch (no Triton)      |
| GRPOTrainer._generate_single_turn                   | speed_up_grpo_on_cpu               | cpu backend                  |
| GRPOTrainer._get_per_token_logps_and_entropies      | speed_up_grpo_on_cpu               | cpu backend                  |
| GRPOTrainer._generate_and_score_completions         | take_old_logps_from_the_first_pass | cpu, num_iterations > 1      |
| GRPOTrainer._compute_loss                           | take_old_logps_from_the_first_pass | cpu, num_iterations > 1      |
| GRPOTrainer._get_per_token_logps_and_entropies      | take_old_logps_from_the_first_pass | cpu, num_iterations > 1      |
| trainer.reward_funcs (the plain functions, wrapped) | TrainingHealth.watch_rewards  | a TrainingHealth callback    |
| ProgressCallback (bar kept, its dict of logs not printed), PrinterCallback (removed) in trainer.callback_handler.callbacks
                                                      | one_line_per_step                  | a TrainingDashboard that is not verbose |

The last two change no method: the reward functions' outputs are checked (helpers.run.health), and each logged step
prints the kit's one line (helpers.run.dashboard) instead of transformers' dict of ~40 metrics, which metrics.jsonl
keeps in full (RunOptions.verbose, --verbose, prints it again). Those two callbacks install their part themselves
(their `install_patches(trainer)`, which install_trainer_patches calls), so this module imports neither of them and
both can read TRL's private state through it.

Besides the patches, every read of TRL's private state is here too: `latest_batch_logs` (GRPOTrainer._logs, read by
the dashboard's samples and AdvantageStats) and `trl_compute_loss` (GRPOTrainer._compute_loss run on a stand-in
trainer: lesson 08's truth, helpers.teaching.grpo_math.trl_loss). tests/test_trl_patches.py checks each name they
read against the pinned TRL's source.

The lab wraps more of them, outside the course: lab/step_timing.py (each step's phases) and lab/benchmark_memory.py
(GPU memory per phase). PATCHED_METHODS holds the table above for code: tests install every patch on a real trainer
and check that what changed is exactly what it lists. The maths the CPU patches call lives in helpers.cpu_compat (a
plain-PyTorch log-prob kernel, the shared-prompt loss, the bf16 sampler).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import types

import torch
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from helpers import cpu_decode, speedups
from helpers.cpu_compat import PlainSampler, TorchChunkedLogProb, cpu_has_native_bf16, shared_prompt_logps
from helpers.messages import say
from helpers.model import generate_shared_prefix, merged_lora

# TRL's private methods the patches below replace (lab/step_timing.py names the ones its timer wraps itself: it
# loads without torch; tests/test_trl_patches.py and lab/tests check both lists against the pinned TRL)
LOGPS_METHOD = "_get_per_token_logps_and_entropies"
GENERATE_AND_SCORE_METHOD = "_generate_and_score_completions"

# (object on the trainer, "" for the trainer itself) -> the private methods replaced on that instance, by patch.
PATCHED_METHODS = {
    "speed_up_grpo_on_cpu": {"": ("_generate_single_turn", LOGPS_METHOD)},
    "take_old_logps_from_the_first_pass": {"": (GENERATE_AND_SCORE_METHOD, "_compute_loss", LOGPS_METHOD)},
}


def patch_trl_for_cpu() -> bool:
    """TRL computes log-probabilities with a Triton kernel, which CPU PyTorch lacks (TRL then holds None there and
    the first step fails with "'NoneType' object has no attribute 'apply'"): install the plain-PyTorch stand-in.
    Returns True if it was needed."""
    from trl.trainer import utils  # TRL is imported after Unsloth on the GPU path: never at this module's import

    if getattr(utils, "_ChunkedLogProbFunction", None) is not None:
        return False
    utils._ChunkedLogProbFunction = TorchChunkedLogProb
    return True


def install_trainer_patches(trainer, preset=None) -> None:
    """Install the kit's patches on this trainer, in the order of the table above. preset: asks for bf16
    sampling and loss on CPU (cpu_bf16_sampling, cpu_bf16_loss), used only where the CPU has native bf16."""
    if trainer.args.use_cpu:  # each group's prompt once in generation and loss (lab/docs/performance.md)
        patch_trl_for_cpu()
        bf16 = {name: bool(preset and getattr(preset, name, False)) for name in ("cpu_bf16_sampling", "cpu_bf16_loss")}
        if any(bf16.values()) and not cpu_has_native_bf16():
            say(f"{' and '.join(n for n, on in bf16.items() if on)}: this CPU has no native bf16 (AVX512-BF16 or "
                "AMX), where bf16 is slower than fp32; running in fp32 instead")
            bf16 = dict.fromkeys(bf16, False)
        speed_up_grpo_on_cpu(trainer, bf16_sampling=bf16["cpu_bf16_sampling"], bf16_loss=bf16["cpu_bf16_loss"])
    for callback in list(trainer.callback_handler.callbacks):  # TrainingHealth, TrainingDashboard: their own part
        install = getattr(callback, "install_patches", None)
        if callable(install):
            install(trainer)


class BarOnlyProgress(ProgressCallback):
    """transformers' progress bar without its dict of every logged metric (the kit prints one line per step)."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        return None


def one_line_per_step(trainer) -> None:
    """Swap transformers' ProgressCallback (bar + a dict of ~40 metrics per log) for BarOnlyProgress and drop its
    PrinterCallback (the dict alone, with disable_tqdm); notebooks' NotebookProgressCallback prints no dict: kept."""
    callbacks = trainer.callback_handler.callbacks
    for i, callback in enumerate(callbacks):
        if type(callback) is ProgressCallback:
            callbacks[i] = BarOnlyProgress()
    callbacks[:] = [c for c in callbacks if type(c) is not PrinterCallback]


# ------------------------------------------------------------------------------------------------- CPU speed-ups
# A CPU GRPO step of the cpu preset is one prompt x 8 completions. TRL repeats the prompt 8 times, so generation
# pre-fills the same ~130 tokens 8 times and the loss runs them through the model (forward and backward) 8 times.
# speed_up_grpo_on_cpu does that shared work once (generation: helpers.model.generate_shared_prefix; loss:
# helpers.cpu_compat.shared_prompt_logps), and generates with the LoRA adapter merged into the weights
# (helpers.model.merged_lora: one matmul per projection instead of three). Same mathematics, different summation
# order; measured in lab/docs/performance.md. Anything they do not recognise (prompts that are not in groups, images,
# MoE aux loss, softcapped heads) goes to TRL's own code unchanged.


def _sampler_for(policy, bf16_sampling: bool):
    """The PlainSampler that samples for this policy (bf16, or fp32 with speed-up plain_sampler), or None: the
    policy itself samples (a model without peft, or plain_sampler off). Under accelerate's DDP each rank samples with
    its own copy (tests/test_scale_out.py: the ranks' weights stay equal)."""
    if not hasattr(policy, "get_base_model"):
        return None
    if bf16_sampling:
        return PlainSampler(policy, torch.bfloat16)
    return PlainSampler(policy, torch.float32) if speedups.enabled("plain_sampler") else None


def _loss_precision(trainer, bf16_loss: bool):
    """The loss's autocast: bf16 on the CPU (cpu_bf16_loss; the log-prob head stays fp32), else accelerate's."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16_loss else trainer.accelerator.autocast()


def speed_up_grpo_on_cpu(trainer, bf16_sampling: bool = False, bf16_loss: bool = False):
    """Install the faster generation and the shared-prompt loss on this trainer instance (not the class); returns
    the trainer.

    Completions are sampled with the shared prompt pre-filled once, by a plain fp32 copy of the policy with the
    step's LoRA merged in (PlainSampler; the same samples as TRL's own generate), or with bf16_sampling by a bf16
    copy (faster where the CPU has native bf16, see cpu_has_native_bf16; different samples). bf16_loss: the loss's
    forward and backward under bf16 autocast. Each speed-up can be turned off by name (helpers.speedups)."""
    if getattr(trainer, "_kit_cpu_speedups", False):
        return trainer
    policy = trainer.accelerator.unwrap_model(trainer.model)
    sampler = _sampler_for(policy, bf16_sampling)
    trainer._kit_sampler = sampler
    trainer._kit_bf16_loss = bf16_loss
    original_generate_turn = trainer._generate_single_turn
    original_logps = trainer._get_per_token_logps_and_entropies

    def _generate_single_turn(self, *args, **kwargs):
        if getattr(self, "use_vllm", False) or getattr(self, "use_transformers_continuous_batching", False):
            return original_generate_turn(*args, **kwargs)
        model = self.accelerator.unwrap_model(self.model)
        if sampler is not None:
            sampling_model, merged = sampler.sync(), contextlib.nullcontext()
        else:
            sampling_model, merged = model, merged_lora(model)
        # the fallback is bound now: with plain_sampler off sampling_model is `model`, whose generate is replaced below
        plain_generate = functools.partial(cpu_decode.generate, sampling_model, fallback=sampling_model.generate)
        model.generate = lambda input_ids=None, attention_mask=None, generation_config=None, **kw: (
            generate_shared_prefix(sampling_model, input_ids, attention_mask, generation_config, plain_generate, **kw))
        try:
            with merged:
                return original_generate_turn(*args, **kwargs)
        finally:
            del model.generate  # back to the class's generate

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                           **multimodal):
        with _loss_precision(self, bf16_loss):
            result = None
            if (speedups.enabled("shared_prompt_loss") and not compute_aux_loss
                    and all(value is None for value in multimodal.values())):
                result = shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, self.temperature,
                                             compute_entropy=compute_entropy, batch_size=batch_size)
            if result is None:
                return original_logps(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                                      compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss,
                                      **multimodal)
        return result[0], result[1], None

    trainer._generate_single_turn = types.MethodType(_generate_single_turn, trainer)
    trainer._get_per_token_logps_and_entropies = types.MethodType(_get_per_token_logps_and_entropies, trainer)
    if speedups.enabled("old_logps_first_pass") and old_logps_from_first_pass(trainer):
        take_old_logps_from_the_first_pass(trainer)
    trainer._kit_cpu_speedups = True
    return trainer


def old_logps_from_first_pass(trainer) -> bool:
    """True when every slice of a sampled batch is first trained on by the weights that sampled it: TRL's no-grad
    pass for the old log-probabilities then equals the first loss pass, detached (num_iterations > 1, one
    generation per optimizer step, no vLLM)."""
    args = trainer.args
    return (trainer.num_iterations > 1 and args.steps_per_generation == args.gradient_accumulation_steps
            and not getattr(trainer, "use_vllm", False))


def take_old_logps_from_the_first_pass(trainer):
    """With num_iterations > 1 TRL runs the whole batch through the model once more, without gradient, to get the
    log-probabilities PPO-style clipping compares with. Those are the values the batch's first loss pass computes
    (same weights, same inputs, no dropout), so keep that pass's, detached, for the later iterations instead."""
    original_score = trainer._generate_and_score_completions
    original_loss = trainer._compute_loss
    original_logps = trainer._get_per_token_logps_and_entropies

    def _generate_and_score_completions(self, *args, **kwargs):
        iterations, self.num_iterations = self.num_iterations, 1  # TRL then skips its no-grad pass
        try:
            return original_score(*args, **kwargs)
        finally:
            self.num_iterations = iterations

    def _compute_loss(self, model, inputs):
        if "old_per_token_logps" in inputs:  # a later iteration: the first one stored them
            return original_loss(model, inputs)
        self._kit_first_pass = []
        try:
            loss = original_loss(model, inputs)  # TRL uses per_token_logps.detach() when they are missing
            inputs["old_per_token_logps"] = self._kit_first_pass[0]  # the buffered batch keeps them
        finally:
            self._kit_first_pass = None
        return loss

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = original_logps(*args, **kwargs)
        if getattr(self, "_kit_first_pass", None) is not None:
            self._kit_first_pass.append(result[0].detach())
        return result

    trainer._generate_and_score_completions = types.MethodType(_generate_and_score_completions, trainer)
    trainer._compute_loss = types.MethodType(_compute_loss, trainer)
    trainer._get_per_token_logps_and_entropies = types.MethodType(_get_per_token_logps_and_entropies, trainer)


# ------------------------------------------------------------------------------------ reads of TRL's private state
LOGS_ATTRIBUTE = "_logs"  # GRPOTrainer's store of the latest generation batch (built in __init__)
LOG_KEYS = ("prompt", "completion", "rewards", "advantages")  # what the kit reads of it


def latest_batch_logs(trainer) -> dict | None:
    """GRPOTrainer._logs: the prompts, completions, per-function rewards ({name: values}) and advantages of the latest
    generation batch (TRL fills it whether or not log_completions is on). None when there is no trainer or it keeps
    no such dict (another TRL: the dashboard then shows curves only)."""
    logs = getattr(trainer, LOGS_ATTRIBUTE, None) if trainer is not None else None
    return logs if isinstance(logs, dict) else None


# GRPOConfig fields whose values trl_compute_loss's stand-in trainer holds (the caller reads them: their defaults
# are TRL's, so a TRL that changes a default changes the loss with it).
LOSS_CONFIG_FIELDS = ("epsilon", "epsilon_high", "loss_type", "beta", "top_entropy_quantile",
                      "off_policy_mask_threshold", "importance_sampling_level", "use_bias_correction_kl", "delta")


class _OneProcess:
    """What _compute_loss asks of accelerate, for one process: gather and reduce are the identity."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def _loss_stand_in(logps, config: dict, max_completion_length: int):
    """The trainer attributes GRPOTrainer._compute_loss reads, for one process, no vLLM, no accumulation; its forward
    pass (_get_per_token_logps_and_entropies) returns `logps`."""
    import torch

    epsilon, high = config["epsilon"], config["epsilon_high"]
    return types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None),
        top_entropy_quantile=config["top_entropy_quantile"],
        off_policy_mask_threshold=config["off_policy_mask_threshold"],
        importance_sampling_level=config["importance_sampling_level"], beta=config["beta"],
        args=types.SimpleNamespace(use_bias_correction_kl=config["use_bias_correction_kl"], delta=config["delta"],
                                   steps_per_generation=1),
        loss_type=config["loss_type"], epsilon_low=epsilon, epsilon_high=epsilon if high is None else high,
        use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=_OneProcess(), max_completion_length=max_completion_length,
        _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics={"train": collections.defaultdict(list)},
    )


def _loss_inputs(logps, old_logps, advantages, mask, ref_logps=None) -> dict:
    """The batch _compute_loss reads: one generation batch, a one-token prompt (the forward pass is stubbed out)."""
    import torch

    b, t = logps.shape
    return {"prompt_ids": torch.zeros(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1, dtype=torch.long),
            "completion_ids": torch.zeros(b, t, dtype=torch.long), "completion_mask": mask,
            "advantages": torch.as_tensor(advantages, dtype=torch.float32), "old_per_token_logps": old_logps,
            "num_items_in_batch": mask.sum(), **({"ref_per_token_logps": ref_logps} if ref_logps is not None else {})}


def trl_compute_loss(logps, old_logps, advantages, mask, config: dict, ref_logps=None,
                     max_completion_length: int | None = None):
    """GRPOTrainer._compute_loss itself on these per-token log-probabilities (completions x tokens): the forward pass
    is replaced by `logps`, everything after it (the ratio, the clipping, the loss type's averaging) is TRL's code.
    config: a value for each of LOSS_CONFIG_FIELDS; ref_logps: for beta > 0; max_completion_length defaults to the
    tokens given. Returns TRL's loss tensor (with a gradient back to logps when logps has one)."""
    import torch
    from trl import GRPOTrainer

    mask = torch.as_tensor(mask).float()
    length = logps.size(1) if max_completion_length is None else max_completion_length
    trainer = _loss_stand_in(logps, config, length)
    return GRPOTrainer._compute_loss(trainer, None, _loss_inputs(logps, old_logps, advantages, mask, ref_logps))
