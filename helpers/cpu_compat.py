"""Make TRL's GRPOTrainer run on a CPU-only PyTorch.

TRL 1.15 computes GRPO's per-token log-probabilities with a Triton kernel (trl.kernels.ChunkedLogProbFunction).
CPU builds of PyTorch ship no Triton, so TRL sets that kernel to None and the first training step fails with
"'NoneType' object has no attribute 'apply'" (lab/docs/unsloth-cpu-backend.md). Unsloth's CPU backend fixes this
the same way: a plain-PyTorch function with the kernel's signature. On a GPU nothing here is used.
"""

from __future__ import annotations

import copy

import torch


class TorchChunkedLogProb:
    """Same inputs and outputs as trl.kernels.ChunkedLogProbFunction.apply, computed with ordinary autograd.

    Returns (log_probs, entropy, log_sum_sq_probs, mean_logits, is_top1); the optional ones are None unless named
    in `outputs`. Tokens are processed in chunks so the [tokens, vocab] logits never exist all at once.
    """

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
              logit_scale=1.0, outputs=("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")):
        with torch.autocast(hidden.device.type, enabled=False):  # fp32 logits, also under cpu_bf16_loss's autocast
            return TorchChunkedLogProb._apply(hidden, weight, bias, targets, temperature, final_logit_softcapping,
                                              logit_scale, outputs)

    @staticmethod
    def _apply(hidden, weight, bias, targets, temperature, final_logit_softcapping, logit_scale, outputs):
        pieces = {name: [] for name in ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")}
        token_chunk = max(1, 4096)
        for start in range(0, hidden.shape[0], token_chunk):
            logits = hidden[start:start + token_chunk].float() @ weight.float().t()
            if bias is not None:
                logits = logits + bias.float()
            logits = logits * logit_scale
            if final_logit_softcapping is not None:
                logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
            logits = logits / temperature
            target = targets[start:start + token_chunk].unsqueeze(-1)
            log_softmax = torch.log_softmax(logits, dim=-1)
            pieces["log_probs"].append(log_softmax.gather(-1, target).squeeze(-1))
            if "entropy" in outputs:
                pieces["entropy"].append(-(log_softmax.exp() * log_softmax).sum(-1))
            if "log_sum_sq_probs" in outputs:
                pieces["log_sum_sq_probs"].append(torch.logsumexp(2 * log_softmax, dim=-1).detach())
            if "mean_logits" in outputs:
                pieces["mean_logits"].append(logits.mean(-1).detach())
            if "is_top1" in outputs:
                target_logit = logits.gather(-1, target).squeeze(-1)
                pieces["is_top1"].append((target_logit >= logits.max(-1).values).detach())
        return tuple(torch.cat(v) if v else None for v in pieces.values())


# ------------------------------------------------------------------------------------------------- speed-ups
# A CPU GRPO step of the cpu preset is one prompt x 8 completions. TRL repeats the prompt 8 times, so generation
# pre-fills the same ~130 tokens 8 times and the loss runs them through the model (forward and backward) 8 times.
# speed_up_grpo_on_cpu does that shared work once (generation: helpers.model.generate_shared_prefix; loss:
# shared_prompt_logps below), and generates with the LoRA adapter merged into the weights (helpers.model.merged_lora:
# one matmul per projection instead of three). Same mathematics, different summation order; measured in
# lab/docs/performance.md (time per step and learning, side by side). Anything they do not recognise (prompts that are
# not in groups, images, MoE aux loss, softcapped heads) goes to TRL's own code unchanged.


def prompt_group_size(input_ids, attention_mask) -> int:
    """G when the rows are consecutive groups of G identical prompts (TRL repeats each prompt num_generations
    times in a row), else 1."""
    rows = input_ids.shape[0]
    for group in range(rows, 1, -1):
        if rows % group:
            continue
        ids = input_ids.view(rows // group, group, -1)
        mask = attention_mask.view(rows // group, group, -1)
        if bool((ids == ids[:, :1]).all()) and bool((mask == mask[:, :1]).all()):
            return group
    return 1


def _positions(attention_mask):
    """Position ids of left-padded rows, the way transformers' generate computes them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _base_model(model):
    """The transformers model under PEFT and accelerate wrappers (its LoRA layers stay in place)."""
    model = getattr(model, "module", model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, temperature, compute_entropy=False,
                        batch_size=None):
    """Per-token log-probabilities (and entropies) of the completions, as TRL's
    GRPOTrainer._get_per_token_logps_and_entropies returns them, with each group's prompt run once.

    The prompt's keys/values keep their gradient and are copied to the group's completions, so backward sums the
    group's gradients through one prompt pass. Returns None when the batch is not prompt groups or the model is no
    transformers model (lesson 08's stand-ins): the caller's plain forward then."""
    from transformers import DynamicCache, PreTrainedModel
    from trl.trainer import utils as trl_utils

    base = _base_model(model)
    if not isinstance(base, PreTrainedModel):
        return None
    text_config = base.config.get_text_config()
    if any(getattr(text_config, name, None) not in (None, 1.0) for name in
           ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")):
        return None
    prompt_len = input_ids.shape[1] - logits_to_keep
    if prompt_len < 1:
        return None
    group = prompt_group_size(input_ids[:, :prompt_len], attention_mask[:, :prompt_len])
    if group == 1:
        return None
    backbone = getattr(base, base.base_model_prefix)
    lm_head = base.get_output_embeddings()
    rows_per_chunk = max(group, ((batch_size or input_ids.shape[0]) // group) * group)
    all_logps, all_entropies = [], []
    for start in range(0, input_ids.shape[0], rows_per_chunk):
        ids = input_ids[start:start + rows_per_chunk]
        mask = attention_mask[start:start + rows_per_chunk]
        prompt_ids, prompt_mask = ids[::group, :prompt_len], mask[::group, :prompt_len]
        cache = DynamicCache(config=base.config)
        prompt_out = backbone(input_ids=prompt_ids, attention_mask=prompt_mask,
                              position_ids=_positions(prompt_mask), past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(group)
        completion_ids = ids[:, prompt_len:]
        completion_out = backbone(input_ids=completion_ids, attention_mask=mask,
                                  position_ids=_positions(mask)[:, prompt_len:], past_key_values=cache,
                                  use_cache=True)
        # the prompt's last hidden state predicts the first completion token; each completion token the next
        hidden = torch.cat([prompt_out.last_hidden_state[:, -1:].repeat_interleave(group, dim=0),
                            completion_out.last_hidden_state[:, :-1]], dim=1)
        keep = mask[:, prompt_len:] == 1
        chunked = trl_utils._ChunkedLogProbFunction or TorchChunkedLogProb  # unpatched TRL on a CPU build: None
        log_probs, entropy, *_ = chunked.apply(
            hidden[keep], lm_head.weight, lm_head.bias, completion_ids[keep], temperature,
            trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE, None, 1.0,
            ("log_probs", "entropy") if compute_entropy else ("log_probs",))
        all_logps.append(log_probs.new_zeros(keep.shape).masked_scatter(keep, log_probs))
        if compute_entropy:
            all_entropies.append(entropy.new_zeros(keep.shape).masked_scatter(keep, entropy))
    return torch.cat(all_logps), (torch.cat(all_entropies) if compute_entropy else None)


def cpu_has_native_bf16() -> bool:
    """True where oneDNN runs bf16 matmuls natively (AVX512-BF16 or AMX); elsewhere bf16 would be slower."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


class PlainSampler:
    """A plain transformers copy of the policy (no peft wrappers) that samples GRPO's completions, its weights synced
    from the trained model (W + BA of the current step) before each generation: the CPU counterpart of vLLM on the
    GPU path.

    dtype=torch.float32 (speed-up "plain_sampler"): the merged weights equal what peft's merge_adapter computes, so
    the same tokens as the policy with merged_lora, without peft's per-layer Python (measured 0.85x of generation).
    dtype=torch.bfloat16 (cpu_bf16_sampling): CPU decoding is bound by reading the weights and bf16 halves the bytes;
    different samples. The loss still runs the policy, as TRL's does on the GPU where vLLM samples in bf16.

    The copy gets a config of its own: GRPOTrainer sets use_cache=False on the policy's config, and a model built
    from that config generates without a KV cache (every token re-reads the whole sequence: 9x slower, measured).
    Building it leaves torch's random stream where it was: otherwise its throw-away initial weights used up the draws
    the trainer seeded, and a run sampled other completions from step 1 on (seed 0 of the main job: 0.48 -> 0.28)."""

    def __init__(self, peft_model, dtype=torch.float32):
        from transformers import AutoModelForCausalLM

        self.source = peft_model
        self.dtype = dtype
        base = peft_model.get_base_model()
        config = copy.deepcopy(base.config)
        config.use_cache = True
        with torch.random.fork_rng(devices=[]):  # from_config draws random initial weights from torch's global
            self.model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # stream: GRPO's samples draw from it
        self.model.generation_config = copy.deepcopy(base.generation_config)
        self.model.generation_config.use_cache = True
        plain = {k.replace(".base_layer", ""): v for k, v in base.state_dict().items() if ".lora_" not in k}
        missing, unexpected = self.model.load_state_dict(plain, strict=False)
        if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
            raise RuntimeError(f"PlainSampler could not copy the policy: missing {missing}, unexpected {unexpected}. "
                               "Fix: turn it off (--cpu-speedups-off plain_sampler, no --cpu-bf16-sampling)")
        self.model.eval().requires_grad_(False)

    def sync(self):
        """Copy W + BA of every LoRA projection into the copy (the other weights are frozen)."""
        from peft.tuners.lora import LoraLayer

        base = self.source.get_base_model()
        with torch.no_grad():
            for name, module in base.named_modules():
                if isinstance(module, LoraLayer):
                    weight = module.base_layer.weight
                    if not module.merged:  # a merged layer's base weight already holds W + BA
                        weight = weight.clone()
                        for adapter in module.active_adapters:  # in place, as peft's merge_adapter adds it
                            weight += module.get_delta_weight(adapter)
                    self.model.get_submodule(name).weight.copy_(weight)
        return self.model
