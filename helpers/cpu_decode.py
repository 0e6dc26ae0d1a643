"""Decoding on the CPU path without transformers' generate loop: the same tokens, less time per token.

A decoding step of the embedded SmolLM2 (30 layers, 8 rows) spent 18% of its operator time in torch.cat, mostly
DynamicCache copying every layer's keys and values at every token, and more in generate's per-token bookkeeping
and mask building (lab/docs/performance.md, "A decoding loop of the kit's own"). `generate` below runs the decoder's
layers itself on a key/value cache allocated once, with the same kernels in the same order (F.linear, SDPA, the norm
and rotary arithmetic of transformers' Llama), so the logits are equal bit for bit and sampling draws the same
random numbers: the same tokens as model.generate (tests/test_cpu_decode.py). The first token still comes from
model.generate itself (max_new_tokens=1), so the prompt's pre-fill, the logits processors and the first random draw
are transformers' own; the loop applies the processors generate built.

peft LoRA layers run as peft's forward runs them: the base projection, plus x A B times the scaling for an active
unmerged adapter (so lesson 08's loop samples from its training policy here too), and several samples per prompt
are the prompt repeated first, as generate repeats it. Speed-up "decode_loop" (helpers.speedups). Anything it does
not know (another architecture, a GPU, DoRA or another LoRA variant, beam search, stop strings, a cache other than
DynamicCache) goes to model.generate unchanged (or the caller's fallback).
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch
import torch.nn.functional as F

from helpers import speedups

LOOP_ATTENTION = ("sdpa", "grpo_kit_gqa_sdpa")  # attention implementations whose arithmetic the loop repeats
LM_HEAD_ROWS = 2048  # vocabulary rows per slice of the output projection (LlamaLayers.logits)
GENERATE_KEYS = {"past_key_values", "use_cache"}  # model kwargs the loop understands (besides the inputs)


class Projection(NamedTuple):
    """A projection as its forward computes it: F.linear(x, weight, bias), plus, for each active unmerged LoRA
    adapter, F.linear(F.linear(x, *a), *b) * scaling (peft's LoraLayer.forward for vanilla LoRA in eval mode)."""
    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: tuple = ()  # ((a_weight, a_bias), (b_weight, b_bias), scaling) per active adapter, in peft's order

    def __call__(self, x):
        out = F.linear(x, self.weight, self.bias)
        for a, b, scaling in self.loras:  # peft: result = result + lora_B(lora_A(dropout(x))) * scaling
            out = out + F.linear(F.linear(x, *a), *b) * scaling
        return out


def _projection(module) -> Projection | None:
    """A torch Linear, or a peft LoRA Linear as its forward runs it: its base layer alone (adapter merged into the
    base weight, disabled, or not on this layer) or plus each active adapter's vanilla LoRA in fp32; None otherwise
    (DoRA and other variants, a dropout that is not identity in eval mode, another dtype)."""
    if type(module) is torch.nn.Linear:
        return Projection(module.weight, module.bias)
    base = getattr(module, "base_layer", None)
    if type(base) is not torch.nn.Linear or not hasattr(module, "lora_A"):
        return None
    if module.disable_adapters:
        return None if module.merged else Projection(base.weight, base.bias)  # peft's forward would unmerge first
    active = [name for name in module.active_adapters if name in module.lora_A]
    if module.merged or not active:
        return Projection(base.weight, base.bias)
    loras = []
    for name in active:
        a, b, dropout = module.lora_A[name], module.lora_B[name], module.lora_dropout[name]
        if (name in getattr(module, "lora_variant", {}) or module.use_dora.get(name)
                or type(a) is not torch.nn.Linear or type(b) is not torch.nn.Linear
                or type(dropout) not in (torch.nn.Identity, torch.nn.Dropout) or dropout.training
                or a.weight.dtype != torch.float32 or b.weight.dtype != torch.float32):
            return None
        loras.append(((a.weight, a.bias), (b.weight, b.bias), module.scaling[name]))
    return Projection(base.weight, base.bias, tuple(loras))


class LlamaLayers:
    """The tensors one decoding step of a transformers Llama model reads, in the order its forward uses them."""

    def __init__(self, causal_lm):
        backbone = causal_lm.model
        config = causal_lm.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.embed = backbone.embed_tokens
        self.rotary = backbone.rotary_emb
        self.norm = backbone.norm
        self.lm_head = _projection(causal_lm.lm_head)
        self.layers = []
        for layer in backbone.layers:
            attention, mlp = layer.self_attn, layer.mlp
            self.layers.append(dict(
                input_norm=layer.input_layernorm, post_norm=layer.post_attention_layernorm,
                q=_projection(attention.q_proj), k=_projection(attention.k_proj),
                v=_projection(attention.v_proj), o=_projection(attention.o_proj),
                gate=_projection(mlp.gate_proj), up=_projection(mlp.up_proj),
                down=_projection(mlp.down_proj), act=mlp.act_fn, scaling=attention.scaling))

    @staticmethod
    def rms_norm(norm, x):
        """transformers' LlamaRMSNorm.forward for an fp32 input, its operations in its order."""
        variance = x.pow(2).mean(-1, keepdim=True)
        return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))

    def step(self, tokens, positions, keys, values, length, attention_mask):
        """Logits [rows, vocab] for one new token per row, its keys/values written at `length` in the caches.

        keys/values: per layer a [rows, kv_heads, capacity, head_dim] buffer holding `length` positions so far;
        attention_mask: [rows, 1, 1, length + 1] bool (False: padding) or None when no row has padding."""
        rows, dim = tokens.shape[0], self.head_dim
        hidden = self.embed(tokens)  # [rows, hidden]
        cos, sin = self.rotary(hidden[:, None], positions[:, None])
        cos, sin = cos[:, None], sin[:, None]  # [rows, 1, 1, head_dim], as apply_rotary_pos_emb unsqueezes them
        half = dim // 2
        for layer, layer_keys, layer_values in zip(self.layers, keys, values):
            x = self.rms_norm(layer["input_norm"], hidden)
            q = layer["q"](x).view(rows, self.heads, 1, dim)
            k = layer["k"](x).view(rows, self.kv_heads, 1, dim)
            layer_values[:, :, length:length + 1] = layer["v"](x).view(rows, self.kv_heads, 1, dim)
            # apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1)
            q = q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin
            layer_keys[:, :, length:length + 1] = k * cos + torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin
            attended = F.scaled_dot_product_attention(
                q, layer_keys[:, :, :length + 1], layer_values[:, :, :length + 1], attn_mask=attention_mask,
                scale=layer["scaling"], enable_gqa=True)
            hidden = hidden + layer["o"](attended.reshape(rows, self.heads * dim))
            x = self.rms_norm(layer["post_norm"], hidden)
            hidden = hidden + layer["down"](layer["act"](layer["gate"](x)) * layer["up"](x))
        return self.logits(self.rms_norm(self.norm, hidden))

    def logits(self, hidden):
        """The output projection in slices of LM_HEAD_ROWS vocabulary rows: every logit is the same dot product as
        one F.linear's, bit for bit (tests/test_cpu_decode.py), and at a few rows per step MKL's packing of a slice
        stays in cache (SmolLM2's 49152 x 576 matrix: 14.3 against 17.9 ms per step, lab/docs/performance.md)."""
        head = self.lm_head
        if head.bias is not None or head.loras:
            return head(hidden)
        return torch.cat([F.linear(hidden, rows) for rows in head.weight.split(LM_HEAD_ROWS)], dim=-1)


def model_why_not(model) -> str | None:
    """Why the loop cannot decode with this model (None: it can)."""
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    if not speedups.enabled("decode_loop"):
        return "speed-up decode_loop is off"
    if type(model) is not LlamaForCausalLM:
        return f"{type(model).__name__} is not a transformers LlamaForCausalLM"
    if model.device.type != "cpu" or model.dtype != torch.float32 or model.training:
        return "not an fp32 model in eval mode on the CPU"
    if model.config._attn_implementation not in LOOP_ATTENTION:
        return f"attention {model.config._attn_implementation!r}"
    projections = [model.lm_head] + [m for layer in model.model.layers for m in (
        layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
        layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)]
    if any(_projection(m) is None for m in projections):
        return "a projection is neither a plain Linear nor a vanilla fp32 LoRA layer (DoRA or another variant?)"
    return None


def call_why_not(generation_config, model_kwargs) -> str | None:
    """Why the loop cannot repeat this generate call (its prepared config and model kwargs; None: it can)."""
    from transformers import DynamicCache

    if set(model_kwargs) - GENERATE_KEYS:
        return f"generate arguments the loop does not handle: {sorted(set(model_kwargs) - GENERATE_KEYS)}"
    cache = model_kwargs.get("past_key_values")
    if cache is not None and type(cache) is not DynamicCache:
        return f"a {type(cache).__name__} cache"
    gc = generation_config
    if (gc.num_beams or 1) != 1 or gc.max_new_tokens is None:
        return "beam search or no max_new_tokens"
    if (gc.num_return_sequences or 1) != 1 and cache is not None:
        return "several sequences per prompt with a cache given"
    if gc.return_dict_in_generate or gc.stop_strings or gc.max_time:
        return "return_dict_in_generate, stop strings or a time limit"
    if gc.prefill_chunk_size is not None or gc.use_cache is False:
        return "chunked pre-fill or no cache"
    return None


def unsupported(model, generation_config=None, **kwargs) -> str | None:
    """Why generate(model, ..., generation_config, **kwargs) would not use the loop (None: it would)."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    return model_why_not(target) or call_why_not(*target._prepare_generation_config(generation_config, **kwargs))


def _eos_ids(generation_config) -> list[int]:
    eos = generation_config.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def generate(model, input_ids, attention_mask=None, generation_config=None, streamer=None, fallback=None,
             leave_every: int | None = None, **kwargs):
    """model.generate(input_ids=..., attention_mask=..., generation_config=..., streamer=..., **kwargs), decoded by
    the loop when model_why_not() and call_why_not() find nothing against it (the same token ids, bit for bit),
    else by `fallback` (default model.generate). model: a transformers model or a peft model around one.

    leave_every (greedy only): rows that reached their end of text leave the batch every that many steps (speed-up
    finished_rows_leave); greedy tokens of a row do not depend on the other rows, so the ids are unchanged."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    reason = "no attention mask" if attention_mask is None else model_why_not(target)
    if reason is None:
        config, model_kwargs = target._prepare_generation_config(generation_config, **kwargs)
        reason = call_why_not(config, model_kwargs)
    if reason is not None:
        if streamer is not None:  # only what the caller gave: generate on the GPU path may be Unsloth's
            kwargs["streamer"] = streamer
        return (fallback or model.generate)(input_ids=input_ids, attention_mask=attention_mask,
                                            generation_config=generation_config, **kwargs)
    copies = config.num_return_sequences or 1
    if copies > 1:  # generate's _expand_inputs_for_generation: each prompt repeated in place, before the pre-fill
        input_ids, attention_mask = (t.repeat_interleave(copies, dim=0) for t in (input_ids, attention_mask))
        config.num_return_sequences = 1  # config is _prepare_generation_config's own copy
    first_config = copy.deepcopy(config)
    first_config.max_new_tokens, first_config.return_dict_in_generate = 1, True
    first_config.max_length = None  # max_new_tokens decides (a max_length too would be warned about)
    cache = model_kwargs.pop("past_key_values", None)
    if cache is None:
        from transformers import DynamicCache
        cache = DynamicCache(config=target.config)
    first = target.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=first_config,
                            past_key_values=cache, **model_kwargs)
    sequences = first.sequences
    if streamer is not None:  # what generate hands a streamer: the prompt, then each step's tokens
        streamer.put(input_ids.cpu())
        streamer.put(sequences[:, -1].cpu())
    eos = torch.tensor(_eos_ids(config), dtype=torch.long)
    unfinished = ~torch.isin(sequences[:, -1], eos)
    steps = config.max_new_tokens - (sequences.shape[1] - input_ids.shape[1])
    if steps > 0 and bool(unfinished.any()):
        processors = target._get_logits_processor(
            generation_config=config, input_ids_seq_length=input_ids.shape[1], encoder_input_ids=input_ids,
            device=input_ids.device, model_kwargs=model_kwargs)
        pad = config.pad_token_id if config.pad_token_id is not None else (int(eos[0]) if len(eos) else 0)
        leave = leave_every if (leave_every and not config.do_sample and not len(processors)) else None
        sequences = _decode(target, sequences, attention_mask, first.past_key_values, steps, processors,
                            config.do_sample, eos, pad, unfinished, leave, streamer)
    if streamer is not None:
        streamer.end()
    return sequences


@torch.no_grad()
def _decode(model, sequences, attention_mask, cache, steps, processors, do_sample, eos, pad, unfinished,
            leave_every=None, streamer=None):
    """Continue generate's _sample loop after its first token: one token per row per step until every row has an
    end of text or `steps` more tokens are made; finished rows get `pad`, as generate gives them."""
    layers = LlamaLayers(model)
    rows, length = sequences.shape[0], cache.get_seq_length()  # the cache holds everything but the newest token
    if length != attention_mask.shape[1]:
        raise RuntimeError(f"the decoding loop found {length} cached positions for a prompt {attention_mask.shape[1]} "
                           "wide. Fix: turn the loop off (--cpu-speedups-off decode_loop) and report this")
    capacity = length + steps
    keys, values = [], []
    for layer in cache.layers:
        shape = (rows, layer.keys.shape[1], capacity, layer.keys.shape[3])
        keys.append(layer.keys.new_empty(shape))
        values.append(layer.values.new_empty(shape))
        keys[-1][:, :, :length] = layer.keys
        values[-1][:, :, :length] = layer.values
        layer.keys, layer.values = keys[-1][:, :, :length], values[-1][:, :, :length]  # the same values, held once
    mask = torch.cat([attention_mask.bool(), attention_mask.new_ones(rows, steps).bool()], dim=1)
    padded = not bool(mask.all())
    # generate's positions: the mask's running count less one, and +1 per new token
    positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)[:, -1] + 1
    tokens, width = sequences[:, -1], sequences.shape[1]
    sequences = torch.cat([sequences, sequences.new_full((rows, steps), pad)], dim=1)  # filled column by column
    alive = torch.arange(rows)  # the original rows still in the batch (all of them unless rows leave)
    pad_tensor = torch.tensor(pad, dtype=torch.long)
    done = 0
    while done < steps:
        step_mask = mask[:, None, None, :length + 1] if padded else None
        logits = layers.step(tokens, positions, keys, values, length, step_mask)
        # the ids so far, as generate hands its processors (rows leave only when there are none)
        scores = processors(sequences[:, :width + done], logits.to(dtype=torch.float32, copy=True))
        if do_sample:
            tokens = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            tokens = torch.argmax(scores, dim=-1)
        tokens = tokens * unfinished + pad_tensor * ~unfinished
        sequences[alive, width + done] = tokens
        if streamer is not None:
            streamer.put(tokens.cpu())
        unfinished = unfinished & ~torch.isin(tokens, eos)
        length, positions, done = length + 1, positions + 1, done + 1
        if not bool(unfinished.any()):
            break
        if leave_every is not None and done % leave_every == 0 and not bool(unfinished.all()):
            keep = unfinished.nonzero().squeeze(1)
            keys = [k.index_select(0, keep) for k in keys]
            values = [v.index_select(0, keep) for v in values]
            mask, positions, tokens, unfinished, alive = (mask[keep], positions[keep], tokens[keep],
                                                          unfinished[keep], alive[keep])
    return sequences[:, :width + done]
