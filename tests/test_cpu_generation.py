"""The CPU path's generation and evaluation speed-ups (helpers.speedups): each gives the same token ids as the plain
transformers code, on the embedded model, greedy, in a batch with padding; and each has a working switch."""

import pytest
import torch

from helpers import model as m
from helpers import speedups
from helpers.config import get_preset
from helpers.data import heldout_questions


pytestmark = pytest.mark.usefixtures("speedups_all_on")  # tests/conftest.py


@pytest.fixture(scope="module")
def loaded():
    preset = get_preset("cpu", eval_max_new_tokens=12)
    model, tok = m.load_cpu(preset)
    # held-out questions of different lengths (padding, a shared prefix) and two prompts whose answers end early
    texts = m.chat_texts(tok, [r["prompt"] for r in heldout_questions(preset, 3)]
                         + [[{"role": "user", "content": "Hi"}],  # 10 and 8 tokens with their end of text
                            [{"role": "user", "content": "What is 2+2? Answer with a number only."}]])
    return preset, model, tok, texts


def _ids(model, tok, texts, preset, **kw):
    with model.disable_adapter():  # the base model: a fresh adapter is the identity anyway
        return m.generate_ids(model, tok, texts, preset, greedy=True, **kw)


# ------------------------------------------------------------------------------------------------- gqa_attention


def _attention_inputs(requires_grad=False):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 9, 5, 64, generator=g, requires_grad=requires_grad)  # SmolLM2: 9 query heads, 3 key/value
    k = torch.randn(3, 3, 7, 64, generator=g, requires_grad=requires_grad)
    v = torch.randn(3, 3, 7, 64, generator=g, requires_grad=requires_grad)
    mask = torch.ones(3, 1, 5, 7, dtype=torch.bool).tril(2)  # causal, the last 5 of 7 keys are the queries'
    mask[0, ..., :3] = False  # row 0 left-padded
    return q, k, v, mask


def test_gqa_attention_equals_transformers_sdpa_bit_for_bit_with_a_padding_mask_and_its_gradients():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    outs, grads = [], []
    for attention in (sdpa_attention_forward, m.gqa_sdpa_attention):
        q, k, v, mask = _attention_inputs(requires_grad=True)
        out, _ = attention(module, q, k, v, mask, scaling=0.125)
        out.pow(2).sum().backward()
        outs.append(out)
        grads.append((q.grad, k.grad, v.grad))
    assert torch.equal(outs[0], outs[1])
    for plain, gqa in zip(*grads):  # the loss's backward too (another summation order for k, v: close, not equal)
        torch.testing.assert_close(gqa, plain, rtol=1e-5, atol=1e-5)


def test_load_cpu_switches_to_gqa_attention_and_the_switch_keeps_transformers_sdpa(loaded):
    from transformers import LlamaConfig, LlamaForCausalLM

    preset, model, tok, texts = loaded
    assert model.get_base_model().config._attn_implementation == m.GQA_ATTENTION
    tiny = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=50, attn_implementation="sdpa")
    speedups.configure("gqa_attention")
    assert m.use_gqa_attention(LlamaForCausalLM(tiny)).config._attn_implementation == "sdpa"
    speedups.configure(None)
    assert m.use_gqa_attention(LlamaForCausalLM(tiny)).config._attn_implementation == m.GQA_ATTENTION


def test_gqa_attention_gives_the_same_greedy_tokens(loaded):
    preset, model, tok, texts = loaded
    base = model.get_base_model()
    try:
        with_gqa = _ids(model, tok, texts, preset)
        base.set_attn_implementation("sdpa")
        plain = _ids(model, tok, texts, preset)
    finally:
        base.set_attn_implementation(m.GQA_ATTENTION)
    assert with_gqa == plain and len(plain) == len(texts)


# ------------------------------------------------------------------------------------------------- finished_rows_leave


def test_finished_rows_leave_the_batch_with_the_same_greedy_tokens(loaded, monkeypatch):
    """Where the kit's decoding loop is off (or cannot run), rows at their end of text leave every few steps through
    generate calls on a narrowed cache: fewer rows per later generate call, the same tokens. (The loop's own leaving:
    tests/test_cpu_decode.py.)"""
    preset, model, tok, texts = loaded
    speedups.configure("finished_rows_leave,decode_loop")
    plain = _ids(model, tok, texts, preset)
    speedups.configure("decode_loop")
    widths, real_generate = [], model.generate

    def spy(*args, **kwargs):
        widths.append(len(kwargs["input_ids"]))
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(m, "LEAVE_EVERY", 3)
    monkeypatch.setattr(model, "generate", spy)
    with model.disable_adapter():
        ids = m.generate_ids(model, tok, texts, preset, greedy=True)
    assert ids == plain
    ended = [i for i, row in enumerate(plain) if row[-1] == tok.eos_token_id]
    assert ended and len(ended) < len(texts)  # the batch really had rows that ended early and rows that went on
    assert widths[0] == len(texts) and widths[-1] < len(texts) and widths == sorted(widths, reverse=True)


@pytest.mark.parametrize("loop", [True, False], ids=["decode-loop", "generate-calls"])
def test_finished_rows_leave_counts_every_decoding_step_in_the_progress_bar(loaded, loop):
    """Several generate calls per batch, or the kit's loop: the bar still ends at decoding_steps(), one update per
    decoded step."""
    preset, model, tok, texts = loaded
    speedups.configure(None if loop else "decode_loop")
    seen = []
    bar = type("Bar", (), {"update": lambda self, n=1: seen.append(n)})()
    with model.disable_adapter():
        m.generate_greedy_leaving(model, *_batch(tok, texts), preset.eval_max_new_tokens, tok.eos_token_id,
                                  every=5, progress=bar, do_sample=False, pad_token_id=tok.pad_token_id)
    assert sum(seen) == preset.eval_max_new_tokens == m.decoding_steps(model, len(texts), preset)
    assert seen.count(1) >= 10


def _batch(tok, texts):
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return batch["input_ids"], batch["attention_mask"]


# ------------------------------------------------------------------------------------------------- pass_at_k_one_call


def test_pass_at_k_in_one_call_draws_each_question_its_own_samples(loaded):
    """Near zero temperature sampling is greedy: every sample of a question is then that question's greedy answer,
    so the one-call layout hands each question its own samples; at the preset's temperature they are n draws."""
    from dataclasses import replace

    from helpers import evaluation

    preset, model, tok, _ = loaded
    rows = heldout_questions(preset, 3)
    greedy = m.generate(model, tok, [r["prompt"] for r in rows], preset, greedy=True)
    cold = evaluation.sample_answers(model, tok, rows, replace(preset, temperature=1e-6), n=2)
    assert cold == [[answer, answer] for answer in greedy]
    torch.manual_seed(0)
    warm = evaluation.sample_answers(model, tok, rows, preset, n=2)
    assert [len(s) for s in warm] == [2, 2, 2] and any(a != b for a, b in warm)


# ------------------------------------------------------------------------------------------------- the base model


def test_the_base_model_inside_disable_adapter_is_not_merged_and_keeps_its_weights_to_the_bit(loaded):
    """The before evaluation (evaluation.evaluate_base) runs under model.disable_adapter(): merged_lora must not merge
    a trained adapter there (peft undid it at the first forward pass, leaving W + BA - BA, not W)."""
    preset, model, tok, texts = loaded
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    layer = next(mod for mod in model.modules() if hasattr(mod, "base_layer"))
    weight = layer.base_layer.weight.clone()
    try:
        with torch.no_grad():
            for p in lora_b:
                p.normal_()  # a trained adapter
        with model.disable_adapter(), m.merged_lora(model):
            assert not layer.merged and torch.equal(layer.base_layer.weight, weight)
            model(input_ids=torch.tensor([[1, 2, 3]]))
        assert torch.equal(layer.base_layer.weight, weight)
    finally:
        with torch.no_grad():
            for p in lora_b:
                p.zero_()  # the fresh adapter the other tests use
