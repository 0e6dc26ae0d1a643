"""Lesson 02 load model: trainable_fraction, the share of a model's parameters that LoRA training updates."""

from __future__ import annotations

from helpers.teaching.exercises.core import Exercise, Fail, call, close, numbered

LESSON = "02"


def _tiny_models():
    import torch

    a = torch.nn.Linear(10, 10)  # 110 parameters, all trainable
    b = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 1, bias=False))  # 110 + 10
    for p in b[0].parameters():
        p.requires_grad_(False)
    c = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))  # 20 + 20, none trainable
    for p in c.parameters():
        p.requires_grad_(False)
    class Params4bit(torch.nn.Parameter):
        """bitsandbytes' 4-bit weight as peft sees it: two 4-bit values packed in each uint8 element."""

    d = torch.nn.Module()
    d.frozen = Params4bit(torch.zeros(50, dtype=torch.uint8), requires_grad=False)  # 100 packed 4-bit weights
    d.lora = torch.nn.Linear(10, 1, bias=False)  # 10 trainable
    return [("a Linear(10, 10) with every parameter trainable (110 of 110)", a, 1.0),
            ("a model with 10 trainable of 120 parameters (a frozen Linear(10, 10) + a trainable Linear(10, 1))", b,
             10 / 120),
            ("a fully frozen model (0 of 40 trainable)", c, 0.0),
            ("a 4-bit model as on the T4: 100 frozen 4-bit weights packed in 50 bytes (a Params4bit) + 10 trainable",
             d, 10 / 110)]


def _tensor_share(model) -> float:
    """The share of trainable TENSORS: what counting model.parameters() without numel() gives."""
    ps = list(model.parameters())
    return sum(p.requires_grad for p in ps) / len(ps) if ps else 0.0


def _judge_trainable_fraction(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: trainable_fraction, not trainable_fraction(model)")
    for case, model, truth in _tiny_models():
        got = call(case, fn, model)
        if not close(got, truth, 1e-6):
            extra = ""
            if "4-bit" in case and close(got, 10 / 60, 1e-6):
                extra = (" (bitsandbytes packs two 4-bit weights in each byte, so numel() of a Params4bit counts "
                         "half of them: count it as numel() * 2 * element_size(), as peft's print_trainable_parameters "
                         "does)")
            elif truth and close(got, 10 / 110, 1e-6):
                extra = " (trainable / FROZEN is not the fraction: divide by all parameters, trainable included)"
            elif close(got, truth * 100, 1e-6):
                extra = " (a fraction between 0 and 1, not a percentage)"
            elif close(got, 1 - truth, 1e-6):
                extra = " (that is the frozen share: a parameter trains when its requires_grad is True)"
            elif not truth:
                extra = " (nothing here has requires_grad=True: no value trains, whatever the number of tensors)"
            elif close(got, _tensor_share(model), 1e-6):
                extra = " (that counts tensors: count values, p.numel(); one Linear weight is many parameters)"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {truth:.4f}{extra}.")


trainable_fraction = Exercise(
    LESSON, "trainable_fraction",
    hint="model.parameters() yields tensors; p.numel() counts a tensor's values and p.requires_grad says if it trains.",
    judge=_judge_trainable_fraction,
    success="LoRA trains a small fraction of the model; print trainable_fraction(model) to see it.")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
