"""helpers.cpu_decode (speed-up decode_loop): the kit's own decoding loop gives model.generate's token ids bit for bit
and draws the same random numbers, on the embedded model (sampled and greedy, a GRPO group and a padded batch, the
GRPO sampler, the peft policy with its adapter active, merged or disabled, several samples per prompt), lets
finished rows leave without changing a token, and hands everything it cannot repeat to generate."""

import functools

import pytest
import torch
from transformers import GenerationConfig

from helpers import cpu_decode, speedups
from helpers import model as m
from helpers.config import get_preset
from helpers.cpu_compat import PlainSampler
from helpers.data import heldout_questions

pytestmark = pytest.mark.usefixtures("speedups_all_on")  # tests/conftest.py

NEW_TOKENS = 12  # the "Hi" row of the padded layout ends within them, the questions go on


@pytest.fixture(scope="module")
def loaded():
    preset = get_preset("cpu")
    policy, tok = m.load_cpu(preset)
    policy.eval()
    with torch.no_grad():  # a trained-looking adapter, so the sampler's merged weights differ from the base ones
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.01)
    sampler = PlainSampler(policy, torch.float32)
    sampler.sync()
    rows = heldout_questions(preset, 4)
    layouts = {
        "grpo-group": m.chat_texts(tok, [rows[0]["prompt"]] * 4),  # one prompt, repeated: the shared prefix path
        "padded": m.chat_texts(tok, [r["prompt"] for r in rows[1:]] + [[{"role": "user", "content": "Hi"}]]),
    }
    return preset, policy, sampler.model, tok, layouts


def _config(tok, sample: bool, max_new_tokens=NEW_TOKENS):
    extra = dict(temperature=0.7, top_k=0, top_p=1.0) if sample else dict(temperature=None, top_k=None, top_p=None)
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sample, pad_token_id=tok.pad_token_id,
                            eos_token_id=[tok.eos_token_id], disable_compile=True, **extra)


def _generate(model, tok, texts, config, generate, seed=0):
    """(ids, the next random draw): what a GRPO step's generation gives and leaves behind in torch's stream."""
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        ids = m.generate_shared_prefix(model, batch["input_ids"], batch["attention_mask"], config, generate)
    return ids, torch.rand(3)


@pytest.mark.parametrize("layout", ["grpo-group", "padded"])
@pytest.mark.parametrize("sample", [True, False], ids=["sampled", "greedy"])
def test_the_loop_gives_generates_ids_and_draws_the_same_random_numbers(loaded, layout, sample, decode_loop_rows):
    preset, policy, sampler_model, tok, layouts = loaded
    config = _config(tok, sample)
    expected, expected_draw = _generate(sampler_model, tok, layouts[layout], config, sampler_model.generate)
    got, draw = _generate(sampler_model, tok, layouts[layout], config,
                          functools.partial(cpu_decode.generate, sampler_model))
    assert decode_loop_rows, "the loop did not run: " + str(cpu_decode.unsupported(sampler_model, config))
    assert got.shape == expected.shape and torch.equal(got, expected)
    assert torch.equal(draw, expected_draw)  # the next GRPO step samples from the same place in the stream
    if layout == "padded":  # a row ended early: the loop padded it after its end of text, as generate does
        assert (got[:, -1] == tok.pad_token_id).any() and (got == tok.eos_token_id).any()


def test_the_loop_decodes_the_peft_policy_with_its_adapter_active_merged_or_disabled(loaded, decode_loop_rows):
    """Active and unmerged (lesson 08's loop samples from its training policy so), merged into the weights, and
    disabled: each decoded by the loop with generate's ids."""
    import contextlib

    preset, policy, sampler_model, tok, layouts = loaded
    config = _config(tok, sample=True)
    texts = layouts["padded"]
    for name, state in (("active", contextlib.nullcontext), ("merged", lambda: m.merged_lora(policy)),
                        ("disabled", policy.disable_adapter)):
        with state():
            assert cpu_decode.unsupported(policy, config) is None, name
            expected, expected_draw = _generate(policy, tok, texts, config, policy.generate, seed=1)
            decode_loop_rows.clear()
            got, draw = _generate(policy, tok, texts, config, functools.partial(cpu_decode.generate, policy), seed=1)
        assert decode_loop_rows and torch.equal(got, expected) and torch.equal(draw, expected_draw), name


def test_a_lora_projection_is_peft_forward_bit_for_bit(loaded):
    """Each projection of the policy as the loop computes it (base, plus x A B times the scaling of the active
    adapter) equals the peft layer's own forward on the same input, to the last bit."""
    preset, policy, sampler_model, tok, layouts = loaded
    layer = policy.get_base_model().model.layers[0]
    modules = {"q": layer.self_attn.q_proj, "o": layer.self_attn.o_proj, "down": layer.mlp.down_proj}
    with torch.no_grad():
        for name, module in modules.items():
            x = torch.randn(8, module.in_features, generator=torch.Generator().manual_seed(1))
            projection = cpu_decode._projection(module)
            assert projection is not None and projection.loras, name  # the adapter is on this layer, unmerged
            assert torch.equal(projection(x), module(x)), name


def test_several_samples_per_prompt_are_generates_own(loaded):
    """num_return_sequences (lesson 08's sample_group): the prompts repeated before the pre-fill, as generate
    repeats them, so the same ids and the same next random draw."""
    preset, policy, sampler_model, tok, layouts = loaded
    batch = tok(layouts["padded"][:2], return_tensors="pt", padding=True, add_special_tokens=False)
    out = {}
    for name, generate in (("generate", policy.generate), ("loop", functools.partial(cpu_decode.generate, policy))):
        torch.manual_seed(3)
        with torch.no_grad():
            ids = generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=True,
                           temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS, num_return_sequences=3,
                           pad_token_id=tok.pad_token_id)
        out[name] = ids, torch.rand(3)
    assert out["loop"][0].shape[0] == 6 and torch.equal(out["loop"][0], out["generate"][0])
    assert torch.equal(out["loop"][1], out["generate"][1])
    assert not torch.equal(out["loop"][0][0], out["loop"][0][1])  # the copies of a prompt were sampled apart


def test_finished_rows_leave_the_loop_with_the_same_greedy_ids(loaded, decode_loop_rows):
    preset, policy, sampler_model, tok, layouts = loaded
    texts = layouts["padded"]  # "Hi" ends after a few tokens, the questions go on
    widths = decode_loop_rows
    config = _config(tok, sample=False, max_new_tokens=20)
    expected, _ = _generate(sampler_model, tok, texts, config, sampler_model.generate)
    got, _ = _generate(sampler_model, tok, texts, config,
                       functools.partial(cpu_decode.generate, sampler_model, leave_every=3))
    assert torch.equal(got, expected)
    assert widths[0] == len(texts) and widths[-1] < len(texts) and widths == sorted(widths, reverse=True)


def test_a_streamer_sees_what_generate_hands_it(loaded):
    preset, policy, sampler_model, tok, layouts = loaded
    batch = tok(layouts["padded"], return_tensors="pt", padding=True, add_special_tokens=False)
    seen = {}
    for name, generate in (("generate", sampler_model.generate),
                           ("loop", functools.partial(cpu_decode.generate, sampler_model))):
        calls = seen[name] = []
        streamer = type("S", (), {"put": lambda self, v: calls.append(tuple(v.shape)),
                                  "end": lambda self: calls.append("end")})()
        with torch.no_grad():
            generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     generation_config=_config(tok, sample=False), streamer=streamer)
    assert seen["loop"] == seen["generate"] and seen["loop"][-1] == "end"


def test_the_output_projection_in_slices_equals_one_linear_bit_for_bit(loaded):
    preset, policy, sampler_model, tok, layouts = loaded
    layers = cpu_decode.LlamaLayers(sampler_model)
    hidden = torch.randn(8, sampler_model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    assert sampler_model.lm_head.weight.shape[0] > cpu_decode.LM_HEAD_ROWS  # really more than one slice
    with torch.no_grad():
        assert torch.equal(layers.logits(hidden), sampler_model.lm_head(hidden))


# ------------------------------------------------------------------------------------------------- what falls back


def _tiny_llama(**config):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
                                        **config)).eval()


def _falls_back(model, reason: str, **kwargs):
    ids = torch.randint(2, 64, (2, 5))
    calls = []
    out = cpu_decode.generate(model, ids, torch.ones_like(ids), fallback=lambda **kw: calls.append(kw) or "generate",
                              max_new_tokens=4, do_sample=False, **kwargs)
    assert out == "generate" and calls and calls[0]["input_ids"] is ids
    assert "streamer" not in calls[0]  # only what the caller passed: Unsloth's generate on the GPU path gets no more
    assert reason in (cpu_decode.unsupported(model, max_new_tokens=4, do_sample=False, **kwargs) or "")


def test_the_loop_runs_on_a_tiny_llama_and_declines_what_it_cannot_repeat():
    model = _tiny_llama()
    assert cpu_decode.unsupported(model, max_new_tokens=4) is None
    _falls_back(model, "beam search", num_beams=2)
    _falls_back(model, "stop strings", max_time=5.0)
    speedups.configure("decode_loop")
    _falls_back(model, "decode_loop is off")
    speedups.configure(None)
    _falls_back(model.to(torch.bfloat16), "fp32")


def test_a_lora_variant_goes_to_generate_and_greedy_copies_get_its_refusal():
    """The loop repeats vanilla LoRA only: DoRA (another forward) goes to generate. Several greedy sequences per
    prompt get generate's own refusal."""
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(_tiny_llama(), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)).eval()
    assert cpu_decode.unsupported(lora, max_new_tokens=4) is None
    ids = torch.randint(2, 64, (2, 5))
    with pytest.raises(ValueError, match="Greedy methods"):
        cpu_decode.generate(lora, ids, torch.ones_like(ids), max_new_tokens=4, do_sample=False, num_return_sequences=2)
    dora = get_peft_model(_tiny_llama(), LoraConfig(r=2, target_modules=["q_proj"], use_dora=True)).eval()
    _falls_back(dora, "DoRA or another variant")
    with m.merged_lora(dora):
        assert cpu_decode.unsupported(dora, max_new_tokens=4) is None


def test_another_architecture_goes_to_generate():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)).eval()
    _falls_back(model, "not a transformers LlamaForCausalLM")
