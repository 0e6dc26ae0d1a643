import torch

from helpers.cpu_compat import TorchChunkedLogProb
from helpers.run import trl_patches
from helpers.run.trl_patches import patch_trl_for_cpu


def test_stand_in_matches_full_log_softmax_and_its_gradient():
    torch.manual_seed(0)
    hidden = torch.randn(7, 5, requires_grad=True)
    weight = torch.randn(11, 5, requires_grad=True)
    targets = torch.randint(0, 11, (7,))
    logp, entropy, lssp, mean_logits, top1 = TorchChunkedLogProb.apply(
        hidden, weight, None, targets, 0.7, 4, None, 1.0, ("entropy", "is_top1"))
    ref = torch.log_softmax(hidden @ weight.t() / 0.7, -1)
    assert torch.allclose(logp, ref.gather(-1, targets[:, None]).squeeze(-1), atol=1e-5)
    assert torch.allclose(entropy, -(ref.exp() * ref).sum(-1), atol=1e-5)
    assert lssp is None and mean_logits is None and top1.dtype == torch.bool
    logp.sum().backward()
    g = hidden.grad.clone()
    hidden.grad = None
    ref.gather(-1, targets[:, None]).sum().backward()
    assert torch.allclose(g, hidden.grad, atol=1e-5)


def test_patch_installs_only_when_trl_lacks_the_kernel(monkeypatch):
    from trl.trainer import utils

    monkeypatch.setattr(utils, "_ChunkedLogProbFunction", None)  # what TRL holds on a PyTorch without Triton
    assert patch_trl_for_cpu() is True and utils._ChunkedLogProbFunction is TorchChunkedLogProb
    assert patch_trl_for_cpu() is False  # idempotent

    class TritonKernel:  # a real kernel (a GPU build): left alone
        pass

    monkeypatch.setattr(utils, "_ChunkedLogProbFunction", TritonKernel)
    assert patch_trl_for_cpu() is False and utils._ChunkedLogProbFunction is TritonKernel


# ------------------------------------------------------------------------------------------------- speed-ups
# A tiny random Llama (the embedded model's architecture) keeps these exact comparisons fast.
import types  # noqa: E402

import pytest  # noqa: E402

from helpers.cpu_compat import PlainSampler, prompt_group_size, shared_prompt_logps  # noqa: E402
from helpers.run.trl_patches import speed_up_grpo_on_cpu  # noqa: E402
from helpers.model import generate_shared_prefix, merged_lora  # noqa: E402

TEMPERATURE = 0.7


def tiny_lora_model(fused_head=True, seed=0, vocab_size=300):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    patch_trl_for_cpu()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         pad_token_id=0, eos_token_id=1, bos_token_id=2)
    base = LlamaForCausalLM(config)
    if fused_head:  # what GRPOTrainer does to the model it trains
        add_fused_lm_head(base, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    return get_peft_model(base, lora)


def tiny_grpo_trainer(tmp_path, prompts, reward, **config):
    """A real GRPOTrainer on the tiny model (embedded tokenizer): 2 prompts x 4 completions of up to 6 tokens.
    config: GRPOConfig values to change (max_steps=1 unless given)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from helpers.model import prepare_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
    args = GRPOConfig(**{**dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, max_steps=1,
                                per_device_train_batch_size=4, num_generations=4, max_completion_length=6,
                                report_to=[], logging_steps=1, gradient_checkpointing=False, save_strategy="no"),
                         **config})
    return GRPOTrainer(model=tiny_lora_model(fused_head=False, vocab_size=len(tokenizer)), processing_class=tokenizer,
                       reward_funcs=[reward], args=args, train_dataset=Dataset.from_dict({"prompt": prompts}))


def grpo_batch(groups=2, group_size=4, prompt_len=10, completion_len=6):
    """TRL's layout: each left-padded prompt repeated group_size times, completions right-padded."""
    torch.manual_seed(1)
    prompts = torch.randint(3, 300, (groups, prompt_len))
    prompt_mask = torch.ones(groups, prompt_len, dtype=torch.long)
    prompts[-1, :3], prompt_mask[-1, :3] = 0, 0  # a shorter prompt, left-padded
    completions = torch.randint(3, 300, (groups * group_size, completion_len))
    completion_mask = torch.ones_like(completions)
    completion_mask[1, 4:] = 0  # completions that ended early
    completion_mask[-2, 2:] = 0
    ids = torch.cat([prompts.repeat_interleave(group_size, 0), completions], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(group_size, 0), completion_mask], 1)
    return ids, mask, completion_len


def trl_logps(model, ids, mask, logits_to_keep):
    """TRL's own GRPOTrainer._get_per_token_logps_and_entropies, called on a stand-in for the trainer."""
    from accelerate import Accelerator
    from trl import GRPOTrainer

    trainer = types.SimpleNamespace(accelerator=Accelerator(cpu=True), temperature=TEMPERATURE)
    return GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, mask, logits_to_keep,
                                                          compute_entropy=True)


def lora_grads(model):
    return [p.grad.clone() for p in model.parameters() if p.requires_grad]


def test_prompt_group_size_finds_trls_repeated_prompts():
    ids, mask, keep = grpo_batch(groups=2, group_size=4)
    assert prompt_group_size(ids[:, :-keep], mask[:, :-keep]) == 4
    assert prompt_group_size(ids[:1, :-keep].repeat(8, 1), mask[:1, :-keep].repeat(8, 1)) == 8
    odd_mask = mask[:, :-keep].clone()
    odd_mask[1, 0] = 1 - odd_mask[1, 0]
    assert prompt_group_size(ids[:, :-keep], odd_mask) == 1  # one row's mask differs: not groups
    assert prompt_group_size(torch.arange(12).view(3, 4), torch.ones(3, 4)) == 1


def test_shared_prompt_logps_equal_trls_values_and_gradients():
    model = tiny_lora_model()
    ids, mask, keep = grpo_batch()
    ref_logps, ref_entropy, _ = trl_logps(model, ids, mask, keep)
    (ref_logps * mask[:, -keep:]).sum().backward()
    ref_grads = lora_grads(model)
    model.zero_grad()

    logps, entropy = shared_prompt_logps(model, ids, mask, keep, TEMPERATURE, compute_entropy=True)
    (logps * mask[:, -keep:]).sum().backward()
    assert torch.allclose(logps, ref_logps, atol=1e-5)
    assert torch.allclose(entropy, ref_entropy, atol=1e-5)
    assert (logps[mask[:, -keep:] == 0] == 0).all()  # padding scores 0, as TRL's does
    for mine, ref in zip(lora_grads(model), ref_grads):
        assert torch.allclose(mine, ref, atol=1e-5, rtol=1e-4)


def test_shared_prompt_logps_chunks_by_whole_groups_and_declines_non_groups():
    model = tiny_lora_model()
    ids, mask, keep = grpo_batch(groups=3, group_size=2)
    whole, _ = shared_prompt_logps(model, ids, mask, keep, TEMPERATURE)
    chunked, _ = shared_prompt_logps(model, ids, mask, keep, TEMPERATURE, batch_size=2)
    assert torch.allclose(whole, chunked, atol=1e-6)
    distinct = ids.clone()
    distinct[::2, 3] = 5  # no two rows share their prompt any more
    distinct[1::2, 3] = 6
    distinct[1, 4] = 7
    assert shared_prompt_logps(model, distinct, mask, keep, TEMPERATURE) is None


@pytest.mark.parametrize("layout", ["one prompt x 6", "different prompts, shared start"])
def test_generate_shared_prefix_gives_generates_tokens(layout):
    model = tiny_lora_model(fused_head=False).eval()
    torch.manual_seed(2)
    start = torch.randint(3, 300, (20,))
    if layout == "one prompt x 6":
        rows = [torch.cat([start, torch.tensor([9, 10, 11])])] * 6
    else:
        rows = [torch.cat([start, torch.randint(3, 300, (n,))]) for n in (1, 4, 2, 7)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):  # left padding, as tokenizers and TRL lay prompts out
        ids[i, width - len(r):], mask[i, width - len(r):] = r, 1
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=1)
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        shared = generate_shared_prefix(model, ids, mask, **kwargs)
    assert shared.shape == plain.shape
    assert torch.equal(shared[:, width:], plain[:, width:])


def test_merged_lora_generates_with_the_adapter_and_restores_the_weights():
    model = tiny_lora_model(fused_head=False).eval()
    ids = torch.randint(3, 300, (2, 12))
    before = {n: p.clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with merged_lora(model):
            assert model.base_model.model.model.layers[0].self_attn.q_proj.merged
            merged_logits = model(input_ids=ids).logits
    assert torch.allclose(merged_logits, expected, atol=1e-5)
    assert not model.base_model.model.model.layers[0].self_attn.q_proj.merged
    for n, p in model.named_parameters():
        assert torch.allclose(p, before[n], atol=1e-6), n
    model.merge_adapter()  # merged by the caller: merged_lora leaves it merged
    with merged_lora(model):
        pass
    assert model.base_model.model.model.layers[0].self_attn.q_proj.merged


def test_bf16_sampler_follows_the_trained_weights():
    model = tiny_lora_model(fused_head=False).eval()
    sampler = PlainSampler(model, torch.bfloat16)
    ids = torch.randint(3, 300, (2, 12))
    with torch.no_grad():
        for step in range(2):  # a training step changes LoRA B; sync must carry it over
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.add_(torch.randn_like(p) * 0.1)
            expected = model(input_ids=ids).logits
            copy = sampler.sync()
            assert next(copy.parameters()).dtype == torch.bfloat16
            got = copy(input_ids=ids).logits.float()
            assert (got - expected).abs().max() < 0.05 * expected.abs().max()
            assert (got.argmax(-1) == expected.argmax(-1)).float().mean() > 0.9
        with merged_lora(model):  # the policy merged by someone else: W already holds BA, not added twice
            assert torch.allclose(sampler.sync()(input_ids=ids).logits.float(), got, atol=1e-3)


def test_bf16_sampler_decodes_with_a_kv_cache_after_grpotrainer_turned_it_off():
    # GRPOTrainer sets use_cache=False on the policy's config; a copy built from that config re-ran the whole
    # sequence for every new token (9x slower in the main job). Each decoding step must feed one token.
    model = tiny_lora_model(fused_head=False).eval()
    base = model.get_base_model()
    base.config.use_cache = False
    base.generation_config.use_cache = False
    sampler = PlainSampler(model, torch.bfloat16)
    widths = []
    hook = sampler.model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]),
                                                   with_kwargs=True)
    try:
        with torch.no_grad():
            sampler.sync().generate(input_ids=torch.randint(3, 300, (2, 12)), max_new_tokens=5, min_new_tokens=5,
                                    do_sample=False, pad_token_id=0)
    finally:
        hook.remove()
    assert widths == [12, 1, 1, 1, 1]
    assert base.config.use_cache is False  # the policy's own config is left as the trainer set it


def test_plain_fp32_sampler_samples_the_same_tokens_as_the_policy_with_merged_lora():
    """Speed-up plain_sampler: the copy without peft wrappers holds W + BA computed as peft's merge does, so with
    one seed it samples exactly the tokens the peft policy samples with merged_lora, also after a training step."""
    model = tiny_lora_model(fused_head=False).eval()
    sampler = PlainSampler(model, torch.float32)
    ids = torch.randint(3, 300, (4, 12))
    settings = dict(max_new_tokens=12, do_sample=True, temperature=TEMPERATURE, pad_token_id=0)
    with torch.no_grad():
        for step in range(2):
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.add_(torch.randn_like(p) * 0.1)
            torch.manual_seed(step)
            with merged_lora(model):
                expected = model.generate(input_ids=ids, **settings)
            torch.manual_seed(step)
            got = sampler.sync().generate(input_ids=ids, **settings)
            assert got.shape == expected.shape and torch.equal(got, expected)


def test_a_real_grpo_step_samples_the_same_completions_with_the_speed_ups_as_trls_own_path(tmp_path, speedups_all_on):
    """The kit's speed-ups change how a step is computed, not what it samples: seeded alike, TRL's own GRPOTrainer and
    the sped-up one score the same completions at step 1 (LoRA B is 0 there, so no summation order can differ)."""
    seen = {}

    def run(name, speed_up):
        def reward(completions, **kwargs):
            seen.setdefault(name, []).extend(c[0]["content"] for c in completions)
            return [float(len(c[0]["content"]) % 3) for c in completions]

        trainer = tiny_grpo_trainer(tmp_path / name, [[{"role": "user", "content": "Say a number."}]] * 2, reward)
        if speed_up:
            speed_up_grpo_on_cpu(trainer)
            assert isinstance(trainer._kit_sampler, PlainSampler)
        trainer.train()

    run("trl", speed_up=False)
    run("kit", speed_up=True)
    assert len(seen["kit"]) == 4 and seen["kit"] == seen["trl"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_building_the_sampler_leaves_the_seeded_random_stream_alone(dtype):
    """The trainer seeds torch, then the kit builds the sampler: its random initial weights (overwritten at once)
    must not use up the draws, or the run samples other completions from step 1 on than the policy would."""
    model = tiny_lora_model(fused_head=False).eval()
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    PlainSampler(model, dtype)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("bf16_sampling", [False, True], ids=["fp32-sampler", "bf16-sampler"])
def test_speed_ups_run_inside_a_real_grpo_training_step(tmp_path, monkeypatch, bf16_sampling):
    import helpers.cpu_compat as cpu_compat
    import helpers.model as kit_model

    def reward(completions, **kwargs):
        return [float(len(c[0]["content"]) % 3) for c in completions]

    trainer = tiny_grpo_trainer(tmp_path, [[{"role": "user", "content": "Say a number."}]] * 2, reward)
    model = trainer.model
    used = {"loss": 0, "generation": 0}
    real_logps = cpu_compat.shared_prompt_logps
    real_generate = kit_model.generate_shared_prefix

    def spy_logps(*args, **kwargs):
        result = real_logps(*args, **kwargs)
        used["loss"] += result is not None
        return result

    def spy_generate(sampling_model, *args, **kwargs):
        used["generation"] += 1
        # the plain copy (bf16, or fp32: speed-up plain_sampler) samples, the fp32 policy is left as it is
        assert sampling_model is trainer._kit_sampler.model
        assert next(sampling_model.parameters()).dtype == (torch.bfloat16 if bf16_sampling else torch.float32)
        assert not model.base_model.model.model.layers[0].self_attn.q_proj.merged
        return real_generate(sampling_model, *args, **kwargs)

    monkeypatch.setattr(trl_patches, "shared_prompt_logps", spy_logps)
    monkeypatch.setattr(trl_patches, "generate_shared_prefix", spy_generate)

    speed_up_grpo_on_cpu(trainer, bf16_sampling=bf16_sampling)
    trainer.train()
    assert trainer.state.global_step == 1
    assert used == {"loss": 1, "generation": 1}  # the step sampled through the shared prefix, took the shared loss
    assert not model.base_model.model.model.layers[0].self_attn.q_proj.merged  # unmerged again for training


def _two_steps_on_one_batch(tmp_path, from_first_pass: bool):
    """Two optimizer steps on one sampled batch (num_iterations=2, the cpu preset's), the kit's speed-ups on; the old
    log-probabilities from the first loss pass (the kit) or from TRL's own no-grad pass. Returns (calls, the old
    log-probabilities the second step compared with, the trained LoRA weights)."""
    import helpers.cpu_compat as cpu_compat
    import helpers.model as kit_model

    calls = {"loss_with_grad": 0, "loss_no_grad": 0, "generation": 0}
    real_logps, real_generate = cpu_compat.shared_prompt_logps, kit_model.generate_shared_prefix

    def spy_logps(*args, **kwargs):
        calls["loss_with_grad" if torch.is_grad_enabled() else "loss_no_grad"] += 1
        return real_logps(*args, **kwargs)

    def spy_generate(*args, **kwargs):
        calls["generation"] += 1
        return real_generate(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trl_patches, "shared_prompt_logps", spy_logps)
        patch.setattr(trl_patches, "generate_shared_prefix", spy_generate)
        patch.setattr(trl_patches, "old_logps_from_first_pass", lambda trainer: from_first_pass)
        return _train_two_steps(tmp_path, calls)


def _train_two_steps(tmp_path, calls):
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2,
                                lambda completions, **kw: [float(sum(map(ord, c)) % 7) for c in completions],
                                max_steps=2, num_iterations=2, learning_rate=1e-2)
    speed_up_grpo_on_cpu(trainer)
    initial = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    seen = []
    compute_loss = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: (seen.append(inputs.get("old_per_token_logps")),
                                                  compute_loss(model, inputs))[1]
    trainer.train()
    assert trainer.state.global_step == 2
    lora = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    assert any(not torch.equal(lora[k], initial[k]) for k in lora)  # the two steps did train
    return calls, seen[1], lora


def test_two_iterations_per_batch_take_the_old_logps_from_the_first_loss_pass(tmp_path):
    """The kit skips TRL's no-grad pass and keeps the first loss pass's log-probabilities: the same numbers, so the
    same second step and the same trained weights, with one forward pass fewer per sampled batch."""
    kit_calls, kit_old, kit_lora = _two_steps_on_one_batch(tmp_path / "kit", from_first_pass=True)
    trl_calls, trl_old, trl_lora = _two_steps_on_one_batch(tmp_path / "trl", from_first_pass=False)
    assert trl_calls == {"loss_with_grad": 2, "loss_no_grad": 1, "generation": 1}  # TRL's own old-logps pass
    assert kit_calls == {"loss_with_grad": 2, "loss_no_grad": 0, "generation": 1}  # one sample, no extra pass
    assert kit_old is not None and kit_old.shape == trl_old.shape
    torch.testing.assert_close(kit_old, trl_old, rtol=0, atol=1e-6)
    assert kit_lora.keys() == trl_lora.keys()
    for name in kit_lora:
        torch.testing.assert_close(kit_lora[name], trl_lora[name], rtol=0, atol=1e-6)


def test_old_logps_come_from_the_first_pass_only_where_that_is_exact():
    from helpers.run.trl_patches import old_logps_from_first_pass

    one_slice = types.SimpleNamespace(steps_per_generation=1, gradient_accumulation_steps=1)
    assert old_logps_from_first_pass(types.SimpleNamespace(num_iterations=2, args=one_slice))
    assert not old_logps_from_first_pass(types.SimpleNamespace(num_iterations=1, args=one_slice))  # TRL skips it
    later_slices = types.SimpleNamespace(steps_per_generation=2, gradient_accumulation_steps=1)  # trained after a step
    assert not old_logps_from_first_pass(types.SimpleNamespace(num_iterations=2, args=later_slices))
    assert not old_logps_from_first_pass(types.SimpleNamespace(num_iterations=2, args=one_slice, use_vllm=True))


@pytest.mark.parametrize("asked,native,bf16", [(False, True, False), (True, True, True), (True, False, False)])
def test_prepare_trainer_uses_bf16_only_when_the_preset_asks_and_the_cpu_has_it(tmp_path, monkeypatch, capsys,
                                                                                asked, native, bf16):
    from helpers.config import get_preset
    from helpers.run import pipeline

    monkeypatch.setattr(trl_patches, "cpu_has_native_bf16", lambda: native)
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2, lambda completions, **kw: [0.0] * len(completions))
    pipeline.prepare_trainer(trainer, get_preset("cpu", cpu_bf16_sampling=asked, cpu_bf16_loss=asked))
    assert trainer._kit_cpu_speedups
    assert isinstance(trainer._kit_sampler, PlainSampler)  # fp32 copy (plain_sampler) unless bf16 applies
    assert trainer._kit_sampler.dtype == (torch.bfloat16 if bf16 else torch.float32)
    assert trainer._kit_bf16_loss is bf16
    out = capsys.readouterr().out
    assert ("cpu_bf16_sampling and cpu_bf16_loss: this CPU has no native bf16" in out) == (asked and not native)
