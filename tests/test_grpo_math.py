"""helpers.teaching.grpo_math against hand-computed numbers and against TRL 1.15's own advantage code.

TRL computes the advantages inline in GRPOTrainer._generate_and_score_completions (not a function we can call),
so the cross-check re-runs those exact tensor lines with TRL's exported nanstd (trl.trainer.utils.nanstd), and a
source check makes sure the pinned TRL still has them.
"""

from __future__ import annotations

import inspect
import math

import pytest

from helpers.teaching import grpo_math as G


def test_hand_computed_group():
    # rewards 4, 0, 2, 0: mean 1.5; deviations 2.5, -1.5, 0.5, -1.5; sample variance (6.25+2.25+0.25+2.25)/3 = 11/3
    std = math.sqrt(11 / 3)
    want = [2.5 / (std + 1e-4), -1.5 / (std + 1e-4), 0.5 / (std + 1e-4), -1.5 / (std + 1e-4)]
    assert G.group_advantages([4.0, 0.0, 2.0, 0.0]) == pytest.approx(want, abs=1e-12)
    assert G.group_advantages([1.0, 0.0]) == pytest.approx([0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)])


def test_tied_group_has_no_signal():
    assert G.group_advantages([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert not G.group_stats([2.0, 2.0])["signal"] and G.group_stats([2.0, 0.0])["signal"]


def test_groups_are_normalised_separately_and_shift_invariant():
    two = G.group_advantages([1.0, 0.0, 5.0, 5.0], num_generations=2)
    assert two[:2] == pytest.approx(G.group_advantages([1.0, 0.0])) and two[2:] == [0.0, 0.0]
    assert G.group_advantages([3.0, 2.0, 4.0]) == pytest.approx(G.group_advantages([1.0, 0.0, 2.0]))
    with pytest.raises(ValueError, match="groups of num_generations=3"):
        G.group_advantages([1.0, 2.0], num_generations=3)


def test_unscorable_completions_get_zero_and_are_left_out():
    adv = G.group_advantages([1.0, None, 0.0, float("nan")])
    assert adv[1] == 0.0 and adv[3] == 0.0
    assert [adv[0], adv[2]] == pytest.approx(G.group_advantages([1.0, 0.0]))


def _trl_reference(rewards, num_generations, scale):
    """The lines of TRL 1.15's _generate_and_score_completions (sum_then_normalize), with its own nanstd."""
    import torch
    from trl.trainer.utils import nanstd

    rewards = torch.tensor(rewards, dtype=torch.float32)
    mean_grouped = torch.nanmean(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations, dim=0)
    if scale in ("group", "none"):
        std = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations, dim=0)
    else:
        std = nanstd(rewards).expand_as(rewards)
    adv = rewards - mean_grouped
    if scale != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).tolist()


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("rewards,g", [([4.0, 0.0, 2.5, 0.0], 4), ([0.5, 1.0, 4.0, 0.0, 0.0, 2.5], 3),
                                       ([1.0, 1.0, 0.0, 2.0, 3.0, 3.0, 3.0, 3.0], 4), ([2.0, float("nan"), 0.0, 1.0], 2)])
def test_matches_trl(rewards, g, scale):
    assert G.group_advantages(rewards, num_generations=g, scale=scale) == pytest.approx(
        _trl_reference(rewards, g, scale), abs=1e-5)


def test_pinned_trl_still_computes_advantages_this_way():
    from trl.trainer import grpo_trainer

    src = inspect.getsource(grpo_trainer.GRPOTrainer._generate_and_score_completions)
    for line in ("advantages = rewards - mean_grouped_rewards", "advantages = advantages / (std_rewards + 1e-4)",
                 "std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)"):
        assert line in src, f"TRL changed its advantage computation: {line!r} is gone; update helpers/teaching/grpo_math.py"
    from trl import GRPOConfig

    assert GRPOConfig.__dataclass_fields__["scale_rewards"].default == "group"
    assert GRPOConfig.__dataclass_fields__["loss_type"].default == "dapo"


def test_first_step_loss():
    adv = G.group_advantages([4.0, 0.0, 2.0, 0.0])
    assert G.first_step_loss(adv, [10, 10, 10, 10]) == pytest.approx(0.0, abs=1e-12)  # equal lengths: exactly 0
    assert G.first_step_loss(adv, [5, 20, 5, 20], "grpo") == pytest.approx(0.0, abs=1e-12)
    unequal = G.first_step_loss(adv, [5, 20, 5, 20])  # good answers short: positive (length-advantage covariance)
    assert unequal > 0 and abs(unequal) < 1
    assert G.first_step_loss([0.0, 0.0], [3, 9]) == 0.0


def test_explain_and_widget_work_headless():
    rows = G.explain_group(["a", "b", "c"], [1.0, 0.0, 0.0])
    assert [r["tokens"] for r in rows] == ["pushed UP", "pushed down", "pushed down"]
    w = G.advantage_widget()
    assert [r["tokens"] for r in w.rows][0] == "pushed UP"
    w.set_rewards([2.0, 2.0, 2.0, 2.0])
    assert all(r["advantage"] == 0.0 for r in w.rows) and "teaches nothing" in w.text
    if w.sliders:  # ipywidgets installed: moving a slider recomputes
        w.sliders[1].value = 4.0
        assert w.rows[1]["tokens"] == "pushed UP"


def test_set_rewards_moves_the_sliders():
    """Rewards set from code (04 does it in the cell after the widget) show on the sliders too, not just the table."""
    w = G.advantage_widget()
    w.set_rewards([1.0, 3.0, 0.5, 6.0])  # 6 is above the sliders' range: the range grows, the value is not clamped
    assert [s.value for s in w.sliders] == [1.0, 3.0, 0.5, 6.0]
    assert [r["reward"] for r in w.rows] == [1.0, 3.0, 0.5, 6.0]
    assert w.sliders[3].max >= 6.0
@pytest.mark.parametrize("loss_type", G.LOSS_TYPES)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_policy_loss_matches_trls_own_computation(loss_type, beta):
    import torch

    torch.manual_seed(0)
    logps = -torch.rand(4, 6) * 3
    old = logps + torch.randn(4, 6) * 0.3  # the policy moved since sampling: ratios away from 1, some clipped
    ref = logps + torch.randn(4, 6) * 0.2
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0]])
    adv = torch.tensor(G.group_advantages([3.5, 0.0, 1.5, 0.0]))
    ours = G.policy_loss(logps, old, adv, mask, loss_type=loss_type, epsilon=0.2, beta=beta,
                         ref_per_token_logps=ref, max_completion_length=8)
    theirs = G.trl_loss(logps, old, adv, mask.float(), epsilon=0.2, loss_type=loss_type, beta=beta, ref_logps=ref,
                        max_completion_length=8)  # GRPOTrainer._compute_loss itself, the forward pass stubbed out
    assert float(ours["loss"]) == pytest.approx(float(theirs), rel=1e-6, abs=1e-7)
    assert bool(ours["clipped"].any())  # the example does exercise the clipping


def test_first_step_ratio_is_one_and_the_loss_is_minus_the_mean_advantage():
    import torch

    logps = -torch.rand(2, 3)
    out = G.policy_loss(logps, logps, torch.tensor([1.0, -1.0]), torch.ones(2, 3), loss_type="grpo")
    assert torch.allclose(out["ratio"], torch.ones(2, 3)) and float(out["loss"]) == pytest.approx(0.0)


# ------------------------------------------------------------------------------- completion_logps, lesson 08's loss


def _group_batch(g=4, prompt_len=6, completion_len=5, eos=1):
    """One prompt repeated g times and g completions, two of them ended early and padded after their end."""
    import torch

    gen = torch.Generator().manual_seed(0)
    prompt = {"input_ids": torch.randint(2, 64, (1, prompt_len), generator=gen),
              "attention_mask": torch.ones(1, prompt_len, dtype=torch.long)}
    ids = torch.randint(2, 64, (g, completion_len), generator=gen)
    ids[0, 2], ids[0, 3:] = eos, 0
    ids[2, 0], ids[2, 1:] = eos, 0
    return G.group_batch(prompt, ids, eos)


def _tiny_policy():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1))
    return get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))


@pytest.mark.usefixtures("speedups_all_on")
@pytest.mark.parametrize("shared", [True, False], ids=["shared-prompt", "shared_prompt_loss-off"])
def test_completion_logps_are_the_full_forwards_and_so_are_their_gradients(shared):
    """The group's prompt run once (shared_prompt_loss) or the logits of the completion's positions only: the
    log-probabilities and their gradients equal those of the whole forward pass, sliced, on every masked-in token."""
    import torch

    from helpers import speedups

    if not shared:
        speedups.configure("shared_prompt_loss")
    policy, batch = _tiny_policy(), _group_batch()
    params = [p for p in policy.parameters() if p.requires_grad]
    mask = batch["completion_mask"].bool()

    def full_forward():  # every position's logits, then the completion's
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        start = batch["prompt_ids"].size(1)
        logits = policy(input_ids=ids, attention_mask=attention).logits[:, start - 1:-1] / 0.7
        return torch.log_softmax(logits, dim=-1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)

    results = {}
    for name, fn in (("kit", lambda: G.completion_logps(policy, batch, temperature=0.7)), ("full", full_forward)):
        logps = fn()
        grads = torch.autograd.grad((logps * mask).sum(), params)
        results[name] = logps, torch.cat([g.flatten() for g in grads])
    (kit, kit_grad), (full, full_grad) = results["kit"], results["full"]
    assert kit.shape == full.shape and torch.allclose(kit[mask], full[mask], atol=1e-5)
    assert torch.allclose(kit_grad, full_grad, rtol=1e-4, atol=1e-6) and full_grad.abs().max() > 0
    if shared:  # the padding after a completion's end: 0 (TRL's shared path), left out by the mask
        assert torch.all(kit[~mask] == 0)


def test_completion_logps_of_a_model_without_a_config_run_the_plain_forward():
    """Lesson 08's stand-in models (exercises.nb08._tiny_lm) are no transformers models: the plain computation."""
    import torch

    from helpers.teaching.exercises import nb08

    model, batch = nb08._tiny_lm(0, vocab=64), _group_batch()
    logps = G.completion_logps(model, batch)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    expected = torch.log_softmax(model(ids).logits[:, 5:-1], -1).gather(-1, batch["completion_ids"][..., None])[..., 0]
    assert torch.equal(logps, expected)


@pytest.mark.usefixtures("speedups_all_on")
def test_sample_group_gives_model_generates_completions_through_the_decoding_loop(decode_loop_rows):
    """Lesson 08's section 1 samples with model.generate; its loop's sample(step) with grpo_math.sample_group, which
    decodes on the CPU with helpers.cpu_decode: the same ids for the same seed, from the policy and its adapter."""
    import types

    import torch

    policy, batch = _tiny_policy(), _group_batch()
    prompt = {"input_ids": batch["prompt_ids"][:1], "attention_mask": batch["prompt_mask"][:1]}
    ids = G.sample_group(policy, types.SimpleNamespace(pad_token_id=0), prompt, seed=3, n=4, max_new_tokens=6)
    assert decode_loop_rows, "the decoding loop did not run"
    torch.manual_seed(3)
    with torch.no_grad():
        expected = policy.generate(**prompt, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6,
                                   num_return_sequences=4, pad_token_id=0)[:, prompt["input_ids"].shape[1]:]
    assert ids.shape == (4, 6) and torch.equal(ids, expected)
