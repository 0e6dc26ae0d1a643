"""Every self-check exercise (helpers.teaching.exercises) against known-right and known-wrong answers.

A wrong answer must fail with feedback that names the failing case; a right one must pass; the reference solution
printed by .solution() must itself pass; hint() and solution() print something. Fast: no model is loaded.
"""

from __future__ import annotations

import math
import re
import statistics

import pytest

from trl import GRPOConfig, GRPOTrainer

from helpers import prompts
from helpers.teaching import exercises as E
from helpers.teaching.exercises import nb05_vllm, registry
from helpers.teaching import grpo_math, reruns
from helpers.teaching.grpo_math import group_advantages
from helpers.rewards import answer_of, answers_match, completion_text

# ------------------------------------------------------------------------------------------- answers


def right_wrong_right(n_right, group_size):
    if n_right in (0, group_size):
        return 0.0, 0.0
    m = n_right / group_size
    s = math.sqrt((n_right * (1 - m) ** 2 + (group_size - n_right) * m ** 2) / (group_size - 1))
    return (1 - m) / (s + 1e-4), -m / (s + 1e-4)


def _pop_std_right_wrong(n_right, group_size):
    m = n_right / group_size
    s = math.sqrt(m * (1 - m))
    return ((1 - m) / s, -m / s) if s else (0.0, 0.0)


def trainable_right(model):
    """peft's own count (PeftModel.get_nb_trainable_parameters reads only named_parameters: any module will do)."""
    from peft import PeftModel

    trainable, total = PeftModel.get_nb_trainable_parameters(model)
    return trainable / total if total else 0.0


def trainable_packed(model):  # numel() as it is: a 4-bit weight counted at half its size
    ps = list(model.parameters())
    total = sum(p.numel() for p in ps)
    return sum(p.numel() for p in ps if p.requires_grad) / total if total else 0.0


def brevity_right(prompts=None, completions=None, **kwargs):
    return [0.5 if len(completion_text(c).split()) <= 100 else 0.0 for c in completions]


def advantages_right(rewards):
    n = len(rewards)
    m = sum(rewards) / n
    s = math.sqrt(sum((r - m) ** 2 for r in rewards) / (n - 1))
    return [(r - m) / (s + 1e-4) for r in rewards]


def pass_at_k_right(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def gsm8k_right(record, worked_example=True):
    gold = record["answer"].split("####")[-1].strip().replace(",", "")
    return {"prompt": prompts.build_messages(record["question"], worked_example=worked_example), "answer": gold,
            "question": record["question"]}


def gsm8k_wrong(**change):
    """gsm8k_right with one mistake: change maps a key to a function of (record, worked_example, right value)."""
    def row(record, worked_example=True):
        right = gsm8k_right(record, worked_example)
        return {k: change[k](record, worked_example, v) if k in change else v for k, v in right.items()
                if change.get(k, True) is not None}
    return row


def correctness_right(prompts=None, completions=None, answer=None, **kwargs):
    return [2.0 if (p := answer_of(completion_text(c))) is not None and answers_match(p, g) else 0.0
            for c, g in zip(completions, answer)]


STRICT_TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")


STRICT_LAYOUT = re.compile(r"<reasoning>\n.*\n</reasoning>\n<answer>\n.*\n</answer>", re.DOTALL)  # as lesson 04's


def strict_right(prompts=None, completions=None, **kwargs):
    texts = [completion_text(c).strip() for c in completions]
    return [0.5 if all(t.count(tag) == 1 for tag in STRICT_TAGS) and STRICT_LAYOUT.fullmatch(t) else 0.0
            for t in texts]


def config_right(p, runtime, output_dir, save_steps, precision=None, via_module=False, **change):
    """05's make_config: the preset's fields and the card's precision (change: one field made wrong); via_module:
    called as trl.GRPOConfig(...), the module-qualified spelling."""
    on_gpu = p.backend == "unsloth"
    bf16_ok = on_gpu and runtime.bf16_supported
    kwargs = dict(output_dir=output_dir, num_generations=p.num_generations,
                  per_device_train_batch_size=p.per_device_train_batch_size,
                  gradient_accumulation_steps=p.gradient_accumulation_steps,
                  max_completion_length=p.max_completion_length, temperature=p.temperature,
                  scale_rewards=p.scale_rewards, beta=p.beta, learning_rate=p.learning_rate,
                  weight_decay=p.weight_decay, warmup_steps=p.warmup_steps, lr_scheduler_type=p.lr_scheduler_type,
                  max_grad_norm=p.max_grad_norm, optim=p.optim, max_steps=p.max_steps,
                  num_iterations=p.num_iterations, seed=p.seed,
                  **(precision or dict(bf16=bf16_ok, fp16=on_gpu and not bf16_ok, use_cpu=not on_gpu)),
                  use_vllm=on_gpu and p.fast_inference, gradient_checkpointing=p.gradient_checkpointing and not on_gpu,
                  logging_steps=p.logging_steps, save_strategy="steps" if save_steps else "no",
                  save_steps=save_steps or 500, report_to="none", log_completions=False, disable_tqdm=False,
                  dataloader_num_workers=0)
    for name, value in change.items():
        if value is None:
            kwargs.pop(name)
        else:
            kwargs[name] = value(p) if callable(value) else value
    if via_module:
        import trl

        return trl.GRPOConfig(**kwargs)
    return GRPOConfig(**kwargs)


def _peak(settings: dict) -> str:
    """The predicted peak the budget exercise's feedback must name (the memory model's, as the check computes it)."""
    return f"{E.nb05.budget_estimate(settings).peak_gb:.2f} GB"


def config_wrong(**change):
    return lambda p, runtime, output_dir, save_steps: config_right(p, runtime, output_dir, save_steps, **change)


def trainer_right(model, tokenizer, reward_funcs, config, train_dataset, callbacks):
    return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward_funcs, args=config,
                       train_dataset=train_dataset, callbacks=callbacks)


def trainer_swapped(model, tokenizer, reward_funcs, config, train_dataset, callbacks):
    return GRPOTrainer(model=tokenizer, processing_class=model, reward_funcs=reward_funcs, args=config,
                       train_dataset=train_dataset, callbacks=callbacks)


def trainer_positional(model, tokenizer, reward_funcs, config, train_dataset, callbacks):
    return GRPOTrainer(model, reward_funcs, config, train_dataset, callbacks=callbacks)  # no tokenizer


def policy_loss_right(logps, old_logps, advantages, mask, epsilon=0.2):
    """08's exercise 8.1: TRL's default ('dapo') masked, clipped token-level loss."""
    import torch

    ratio = torch.exp(logps - old_logps)
    a = advantages.unsqueeze(1)
    return (-torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * a) * mask).sum() / mask.sum()


RIGHT = {
    ("nb01", "right_wrong_advantages"): right_wrong_right,
    ("nb02", "trainable_fraction"): trainable_right,
    ("nb03", "gsm8k_to_row"): gsm8k_right,
    ("nb03", "questions_per_run"): lambda steps, completions, g: steps * completions // g,
    ("nb04", "my_correctness_reward"): correctness_right,
    ("nb04", "my_strict_format_reward"): strict_right,
    ("nb04", "brevity_reward"): brevity_right,
    ("nb04", "my_advantages"): advantages_right,
    ("nb04", "prediction"): "c",
    ("nb05", "make_config"): config_right,
    ("nb05", "zero_spread_chance"): lambda p, g: p ** g + (1 - p) ** g,
    ("nb05", "make_trainer"): trainer_right,
    ("nb05", "learned_or_not"): {"A": "did not learn", "B": "learned", "C": "did not learn", "D": "learned"},
    ("nb05", "clipped_objective"): lambda r, a, e=0.2: min(r * a, max(1 - e, min(r, 1 + e)) * a),
    ("nb05", "kl_penalty"): lambda lp, ref: math.exp(ref - lp) - (ref - lp) - 1,
    ("nb05", "beta_prediction"): "b",
    ("nb05", "budget_fix"): {**E.nb05.CLASSMATE, "gradient_checkpointing": True, "gpu_memory_utilization": 0.3},
    ("nb05", "vllm_sizing"): lambda *args: nb05_vllm.truth(nb05_vllm.SizingCase("", *args)),  # the kit's arithmetic
    ("nb05", "rerun_prediction"): "c",
    ("nb05", "recipe_choice"): {"learning_rate": 2.5e-4, "beta": 0.0, "because": ["default-seed2", "lr-1e-3",
                                                                                  "beta-0.04"]},
    ("nb06", "my_pass_at_k"): pass_at_k_right,
    ("nb07", "largest_completion_length"): max(L for L in range(64, 8193, 64) if E.nb07.lab_fits(L).fits),
    ("nb08", "policy_loss"): policy_loss_right,
    ("nb08", "grpo_train"): E.nb08.reference_train,  # a student's own loop, right and broken: tests/test_grpo_step.py
}


def _pop_std_advantages(rewards):
    n, m = len(rewards), sum(rewards) / len(rewards)
    s = math.sqrt(sum((r - m) ** 2 for r in rewards) / n)
    return [(r - m) / s if s else 0.0 for r in rewards]


def _no_epsilon_torch(rewards):
    import torch

    r = torch.tensor(rewards)
    return ((r - r.mean()) / r.std()).tolist()  # 0 / 0 = nan on a group of equal rewards


# (notebook, question, wrong answer, words the feedback must contain: the failing case and why)
WRONG = [
    ("nb01", "right_wrong_advantages", lambda k, g: (1 - k / g, -k / g), ["1 right of 4", "(1.4997, -0.4999)", "did not divide"]),
    ("nb01", "right_wrong_advantages", _pop_std_right_wrong, ["1 right of 4", "(1.7321, -0.5774)", "population std"]),
    ("nb01", "right_wrong_advantages", lambda k, g: (1.0, 0.0), ["1 right of 4", "raw reward", "baseline"]),
    ("nb01", "right_wrong_advantages", lambda k, g: right_wrong_right(k, g)[::-1], ["1 right of 4", "swapped"]),
    ("nb01", "right_wrong_advantages", lambda k, g: (1 - k / g) / math.sqrt(k * (g - k) / (g * (g - 1))),
     ["1 right of 4", "return a pair"]),
    ("nb01", "right_wrong_advantages", lambda k, g: ((1 - k / g) / math.sqrt(k * (g - k) / (g * (g - 1))),
                                 -k / g / math.sqrt(k * (g - k) / (g * (g - 1)))),
     ["0 right of 4 (every completion wrong)", "ZeroDivisionError", "return (0.0, 0.0)"]),
    ("nb01", "right_wrong_advantages", lambda k, g: ((1 - k / g) / (math.sqrt(k * (g - k) / (g * (g - 1))) + 1e-4),
                                 -k / g / (math.sqrt(k * (g - k) / (g * (g - 1))) + 1e-4)),
     ["0 right of 4 (every completion wrong)", "(10000.0000, 0.0000)", "every advantage is 0"]),
    ("nb01", "right_wrong_advantages", lambda k, g: (0.5, -0.5) if k not in (0, g) else (1.0, 0.0),
     ["1 right of 4", "(1.4997, -0.4999)"]),
    ("nb01", "right_wrong_advantages", lambda k, g: right_wrong_right(k, g) if k not in (0, g) else (1.0, -1.0),
     ["0 right of 4", "every completion scored the same"]),
    ("nb01", "right_wrong_advantages", (1.5, -0.5), ["pass the function itself"]),
    ("nb02", "trainable_fraction", lambda m: 1.0, ["10 trainable of 120", "0.0833"]),
    ("nb02", "trainable_fraction", trainable_packed, ["4-bit model", "0.0909", "packs two 4-bit weights", "element_size"]),
    ("nb02", "trainable_fraction", lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)
     / max(1, sum(p.numel() for p in m.parameters() if not p.requires_grad)), ["110 of 110", "it should be 1.0000"]),
    ("nb02", "trainable_fraction", lambda m: 1 / 0, ["110 of 110", "ZeroDivisionError"]),
    ("nb02", "trainable_fraction", lambda m: 100 * trainable_right(m), ["110 of 110", "not a percentage"]),
    ("nb02", "trainable_fraction", lambda m: 1 - trainable_right(m), ["110 of 110", "frozen share"]),
    ("nb02", "trainable_fraction", lambda m: (lambda ps: sum(p.requires_grad for p in ps) / len(ps))(list(m.parameters())),
     ["10 trainable of 120", "counts tensors", "numel"]),
    ("nb06", "my_pass_at_k", lambda n, c, k: min(1.0, c * k / n), ["n=10 samples", "do not add"]),
    ("nb06", "my_pass_at_k", lambda n, c, k: math.comb(c, k) / math.comb(n, k), ["k=2", "ALL k picked"]),
    ("nb07", "largest_completion_length", 8192, ["does not fit", "not the card's 14.56 GB"]),
    ("nb01", "right_wrong_advantages", lambda k, g: (2 * right_wrong_right(k, g)[0], right_wrong_right(k, g)[1])
     if k not in (0, g) else (0.0, 0.0), ["1 right of 4", "sum to 0"]),
    ("nb04", "my_advantages", lambda r: [x / 2 for x in r], ["[4.0, 0.0, 2.5, 0.0]", "sum to 0"]),
    ("nb03", "questions_per_run", lambda steps, completions, g: steps * completions,
     ["max_steps=40, 8 completions per step, num_generations=4", "returned 320", "should be 80", "divide by"]),
    ("nb03", "questions_per_run", lambda steps, completions, g: steps * g, ["returned 160", "should be 80", "not questions"]),
    ("nb03", "questions_per_run", lambda steps, completions, g: completions / g, ["returned 2.0", "max_steps steps"]),
    ("nb03", "questions_per_run", lambda steps, completions, g: steps, ["num_generations=4", "returned 40", "should be 80"]),
    ("nb03", "questions_per_run", lambda steps, completions, g: steps * completions // 8,
     ["max_steps=40, 8 completions per step, num_generations=4", "should be 80"]),
    ("nb03", "questions_per_run", 40, ["pass the function itself"]),
    ("nb04", "brevity_reward", lambda prompts=None, completions=None, **kw: [0.5 for _ in completions],
     ["gave 0.5", "101-word answer", "should be 0.0"]),
    ("nb04", "brevity_reward", lambda prompts=None, completions=None, **kw: [0.5 if len(c) <= 100 else 0.0 for c in completions],
     ["exactly 100 words", "gave 0.0", "should be 0.5", "not characters"]),
    ("nb04", "brevity_reward", lambda prompts=None, completions=None, **kw:
     [0.5 if len(str(c).split()) < 100 else 0.0 for c in completions], ["exactly 100 words", "should be 0.5", "<=, not <"]),
    ("nb04", "brevity_reward", lambda prompts=None, completions=None, **kw:
     [0.5 if len(c.split()) <= 100 else 0.0 for c in completions], ["conversational", "AttributeError"]),
    ("nb04", "brevity_reward", lambda prompts=None, completions=None, **kw:
     0.5 if len(completion_text(completions[0]).split()) <= 100 else 0.0, ["10-word answer", "list"]),
    ("nb04", "brevity_reward", lambda prompts=None, completions=None, **kw:
     [0.5 if len(completion_text(completions[0]).split()) <= 100 else 0.0] * len(completions),
     ["batch of three", "[0.5, 0.0, 0.5]"]),
    ("nb04", "my_advantages", _pop_std_advantages, ["[4.0, 0.0, 2.5, 0.0]", "population std"]),
    ("nb04", "my_advantages", lambda r: [x - sum(r) / len(r) for x in r], ["[4.0, 0.0, 2.5, 0.0]", "did not divide"]),
    ("nb04", "my_advantages", lambda r: [(x - sum(r) / len(r)) / 1e-4 for x in r], ["[4.0, 0.0, 2.5, 0.0]"]),
    ("nb04", "my_advantages", lambda r: [(x - sum(r) / len(r)) / statistics.stdev(r) for x in r],
     ["[2.0, 2.0, 2.0, 2.0]", "std is 0", "epsilon", "TRL", "1e-4"]),  # no epsilon: ZeroDivisionError
    ("nb04", "my_advantages", _no_epsilon_torch, ["[2.0, 2.0, 2.0, 2.0]", "nan", "std is 0", "epsilon", "TRL", "1e-4"]),
    ("nb05", "zero_spread_chance", lambda p, g: p ** g, ["p=0.5, G=2", "right OR all are wrong"]),
    ("nb05", "zero_spread_chance", lambda p, g: 1 - p ** g - (1 - p) ** g, ["p=0.5, G=4", "0.125000"]),
    ("nb05", "zero_spread_chance", lambda p, g: p * g, ["p=0.5, G=2", "multiply chances"]),
    ("nb05", "zero_spread_chance", 0.5, ["pass the function itself"]),
    ("nb05", "learned_or_not", {"A": "learned", "B": "learned", "C": "did not learn", "D": "learned"},
     ["run A", "0.22 -> 0.04", "correctness reward averaged"]),
    ("nb05", "learned_or_not", {"A": "did not learn", "B": "learned", "C": "learned", "D": "learned"},
     ["run C", "0.30 -> 0.12", "entropy went"]),
    ("nb05", "learned_or_not", {"A": "did not learn", "B": "did not learn", "C": "did not learn", "D": "learned"},
     ["run B", "0.14 -> 0.40"]),
    ("nb05", "learned_or_not", {"A": "did not learn"}, ["run B", "has no answer"]),
    ("nb05", "learned_or_not", {"A": "collapsed", "B": "learned", "C": "did not learn", "D": "learned"},
     ["run A", "'learned' or 'did not learn'"]),
    ("nb05", "learned_or_not", ["learned"] * 4, ["a dict"]),
    ("nb05", "clipped_objective", lambda r, a, e=0.2: r * a, ["ratio=1.5, advantage=1.0", "without clipping"]),
    ("nb05", "clipped_objective", lambda r, a, e=0.2: max(1 - e, min(r, 1 + e)) * a, ["ratio=0.5, advantage=1.0", "min of the"]),
    ("nb05", "clipped_objective", lambda r, a, e=0.2: min(r * a, max(1 - 0.2, min(r, 1 + 0.2)) * a), ["epsilon=0.1"]),
    ("nb05", "kl_penalty", lambda lp, ref: ref - lp, ["logp=-0.5, ref_logp=-1.0", "plain log-ratio"]),
    ("nb05", "kl_penalty", lambda lp, ref: math.exp(lp - ref) - (lp - ref) - 1, ["logp=-0.5, ref_logp=-1.0", "sign of d"]),
    ("nb05", "kl_penalty", lambda lp, ref: (lp - ref) ** 2, ["logp=-0.5, ref_logp=-1.0", "exp(d) - d - 1"]),
    ("nb05", "kl_penalty", 0.0, ["pass the function itself"]),
    ("nb05", "beta_prediction", "a", ["not 'a'", "0.22 -> 0.48", "0.22 -> 0.18", "entropy stayed higher"]),
    ("nb05", "beta_prediction", "c", ["not 'c'", "added at every token"]),
    ("nb05", "beta_prediction", "z", ["one letter"]),
    ("nb06", "my_pass_at_k", lambda n, c, k: c / n, ["n=4 samples, c=1 correct, k=2", "0.5000", "pass@1 only"]),
    ("nb06", "my_pass_at_k", lambda n, c, k: 1 - (1 - c / n) ** k, ["k=2", "WITH replacement"]),
    ("nb06", "my_pass_at_k", lambda n, c, k: 1 - math.comb(n - c, k) / math.comb(n, k - 1), ["c=0 correct, k=1", "returned -3.0"]),
    ("nb07", "largest_completion_length", 256, ["max_completion_length=256", "fits too"]),
    ("nb07", "largest_completion_length", 8192, ["max_completion_length=8192", "does not fit"]),
    ("nb07", "largest_completion_length", 700, ["multiple of 64"]),
    ("nb08", "policy_loss", lambda lp, old, adv, mask, epsilon=0.2: -policy_loss_right(lp, old, adv, mask, epsilon),
     ["the sign is flipped"]),  # every other mistake: tests/test_grpo_step.py
    ("nb08", "grpo_train", lambda *a, **k: E.nb08.reference_train(*a, **k, mistake="no zero_grad"),
     ["optimizer.zero_grad()"]),  # every other loop mistake: tests/test_grpo_step.py
    ("nb03", "gsm8k_to_row", gsm8k_wrong(answer=lambda r, w, v: r["answer"].split("####")[-1].strip()),
     ["edge row 0", "'5,000'", "strip the commas"]),
    ("nb03", "gsm8k_to_row", gsm8k_wrong(answer=lambda r, w, v: r["answer"]), ["edge row 0", "worked solution"]),
    ("nb03", "gsm8k_to_row", gsm8k_wrong(answer=lambda r, w, v: int(v)), ["edge row 0", "keep it a string"]),
    ("nb03", "gsm8k_to_row", gsm8k_wrong(prompt=lambda r, w, v: prompts.build_messages(r["question"])),
     ["worked_example=False", "leave out", "4 messages"]),
    ("nb03", "gsm8k_to_row", gsm8k_wrong(prompt=lambda r, w, v: r["question"]), ["one string", "build_messages"]),
    ("nb03", "gsm8k_to_row", gsm8k_wrong(prompt=lambda r, w, v: v[1:]), ["no system message"]),
    ("nb03", "gsm8k_to_row", gsm8k_wrong(question=None), ["missing: question"]),
    ("nb03", "gsm8k_to_row", gsm8k_right({"question": "q", "answer": "#### 1"}), ["pass the function itself"]),
    ("nb04", "my_correctness_reward", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if answer_of(completion_text(c)) == g else 0.0 for c, g in zip(completions, answer)],
     ["differs from the kit's on", "a comma in the answer", "18.0 for 18", "answers_match"]),
    ("nb04", "my_correctness_reward", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if (p := answer_of(c.strip())) is not None and answers_match(p, g) else 0.0
      for c, g in zip(completions, answer)], ["chat-format completion", "AttributeError", "completion_text"]),
    ("nb04", "my_correctness_reward", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if "12" in completion_text(c) else 0.0 for c, g in zip(completions, answer)],
     ["differs from the kit's", "hedge", "two numbers"]),
    ("nb04", "my_correctness_reward", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if (p := answer_of(completion_text(c))) is not None and answers_match(p, answer[0]) else 0.0
      for c in completions], ["batch of three", "its own gold answer"]),
    ("nb04", "my_correctness_reward", lambda prompts=None, completions=None, answer=None, **kw: 2.0, ["returned 2.0", "list"]),
    ("nb04", "my_strict_format_reward", lambda prompts=None, completions=None, **kw:
     [strict_right(completions=[completion_text(c)])[0] if completion_text(c) == completion_text(c).strip() else 0.0
      for c in completions], ["spaces around it", "strip the text"]),
    ("nb04", "my_strict_format_reward", lambda prompts=None, completions=None, **kw:
     [0.5 if re.fullmatch(r"<reasoning>\n.*\n</reasoning>\n<answer>\n.*\n</answer>", completion_text(c).strip(),
                          re.DOTALL) else 0.0 for c in completions], ["second reasoning block", "exactly once"]),
    ("nb04", "my_strict_format_reward", lambda prompts=None, completions=None, **kw:
     [2 * x for x in strict_right(completions=completions)], ["perfect", "1", "scores 0.5", "never outweighs"]),
    ("nb04", "my_strict_format_reward", lambda prompts=None, completions=None, **kw:
     [0.5 if "<answer>" in completion_text(c) else 0.0 for c in completions],
     ["right, one line", "own line", "answer tag only", "no <reasoning> block"]),
    ("nb04", "my_correctness_reward", lambda prompts=None, completions=None, answer=None, **kw:
     [c / 2 for c in correctness_right(completions=completions, answer=answer)], ["perfect", "scores 2.0"]),
    ("nb04", "prediction", "a", ["not 'a'", "MINUS the group's mean"]),
    ("nb04", "prediction", "b", ["not 'b'", "std is unchanged"]),
    ("nb04", "prediction", "d", ["not 'd'", "reward - mean is unchanged"]),
    ("nb04", "prediction", "e", ["one letter"]),
    ("nb05", "make_config", config_wrong(precision=dict(bf16=False, fp16=False, use_cpu=True)),
     ["the t4 preset on a T4", "fp16 is False", "should be True", "Precision follows the card"]),
    ("nb05", "make_config", config_wrong(precision=dict(bf16=False, fp16=True)),
     ["the cpu preset", "use_cpu is False", "you left it out", "should be True"]),
    ("nb05", "make_config", config_wrong(per_device_train_batch_size=lambda p: p.per_device_train_batch_size // p.num_generations),
     ["per_device_train_batch_size", "counts completions, not prompts"]),
    ("nb05", "make_config", config_wrong(beta=None), ["beta=0.04", "beta is 0.0", "you left it out", "reference model"]),
    ("nb05", "make_config", config_wrong(max_completion_length=256), ["max_completion_length is 256", "logits"]),
    ("nb05", "make_config", config_wrong(learning_rate=1e-3), ["learning_rate is 0.001"]),
    ("nb05", "make_config", lambda p, runtime, output_dir, save_steps: None, ["called GRPOConfig 0 times"]),
    ("nb05", "make_trainer", trainer_swapped, ["model= should be the LoRA model", "got tokenizer"]),
    ("nb05", "make_trainer", trainer_positional, ["processing_class= should be the tokenizer", "got None"]),
    ("nb05", "make_trainer", lambda *args: None, ["called GRPOTrainer 0 times"]),
    ("nb05", "make_config", config_wrong(save_strategy="steps"), ["save_strategy is 'steps'", "no checkpoints"]),
    ("nb05", "make_config", config_wrong(use_vllm=False), ["the t4 preset on a T4", "use_vllm is False",
                                                           "vLLM engine Unsloth attached"]),
    ("nb05", "make_config", config_wrong(gradient_checkpointing=lambda p: p.gradient_checkpointing),
     ["the t4 preset on a T4", "gradient_checkpointing is True", "inside Unsloth"]),
    ("nb05", "budget_fix", dict(E.nb05.CLASSMATE), [_peak(E.nb05.CLASSMATE), "over the 7 GB budget", "activations",
                                                    "gradient_checkpointing=True"]),
    ("nb05", "budget_fix", {"gradient_checkpointing": True},
     [_peak({**E.nb05.CLASSMATE, "gradient_checkpointing": True}), "vLLM's reservation", "up front"]),
    ("nb05", "budget_fix", {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2},
     ["activations", "A smaller batch only divides them"]),
    ("nb05", "budget_fix", {"num_generations": 4, "per_device_train_batch_size": 16}, ["num_generations is 4",
                                                                                       "zero spread more often"]),
    ("nb05", "budget_fix", {"max_completion_length": 128, "gradient_checkpointing": True},
     ["max_completion_length is 128", "cut answer scores 0"]),
    ("nb05", "budget_fix", {"per_device_train_batch_size": 8, "gradient_checkpointing": True},
     ["8 completions per optimizer step", "gradient_accumulation_steps=2"]),
    ("nb05", "budget_fix", {"lora_dropout": 0.1}, ["not a setting the memory model reads"]),
    ("nb05", "budget_fix", {"gradient_checkpointing": True, "gpu_memory_utilization": 0.05},
     ["vLLM would not start", "gpu_memory_utilization x the memory free at load = 0.05 x", "cannot hold the weights", "KV cache", "raise gpu_memory_utilization"]),
    ("nb05", "budget_fix", ["gradient_checkpointing"], ["a dict"]),
    ("nb05", "rerun_prediction", "b", ["not 'b'", "learning_rate=5e-05", "mean +- 2 sd", "lower: beyond",
                                       "The learning rate sizes every step"]),
    ("nb05", "rerun_prediction", "a", ["not 'a'", "the default settings' 3 seeds end at", "lower: beyond"]),
    ("nb05", "rerun_prediction", "x", ["one letter"]),
    ("nb05", "recipe_choice", {"learning_rate": 1e-3, "beta": 0.0, "because": ["lr-1e-3"]},
     ["learning_rate=0.001 did not learn", "0.22 -> 0.04", "not faster learning"]),
    ("nb05", "recipe_choice", {"learning_rate": 5e-4, "beta": 0.0, "because": ["default-seed0"]},
     ["learning_rate=0.0005 was measured only by earlier-recipe-seed2", "num_iterations=1",
      "changed two settings at once, so it cannot tell which one did it", "0.30 -> 0.12"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4, "beta": 0.0,
                               "because": ["default-seed0", "earlier-recipe-seed2", "beta-0.04"]},
     ["earlier-recipe-seed2 changed learning_rate=0.0005, num_iterations=1",
      "that run changed two settings at once, so it cannot tell which one did it"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4, "beta": 0.04, "because": ["default-seed0"]},
     ["beta=0.04 did not learn", "0.22 -> 0.18"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4, "beta": 0.0, "because": ["default-seed0", "scale-none"]},
     ["scale-none changed another setting", "differ in that setting only"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4, "beta": 0.0, "because": ["default-seed0"]},
     ["for learning_rate=0.00025", "no run where another value did not"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4, "beta": 0.0, "because": ["default-seed0", "lr-1e-3"]},
     ["for beta=0", "no run where another value did not"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4, "beta": 0.0, "because": ["lr-1e-3", "beta-0.04"]},
     ["no run where it learned"]),
    ("nb05", "recipe_choice", {"learning_rate": 3e-4, "beta": 0.0, "because": []}, ["was not measured"]),
    ("nb05", "recipe_choice", {"learning_rate": 2.5e-4}, ["answer with a dict"]),
    ("nb05", "vllm_sizing", (2.74, 0.3), ["pass the function itself"]),  # each named mistake: tests/test_vllm_sizing.py
]


def _exercise(ns, name):
    """The exercise answered by `name` (its stable name: the answer the lesson's solution cell defines)."""
    return getattr(E.ALL[ns], name)


def _declared() -> set[tuple[str, str]]:
    return {(ns, getattr(module, entry["qid"]).name) for ns, module in E.ALL.items()
            for entry in registry.load()[module.LESSON]["exercises"]}


def test_every_notebook_has_an_exercise_and_every_exercise_is_tested():
    declared = _declared()
    assert {ns for ns, _ in declared} == {f"nb0{i}" for i in range(1, 9)}  # 09 is checked by helpers.capstone
    assert declared == set(RIGHT), "every exercise needs a known-right answer here"
    assert declared == {(ns, q) for ns, q, _, _ in WRONG}, "every exercise needs known-wrong answers here"


def test_every_solution_cell_has_a_judge_and_ex_qN_is_the_lessons_Nth():
    """registry.json (the lessons' solution cells) and the judges name the same exercises; `ex.qN` of a lesson is
    its N-th solution cell, numbered N.k in that order."""
    for lesson, entries in registry.load().items():
        if lesson == "09":
            continue
        module = E.ALL[f"nb{lesson}"]
        for k, entry in enumerate(entries["exercises"], 1):
            ex = getattr(module, f"q{k}")
            assert (ex.name, ex.qid, ex.number) == (entry["name"], f"q{k}", f"{int(lesson)}.{k}")
            assert ex is getattr(module, entry["name"])
    with pytest.raises(AttributeError, match="has no attribute 'q9'"):
        E.nb04.q9  # noqa: B018 - the lookup is the test


@pytest.mark.parametrize("key", sorted(RIGHT), ids=lambda k: f"{k[0]}.{k[1]}")
def test_right_answer_passes(key):
    result = _exercise(*key).check(RIGHT[key])
    assert result.passed, result.message
    assert repr(result).startswith("Correct!")


@pytest.mark.parametrize("ns,q,answer,words", WRONG, ids=[f"{w[0]}.{w[1]}-{i}" for i, w in enumerate(WRONG)])
def test_wrong_answer_fails_and_names_the_case(ns, q, answer, words):
    result = _exercise(ns, q).check(answer)
    assert not result.passed
    assert result.case, "a failing check names its case"
    for word in words:
        assert word in result.message, f"{word!r} not in feedback: {result.message}"
    assert repr(result).startswith("Not yet.")


@pytest.mark.parametrize("key", sorted(RIGHT), ids=lambda k: f"{k[0]}.{k[1]}")
def test_no_answer_says_what_to_do(key):
    result = _exercise(*key).check()
    assert not result.passed and "not answered yet" in result.message and result.case is None
    assert result.message.endswith(f"The task: {registry.find(key[1])['task']}")  # the lesson's own task line


def _lesson_scope() -> dict:
    """The names a lesson defines before its solution cells run (its imports and helpers), for exec'ing them."""
    from helpers.config import get_preset
    from helpers.memory import estimate
    return {"answer_from": answer_of, "completion_text": completion_text, "answers_match": answers_match,
            "TAGS": STRICT_TAGS, "STRICT": STRICT_LAYOUT, "prompts": prompts, "GRPOConfig": GRPOConfig,
            "GRPOTrainer": GRPOTrainer, "estimate": estimate, "t4": get_preset("t4"),
            "classmate": dict(E.nb05.CLASSMATE),
            "loss_fn": lambda *a, **k: grpo_math.policy_loss(*a, **k)["loss"], "epsilon": 0.2}  # 08's section 5


@pytest.mark.parametrize("key", sorted(RIGHT), ids=lambda k: f"{k[0]}.{k[1]}")
def test_printed_solution_is_the_lessons_and_passes_its_own_check(key, capsys):
    ex = _exercise(*key)
    ex.hint()
    ex.solution()
    out = capsys.readouterr().out
    assert out.startswith(f"Hint ({ex.qid}") and f"Solution ({ex.qid}):\n{registry.find(key[1])['solution']}" in out
    scope = _lesson_scope()
    exec(compile(registry.find(key[1])["solution"], f"<solution {key}>", "exec"), scope)  # noqa: S102 - the lesson's
    assert ex.check(scope[key[1]]).passed, "the lesson's solution passes its own check"


def test_the_solution_text_is_the_lesson_cell_with_its_blank_markers_as_comments():
    source = registry.find("make_config")["solution"]
    assert "# blank:" not in source and "bf16=bf16_ok,  # a T4 (compute capability 7.5) has no bf16 ..." in source
    assert f"exercise {registry.number('make_config')}" in registry.find("make_trainer")["solution"]  # filled in


def test_the_measured_runs_exercise_draws_four_panels_and_its_runs_are_unambiguous():
    import matplotlib

    matplotlib.use("Agg")
    fig = E.nb05.learned_or_not.plot()
    assert len([ax for ax in fig.axes if ax.get_title().startswith("run ")]) == 4
    assert all(E.nb05.learned(run) is not None for run in E.nb05.measured().values()), "each run clearly learned or did not"


def test_each_reward_gets_its_own_why_table():
    """A format reward is told about the layout, a correctness reward about the answer: never the other's reason."""
    def format_ignores_layout(prompts=None, completions=None, **kw):  # 0.5 for any <answer> block
        return [0.5 if "<answer>" in completion_text(c) else 0.0 for c in completions]

    def format_doubled(prompts=None, completions=None, **kw):
        return [2 * x for x in strict_right(completions=completions)]

    for wrong in (format_ignores_layout, format_doubled):
        message = E.nb04.my_strict_format_reward.check(wrong).message
        assert "as numbers" not in message and "answers_match" not in message, message
    assert set(E.nb04.FORMAT_WHY) >= {label for label, *_ in E.nb04.reward_cases()} - {"perfect"}


def test_a_budget_fix_where_vllm_cannot_start_is_refused_for_that_not_for_the_budget():
    """At gpu_memory_utilization 0.05 the peak (3.27 GB) is under the 7 GB budget, but vLLM's reservation cannot hold
    the weights: the check says vLLM would not start, and does not call it over the budget."""
    answer = {**E.nb05.CLASSMATE, "gradient_checkpointing": True, "gpu_memory_utilization": 0.05}
    assert not E.nb05.budget_estimate(answer).vllm_starts
    result = E.nb05.budget_fix.check(answer)
    assert not result.passed and result.message.startswith("vLLM would not start"), result.message
    assert "over the" not in result.message and "x the card" not in result.message


def test_the_vllm_reservation_is_said_one_way_in_the_memory_lessons_and_their_checks():
    """Unsloth sizes vLLM's reservation as gpu_memory_utilization x the memory free at load
    (helpers.memory.estimate.utilization_base_gb): no sentence of lessons 05 and 07 or their checks says 'x the card'."""
    from pathlib import Path

    kit = Path(__file__).resolve().parents[1]
    card = re.compile(r"utilization`?\s*(x|×|times)\s*(the\s+)?(card|14\.56)", re.IGNORECASE)
    for rel in ("lessons/05_train.py", "lessons/07_memory_lab.py", "helpers/teaching/exercises/nb05.py",
                "helpers/teaching/exercises/nb05_vllm.py", "helpers/teaching/exercises/nb07.py"):
        text = (kit / rel).read_text()
        assert not card.search(text), f"{rel}: {card.search(text).group(0)!r}"
    assert "the memory free at load" in E.nb05.budget_fix._hint[1]


def test_advantage_checker_uses_trl_formula():
    assert E.nb04.my_advantages.check(lambda r: group_advantages(r)).passed


def test_an_unanswered_exercise_says_not_answered_yet():
    def placeholder(*args, **kwargs):  # what a student copy's function body is until answered
        raise NotImplementedError("Student exercise: ...")

    for ns, q in _declared():
        for answer in (Ellipsis, None, placeholder):
            result = _exercise(ns, q).check(answer)
            if answer is placeholder and not callable(RIGHT[(ns, q)]):
                continue  # a value answer: the placeholder is ... (Ellipsis), checked above
            assert not result.passed and "not answered yet" in result.message, (ns, q, answer, result)


def test_right_wrong_checker_agrees_with_group_advantages():
    def via_kit(k, g):  # a student's route: ask the kit's function for one group
        adv = group_advantages([1.0] * k + [0.0] * (g - k))
        return (adv[0] if k else 0.0), (adv[-1] if k < g else 0.0)

    assert E.nb01.right_wrong_advantages.check(via_kit).passed
    assert E.nb01.right_wrong_truth(1, 4) == pytest.approx((1.5, -0.5), abs=1e-3)  # by hand: mean 0.25, sample std 0.5


def test_questions_checker_matches_the_presets():
    from helpers.config import PRESETS

    for name, p in PRESETS.items():
        budget = p.per_device_train_batch_size * p.gradient_accumulation_steps
        assert E.nb03.questions_truth(p.max_steps, budget, p.num_generations) == p.prompts_per_step * p.max_steps, name


def test_hints_come_in_levels_where_an_exercise_has_several(capsys):
    """hint() nudges and names the next level; hint(n) says more; a level past the last gives the last."""
    ex = E.nb05.make_config
    ex.hint()
    ex.hint(3)
    ex.hint(7)
    first, third, past = capsys.readouterr().out.strip().splitlines()
    assert first.startswith(f"Hint ({ex.qid}, 1 of 3): ") and first.endswith(f"(more: ex.{ex.qid}.hint(2))")
    assert third.startswith(f"Hint ({ex.qid}, 3 of 3): ") and "use_cpu=not on_gpu" in third and "more" not in third
    assert past == third


def test_module_qualified_and_aliased_calls_are_counted_as_the_call():
    """`trl.GRPOConfig(...)` after `import trl` (or an alias) is the same call as `GRPOConfig(...)`: it passes when
    right, and when wrong is judged on its fields, never refused as "called GRPOConfig 0 times"."""
    import trl

    scope = {"trl": trl, "config_right": config_right}
    exec("def make_config(p, runtime, output_dir, save_steps):\n"  # noqa: S102 - a cell with no `from trl import`
         "    return config_right(p, runtime, output_dir, save_steps, via_module=True)\n", scope)
    assert "GRPOConfig" not in scope
    result = E.nb05.make_config.check(scope["make_config"])
    assert result.passed, result.message
    assert trl.GRPOConfig is GRPOConfig, "the module's class is put back after judging"

    scope = {"t": trl}  # `import trl as t`
    exec("def make_trainer(model, tokenizer, reward_funcs, config, train_dataset, callbacks):\n"  # noqa: S102
         "    return t.GRPOTrainer(model=tokenizer, processing_class=model, reward_funcs=reward_funcs, args=config,\n"
         "                         train_dataset=train_dataset, callbacks=callbacks)\n", scope)
    result = E.nb05.make_trainer.check(scope["make_trainer"])
    assert not result.passed and "model= should be the LoRA model" in result.message
    assert "0 times" not in result.message and trl.GRPOTrainer is GRPOTrainer


def test_a_call_with_no_route_to_trl_names_both_ways_to_import_it():
    scope = {}
    exec("def make_config(p, runtime, output_dir, save_steps):\n    return dict(num_generations=8)\n", scope)  # noqa: S102
    result = E.nb05.make_config.check(scope["make_config"])
    assert not result.passed and "from trl import GRPOConfig" in result.message and "trl.GRPOConfig(...)" in result.message


def test_the_rerun_check_grades_the_predicted_direction_against_the_seeds_spread(capsys):
    """The predict-then-rerun exercise (5.5): the prediction is recorded before anything runs; the check compares the
    changed run's final reward with the default settings' seeds' mean +- 2 sd (fake curves here: the real rerun is
    in the notebook's CI run, tests/test_notebooks.py's 05), up, down or inside, and explains either way; a
    prediction changed after the result is refused."""
    nb05 = E.nb05
    assert nb05.rerun_prediction.rerun("learning_rate", 5e-5, ...) is None
    assert "Record your prediction first" in capsys.readouterr().out
    for setting, value, words in (("learning_rate", 0.0, "above 0"), ("temperature", 2.5, "at most 2"),
                                  ("temperature", 1.0, "is the default"), ("beta", 0.1, "choose one of")):
        assert nb05.rerun_prediction.rerun(setting, value, "a") is None and words in capsys.readouterr().out
    seeds = [0.9, 1.0, 1.1]  # mean 1.0, sd 0.1: the band is 0.8 to 1.2

    def outcome(final, prediction):
        return nb05.RerunOutcome("learning_rate", 1e-3, prediction, [0.2] * (reruns.STEPS - 3) + [final] * 3, seeds)

    assert nb05.rerun_truth(outcome(1.25, "a").curve, seeds)[0] == "a"
    assert nb05.rerun_truth(outcome(0.75, "a").curve, seeds)[0] == "c"
    assert nb05.rerun_truth(outcome(1.15, "a").curve, seeds)[0] == "b"  # above every seed, inside 2 sd
    assert nb05.rerun_prediction.check("a", outcome=outcome(1.25, "a")).passed
    assert nb05.rerun_prediction.check("c", outcome=outcome(0.75, "c")).passed
    assert nb05.rerun_prediction.check("b", outcome=outcome(1.15, "b")).passed
    result = nb05.rerun_prediction.check("a", outcome=outcome(1.15, "a"))
    assert not result.passed and "is 1.150" in result.message and "0.800 to 1.200" in result.message
    assert "about the same" in result.message and "The learning rate sizes every step" in result.message
    result = nb05.rerun_prediction.check("c", outcome=outcome(1.25, "a"))
    assert not result.passed and "recorded 'a' before it ran" in result.message
    assert "final reward (last 3 groups): yours 1.150" in outcome(1.15, "b").table()


def test_the_kits_own_rerun_is_graded_against_the_stored_seeds():
    """Until the student's rerun ran, the check compares with the kit's own (RERUN_MEASURED): its curve has the
    rerun's steps, and the default settings' seeds are read for as many steps from the stored record."""
    nb05 = E.nb05
    m = nb05.RERUN_MEASURED
    assert len(m["curve"]) == reruns.STEPS and nb05._value_problem(m["setting"], m["value"]) is None
    assert len(nb05.default_finals(reruns.STEPS)) == 3
    truth, evidence = nb05.rerun_truth(m["curve"], nb05.default_finals(reruns.STEPS))
    assert truth == RIGHT[("nb05", "rerun_prediction")], evidence


def test_a_rerun_too_short_to_tell_a_change_from_a_seed_is_not_graded_as_one():
    """After 2 steps the default seeds' spread holds a run that learns nothing (the stored lr-0 controls), so a
    rerun that short is refused with the fix (its full length); the kit's own change (CI's 05 runs it at 2 steps)
    is graded on its stored full-length rerun instead, and the rerun says so."""
    nb05 = E.nb05
    assert nb05.too_short(reruns.STEPS) is None and "too few to tell" in nb05.too_short(2)
    short = nb05.RerunOutcome("temperature", 0.5, "b", [0.1, 0.1], nb05.default_finals(2))
    result = nb05.rerun_prediction.check("b", outcome=short)
    assert not result.passed and "too few to tell" in result.message and f"steps={reruns.STEPS}" in result.message
    m = nb05.RERUN_MEASURED
    kits = nb05.RerunOutcome(m["setting"], m["value"], "c", [0.1, 0.1], nb05.default_finals(2))
    assert nb05.rerun_prediction.check("c", outcome=kits).passed
    assert not nb05.rerun_prediction.check("b", outcome=nb05.RerunOutcome(m["setting"], m["value"], "b", [0.1, 0.1],
                                                                            nb05.default_finals(2))).passed


def test_the_rerun_runs_in_a_fresh_process_when_unsloth_is_loaded(monkeypatch, capsys):
    """On a T4 runtime Unsloth has patched TRL for the GPU: the CPU rerun goes to a new Python process, whose last
    stdout line is the rows as JSON."""
    import json
    import subprocess
    import sys
    import types

    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return types.SimpleNamespace(stdout="[grpo-kit] log line\n[grpo-kit] reusing an identical earlier run of 08's "
                                            "loop (temperature=0.3, 12 steps) from x.json\n"
                                            + json.dumps([{"curve": [0.1, 0.5]}]))

    monkeypatch.setitem(sys.modules, "unsloth", types.ModuleType("unsloth"))
    monkeypatch.setattr(subprocess, "run", fake_run)
    rows = reruns.loop_reruns_here_or_apart([{"temperature": 0.3}])
    assert rows == [{"curve": [0.1, 0.5]}]
    assert seen["cmd"][0] == sys.executable and json.loads(seen["cmd"][-3]) == [{"temperature": 0.3}]
    assert "reruns.loop_reruns" in seen["cmd"][2] and seen["cmd"][-2:] == ["reuse", str(reruns.STEPS)]
    out = capsys.readouterr().out
    assert "reusing an identical earlier run" in out and "log line" not in out  # the reuse is said; the log is not
    reruns.loop_reruns_here_or_apart([{}], reuse=False, steps=2)
    assert seen["cmd"][-2:] == ["again", "2"]


def test_an_identical_rerun_is_read_back_and_says_so(monkeypatch, tmp_path, capsys):
    """A rerun of 08's loop is deterministic on one machine: run again with the same change (the notebook after a
    disconnect, the homework's 05), it is read back instead of trained, and the output says so; a new value, other
    steps, other kit code or reuse=False trains again."""
    from helpers import reuse

    trained = []

    def fake_run(change, seed):
        trained.append(change["temperature"])
        return {"curve": [change["temperature"] / 10] * change["steps"]}

    monkeypatch.setattr(reruns, "_run", fake_run)
    monkeypatch.setattr(reruns, "_rerun_path", lambda key: tmp_path / f"{reuse.digest(key)}.json")
    first = reruns.loop_reruns([{"temperature": 0.3}])
    assert trained == [0.3] and "reusing" not in capsys.readouterr().out
    assert reruns.loop_reruns([{"temperature": 0.3}]) == first and trained == [0.3]
    assert "identical earlier run of 08's loop (temperature=0.3, 12 steps)" in capsys.readouterr().out
    assert len(reruns.loop_reruns([{"temperature": 0.3}], steps=2)[0]["curve"]) == 2 and trained == [0.3, 0.3]
    trained.pop()
    assert reruns.loop_reruns([{"temperature": 0.5}])[0]["curve"][0] == 0.05 and trained == [0.3, 0.5]
    reruns.loop_reruns([{"temperature": 0.3}], reuse=False)
    assert trained == [0.3, 0.5, 0.3]
    monkeypatch.setattr(reuse, "kit_sources", lambda: "the kit's code changed")
    reruns.loop_reruns([{"temperature": 0.3}])
    assert trained == [0.3, 0.5, 0.3, 0.3]
