"""Every self-check exercise (helpers.teaching.exercises) against known-right and known-wrong answers.

A wrong answer must fail with feedback that names the failing case; a right one must pass; the reference solution
printed by .solution() must itself pass; hint() and solution() print something. Fast: no model is loaded.
"""

from __future__ import annotations

import math
import re
import textwrap

import pytest

from trl import GRPOConfig, GRPOTrainer

from helpers import prompts
from helpers.teaching import exercises as E
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


def strict_right(prompts=None, completions=None, **kwargs):
    import re

    layout = re.compile(r"<reasoning>\n.*\n</reasoning>\n<answer>\n.*\n</answer>", re.DOTALL)
    texts = [completion_text(c).strip() for c in completions]
    return [0.5 if all(t.count(tag) == 1 for tag in STRICT_TAGS) and layout.fullmatch(t) else 0.0 for t in texts]


def config_right(p, runtime, output_dir, save_steps, precision=None, **change):
    """05's make_config: the preset's fields and the card's precision (change: one field made wrong)."""
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
    return GRPOConfig(**kwargs)


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
    ("nb01", "q1"): right_wrong_right,
    ("nb02", "q1"): trainable_right,
    ("nb03", "q1"): gsm8k_right,
    ("nb03", "q2"): lambda steps, completions, g: steps * completions // g,
    ("nb04", "q1"): correctness_right,
    ("nb04", "q2"): strict_right,
    ("nb04", "q3"): brevity_right,
    ("nb04", "q4"): advantages_right,
    ("nb04", "q5"): "c",
    ("nb05", "q1"): config_right,
    ("nb05", "q2"): lambda p, g: p ** g + (1 - p) ** g,
    ("nb05", "q3"): trainer_right,
    ("nb05", "q4"): {"A": "did not learn", "B": "learned", "C": "did not learn", "D": "learned"},
    ("nb05", "q5"): lambda r, a, e=0.2: min(r * a, max(1 - e, min(r, 1 + e)) * a),
    ("nb05", "q6"): lambda lp, ref: math.exp(ref - lp) - (ref - lp) - 1,
    ("nb05", "q7"): "b",
    ("nb06", "q1"): pass_at_k_right,
    ("nb07", "q1"): max(L for L in range(64, 4097, 64) if E.lab_fits(L).fits),
    ("nb08", "q1"): policy_loss_right,
}


def _pop_std_advantages(rewards):
    n, m = len(rewards), sum(rewards) / len(rewards)
    s = math.sqrt(sum((r - m) ** 2 for r in rewards) / n)
    return [(r - m) / s if s else 0.0 for r in rewards]


# (notebook, question, wrong answer, words the feedback must contain: the failing case and why)
WRONG = [
    ("nb01", "q1", lambda k, g: (1 - k / g, -k / g), ["1 right of 4", "(1.4997, -0.4999)", "did not divide"]),
    ("nb01", "q1", _pop_std_right_wrong, ["1 right of 4", "(1.7321, -0.5774)", "population std"]),
    ("nb01", "q1", lambda k, g: (1.0, 0.0), ["1 right of 4", "raw reward", "baseline"]),
    ("nb01", "q1", lambda k, g: right_wrong_right(k, g)[::-1], ["1 right of 4", "swapped"]),
    ("nb01", "q1", lambda k, g: (1 - k / g) / math.sqrt(k * (g - k) / (g * (g - 1))),
     ["1 right of 4", "return a pair"]),
    ("nb01", "q1", lambda k, g: ((1 - k / g) / math.sqrt(k * (g - k) / (g * (g - 1))),
                                 -k / g / math.sqrt(k * (g - k) / (g * (g - 1)))),
     ["0 right of 4 (every completion wrong)", "ZeroDivisionError", "return (0.0, 0.0)"]),
    ("nb01", "q1", lambda k, g: ((1 - k / g) / (math.sqrt(k * (g - k) / (g * (g - 1))) + 1e-4),
                                 -k / g / (math.sqrt(k * (g - k) / (g * (g - 1))) + 1e-4)),
     ["0 right of 4 (every completion wrong)", "(10000.0000, 0.0000)", "every advantage is 0"]),
    ("nb01", "q1", lambda k, g: (0.5, -0.5) if k not in (0, g) else (1.0, 0.0),
     ["1 right of 4", "(1.4997, -0.4999)"]),
    ("nb01", "q1", lambda k, g: right_wrong_right(k, g) if k not in (0, g) else (1.0, -1.0),
     ["0 right of 4", "every completion scored the same"]),
    ("nb01", "q1", (1.5, -0.5), ["pass the function itself"]),
    ("nb02", "q1", lambda m: 1.0, ["10 trainable of 120", "0.0833"]),
    ("nb02", "q1", trainable_packed, ["4-bit model", "0.0909", "packs two 4-bit weights", "element_size"]),
    ("nb02", "q1", lambda m: sum(p.numel() for p in m.parameters() if p.requires_grad)
     / max(1, sum(p.numel() for p in m.parameters() if not p.requires_grad)), ["110 of 110", "it should be 1.0000"]),
    ("nb02", "q1", lambda m: 1 / 0, ["110 of 110", "ZeroDivisionError"]),
    ("nb03", "q2", lambda steps, completions, g: steps * completions,
     ["max_steps=40, 8 completions per step, num_generations=4", "returned 320", "should be 80", "divide by"]),
    ("nb03", "q2", lambda steps, completions, g: steps * g, ["returned 160", "should be 80", "not questions"]),
    ("nb03", "q2", lambda steps, completions, g: completions / g, ["returned 2.0", "max_steps steps"]),
    ("nb03", "q2", lambda steps, completions, g: steps, ["num_generations=4", "returned 40", "should be 80"]),
    ("nb03", "q2", lambda steps, completions, g: steps * completions // 8,
     ["max_steps=40, 8 completions per step, num_generations=4", "should be 80"]),
    ("nb03", "q2", 40, ["pass the function itself"]),
    ("nb04", "q3", lambda prompts=None, completions=None, **kw: [0.5 for _ in completions],
     ["gave 0.5", "101-word answer", "should be 0.0"]),
    ("nb04", "q3", lambda prompts=None, completions=None, **kw: [0.5 if len(c) <= 100 else 0.0 for c in completions],
     ["exactly 100 words", "gave 0.0", "should be 0.5"]),
    ("nb04", "q3", lambda prompts=None, completions=None, **kw:
     [0.5 if len(str(c).split()) < 100 else 0.0 for c in completions], ["exactly 100 words", "should be 0.5"]),
    ("nb04", "q3", lambda prompts=None, completions=None, **kw:
     [0.5 if len(c.split()) <= 100 else 0.0 for c in completions], ["conversational", "AttributeError"]),
    ("nb04", "q3", lambda prompts=None, completions=None, **kw:
     0.5 if len(completion_text(completions[0]).split()) <= 100 else 0.0, ["10-word answer", "list"]),
    ("nb04", "q3", lambda prompts=None, completions=None, **kw:
     [0.5 if len(completion_text(completions[0]).split()) <= 100 else 0.0] * len(completions),
     ["batch of three", "[0.5, 0.0, 0.5]"]),
    ("nb04", "q4", _pop_std_advantages, ["[4.0, 0.0, 2.5, 0.0]", "population std"]),
    ("nb04", "q4", lambda r: [x - sum(r) / len(r) for x in r], ["[4.0, 0.0, 2.5, 0.0]", "did not divide"]),
    ("nb04", "q4", lambda r: [(x - sum(r) / len(r)) / 1e-4 for x in r], ["[4.0, 0.0, 2.5, 0.0]"]),
    ("nb05", "q2", lambda p, g: p ** g, ["p=0.5, G=2", "right OR all are wrong"]),
    ("nb05", "q2", lambda p, g: 1 - p ** g - (1 - p) ** g, ["p=0.5, G=4", "0.125000"]),
    ("nb05", "q2", lambda p, g: p * g, ["p=0.5, G=2", "multiply chances"]),
    ("nb05", "q2", 0.5, ["pass the function itself"]),
    ("nb05", "q4", {"A": "learned", "B": "learned", "C": "did not learn", "D": "learned"},
     ["run A", "0.22 -> 0.04", "correctness reward averaged"]),
    ("nb05", "q4", {"A": "did not learn", "B": "learned", "C": "learned", "D": "learned"},
     ["run C", "0.30 -> 0.12", "entropy went"]),
    ("nb05", "q4", {"A": "did not learn", "B": "did not learn", "C": "did not learn", "D": "learned"},
     ["run B", "0.14 -> 0.40"]),
    ("nb05", "q4", {"A": "did not learn"}, ["run B", "has no answer"]),
    ("nb05", "q4", {"A": "collapsed", "B": "learned", "C": "did not learn", "D": "learned"},
     ["run A", "'learned' or 'did not learn'"]),
    ("nb05", "q4", ["learned"] * 4, ["a dict"]),
    ("nb05", "q5", lambda r, a, e=0.2: r * a, ["ratio=1.5, advantage=1.0", "without clipping"]),
    ("nb05", "q5", lambda r, a, e=0.2: max(1 - e, min(r, 1 + e)) * a, ["ratio=0.5, advantage=1.0", "min of the"]),
    ("nb05", "q5", lambda r, a, e=0.2: min(r * a, max(1 - 0.2, min(r, 1 + 0.2)) * a), ["epsilon=0.1"]),
    ("nb05", "q6", lambda lp, ref: ref - lp, ["logp=-0.5, ref_logp=-1.0", "plain log-ratio"]),
    ("nb05", "q6", lambda lp, ref: math.exp(lp - ref) - (lp - ref) - 1, ["logp=-0.5, ref_logp=-1.0", "sign of d"]),
    ("nb05", "q6", lambda lp, ref: (lp - ref) ** 2, ["logp=-0.5, ref_logp=-1.0", "exp(d) - d - 1"]),
    ("nb05", "q6", 0.0, ["pass the function itself"]),
    ("nb05", "q7", "a", ["not 'a'", "0.22 -> 0.48", "0.22 -> 0.18", "entropy stayed higher"]),
    ("nb05", "q7", "c", ["not 'c'", "added at every token"]),
    ("nb05", "q7", "z", ["one letter"]),
    ("nb06", "q1", lambda n, c, k: c / n, ["n=4 samples, c=1 correct, k=2", "0.5000", "pass@1 only"]),
    ("nb06", "q1", lambda n, c, k: 1 - (1 - c / n) ** k, ["k=2", "WITH replacement"]),
    ("nb06", "q1", lambda n, c, k: 1 - math.comb(n - c, k) / math.comb(n, k - 1), ["c=0 correct, k=1", "returned -3.0"]),
    ("nb07", "q1", 256, ["max_completion_length=256", "fits too"]),
    ("nb07", "q1", 4096, ["max_completion_length=4096", "does not fit"]),
    ("nb07", "q1", 700, ["multiple of 64"]),
    ("nb08", "q1", lambda lp, old, adv, mask, epsilon=0.2: -policy_loss_right(lp, old, adv, mask, epsilon),
     ["the sign is flipped"]),  # every other mistake: tests/test_grpo_step.py
    ("nb03", "q1", gsm8k_wrong(answer=lambda r, w, v: r["answer"].split("####")[-1].strip()),
     ["edge row 0", "'5,000'", "strip the commas"]),
    ("nb03", "q1", gsm8k_wrong(answer=lambda r, w, v: r["answer"]), ["edge row 0", "worked solution"]),
    ("nb03", "q1", gsm8k_wrong(answer=lambda r, w, v: int(v)), ["edge row 0", "keep it a string"]),
    ("nb03", "q1", gsm8k_wrong(prompt=lambda r, w, v: prompts.build_messages(r["question"])),
     ["worked_example=False", "leave out", "4 messages"]),
    ("nb03", "q1", gsm8k_wrong(prompt=lambda r, w, v: r["question"]), ["one string", "build_messages"]),
    ("nb03", "q1", gsm8k_wrong(prompt=lambda r, w, v: v[1:]), ["no system message"]),
    ("nb03", "q1", gsm8k_wrong(question=None), ["missing: question"]),
    ("nb03", "q1", gsm8k_right({"question": "q", "answer": "#### 1"}), ["pass the function itself"]),
    ("nb04", "q1", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if answer_of(completion_text(c)) == g else 0.0 for c, g in zip(completions, answer)],
     ["differs from the kit's on", "a comma in the answer", "18.0 for 18", "answers_match"]),
    ("nb04", "q1", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if (p := answer_of(c.strip())) is not None and answers_match(p, g) else 0.0
      for c, g in zip(completions, answer)], ["chat-format completion", "AttributeError", "completion_text"]),
    ("nb04", "q1", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if "12" in completion_text(c) else 0.0 for c, g in zip(completions, answer)],
     ["differs from the kit's", "hedge", "two numbers"]),
    ("nb04", "q1", lambda prompts=None, completions=None, answer=None, **kw:
     [2.0 if (p := answer_of(completion_text(c))) is not None and answers_match(p, answer[0]) else 0.0
      for c in completions], ["batch of three", "its own gold answer"]),
    ("nb04", "q1", lambda prompts=None, completions=None, answer=None, **kw: 2.0, ["returned 2.0", "list"]),
    ("nb04", "q2", lambda prompts=None, completions=None, **kw:
     [strict_right(completions=[completion_text(c)])[0] if completion_text(c) == completion_text(c).strip() else 0.0
      for c in completions], ["spaces around it", "strip the text"]),
    ("nb04", "q2", lambda prompts=None, completions=None, **kw:
     [0.5 if re.fullmatch(r"<reasoning>\n.*\n</reasoning>\n<answer>\n.*\n</answer>", completion_text(c).strip(),
                          re.DOTALL) else 0.0 for c in completions], ["second reasoning block", "exactly once"]),
    ("nb04", "q5", "a", ["not 'a'", "MINUS the group's mean"]),
    ("nb04", "q5", "b", ["not 'b'", "std is unchanged"]),
    ("nb04", "q5", "d", ["not 'd'", "reward - mean is unchanged"]),
    ("nb04", "q5", "e", ["one letter"]),
    ("nb05", "q1", config_wrong(precision=dict(bf16=False, fp16=False, use_cpu=True)),
     ["the t4 preset on a T4", "fp16 is False", "should be True", "Precision follows the card"]),
    ("nb05", "q1", config_wrong(precision=dict(bf16=False, fp16=True)),
     ["the cpu preset", "use_cpu is False", "you left it out", "should be True"]),
    ("nb05", "q1", config_wrong(per_device_train_batch_size=lambda p: p.per_device_train_batch_size // p.num_generations),
     ["per_device_train_batch_size", "counts completions, not prompts"]),
    ("nb05", "q1", config_wrong(beta=None), ["beta=0.04", "beta is 0.0", "you left it out", "reference model"]),
    ("nb05", "q1", config_wrong(max_completion_length=256), ["max_completion_length is 256", "logits"]),
    ("nb05", "q1", config_wrong(learning_rate=1e-3), ["learning_rate is 0.001"]),
    ("nb05", "q1", lambda p, runtime, output_dir, save_steps: None, ["called GRPOConfig 0 times"]),
    ("nb05", "q3", trainer_swapped, ["model= should be the LoRA model", "got tokenizer"]),
    ("nb05", "q3", trainer_positional, ["processing_class= should be the tokenizer", "got None"]),
    ("nb05", "q3", lambda *args: None, ["called GRPOTrainer 0 times"]),
]


def _exercise(ns, q):
    return getattr(E.ALL[ns], q)


def test_every_notebook_has_an_exercise_and_every_exercise_is_tested():
    declared = {(ns, q) for ns, space in E.ALL.items() for q in vars(space) if q.startswith("q")}
    assert {ns for ns, _ in declared} == {f"nb0{i}" for i in range(1, 9)}  # 09 is checked by helpers.capstone
    assert declared == set(RIGHT), "every exercise needs a known-right answer here"
    assert declared == {(ns, q) for ns, q, _, _ in WRONG}, "every exercise needs known-wrong answers here"


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


VALUE_ANSWERS = ("learned_or_not", "largest_completion_length", "prediction", "beta_prediction")


@pytest.mark.parametrize("key", sorted(RIGHT), ids=lambda k: f"{k[0]}.{k[1]}")
def test_printed_solution_passes_its_own_check(key, capsys):
    ex = _exercise(*key)
    ex.hint()
    ex.solution()
    out = capsys.readouterr().out
    assert out.startswith(f"Hint ({key[1]}") and f"Solution ({key[1]}):" in out
    source = textwrap.dedent(ex._solution)
    scope: dict = {}
    if key == ("nb07", "q1"):  # the lab notebook's own names
        from helpers.memory import estimate
        from helpers.config import get_preset

        scope.update(estimate=estimate, t4=get_preset("t4"))
    exec(compile(source, f"<solution {key}>", "exec"), scope)  # noqa: S102 - our own reference solution
    answer = next((scope[k] for k in VALUE_ANSWERS if k in scope), None)  # one name per exercise, never reused
    if answer is None:
        answer = next(v for k, v in scope.items() if callable(v) and not k.startswith("_")
                      and getattr(v, "__module__", None) is None and k not in ("completion_text", "estimate"))
    assert ex.check(answer).passed


def test_the_measured_runs_exercise_draws_four_panels_and_its_runs_are_unambiguous():
    import matplotlib

    matplotlib.use("Agg")
    fig = E.nb05.q4.plot()
    assert len([ax for ax in fig.axes if ax.get_title().startswith("run ")]) == 4
    assert all(E.learned(run) is not None for run in E.measured().values()), "each run clearly learned or did not"


def test_advantage_checker_uses_trl_formula():
    assert E.nb04.q4.check(lambda r: group_advantages(r)).passed


def test_an_unanswered_exercise_says_not_answered_yet():
    def placeholder(*args, **kwargs):  # what a student copy's function body is until answered
        raise NotImplementedError("Student exercise: ...")

    for ns, space in E.ALL.items():
        for q in [q for q in vars(space) if q.startswith("q")]:
            for answer in (Ellipsis, None, placeholder):
                result = getattr(space, q).check(answer)
                if answer is placeholder and not callable(RIGHT[(ns, q)]):
                    continue  # a value answer: the placeholder is ... (Ellipsis), checked above
                assert not result.passed and "not answered yet" in result.message, (ns, q, answer, result)


def test_right_wrong_checker_agrees_with_group_advantages():
    def via_kit(k, g):  # a student's route: ask the kit's function for one group
        adv = group_advantages([1.0] * k + [0.0] * (g - k))
        return (adv[0] if k else 0.0), (adv[-1] if k < g else 0.0)

    assert E.nb01.q1.check(via_kit).passed
    assert E.right_wrong_truth(1, 4) == pytest.approx((1.5, -0.5), abs=1e-3)  # by hand: mean 0.25, sample std 0.5


def test_questions_checker_matches_the_presets():
    from helpers.config import PRESETS

    for name, p in PRESETS.items():
        budget = p.per_device_train_batch_size * p.gradient_accumulation_steps
        assert E.questions_truth(p.max_steps, budget, p.num_generations) == p.prompts_per_step * p.max_steps, name


def test_hints_come_in_levels_where_an_exercise_has_several(capsys):
    """hint() nudges and names the next level; hint(n) says more; a level past the last gives the last."""
    E.nb05.q1.hint()
    E.nb05.q1.hint(3)
    E.nb05.q1.hint(7)
    first, third, past = capsys.readouterr().out.strip().splitlines()
    assert first.startswith("Hint (q1, 1 of 3): ") and first.endswith("(more: ex.q1.hint(2))")
    assert third.startswith("Hint (q1, 3 of 3): ") and "use_cpu=not on_gpu" in third and "more" not in third
    assert past == third
