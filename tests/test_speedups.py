"""helpers.speedups: the CPU speed-ups' names, their switches (--cpu-speedups-off, $GRPO_KIT_SPEEDUPS_OFF), that each
switch really changes what runs, and that a run's summary.json names the ones it used."""

import json
import types

import pytest
import torch

from helpers import speedups
from helpers.config import PresetError, get_preset, validate
from helpers.run import pipeline, trl_patches


pytestmark = pytest.mark.usefixtures("speedups_all_on")  # tests/conftest.py


# ------------------------------------------------------------------------------------------------- names, switches


def test_parse_off_reads_names_lists_and_all_and_refuses_an_unknown_name_with_the_fix():
    assert speedups.parse_off(None) == speedups.parse_off("") == frozenset()
    assert speedups.parse_off(" shared_prefix, merged_lora ,") == {"shared_prefix", "merged_lora"}
    assert speedups.parse_off(("plain_sampler",)) == {"plain_sampler"}
    assert speedups.parse_off("all") == set(speedups.SPEEDUPS)
    with pytest.raises(speedups.SpeedupNameError, match=r"unknown CPU speed-up name\(s\) \['gqa'\]\. Fix: use 'all'"):
        speedups.parse_off("gqa,merged_lora")
    with pytest.raises(speedups.SpeedupNameError, match="Fix: add it to helpers.speedups.SPEEDUPS"):
        speedups.enabled("no_such_speedup")


def test_the_environment_and_configure_each_turn_speedups_off_and_active_lists_the_rest(monkeypatch):
    assert speedups.active() == list(speedups.SPEEDUPS)
    monkeypatch.setenv(speedups.ENV, "merged_lora")
    speedups.configure(("shared_prefix",))
    assert not speedups.enabled("merged_lora") and not speedups.enabled("shared_prefix")
    assert speedups.enabled("plain_sampler")
    assert speedups.active() == [n for n in speedups.SPEEDUPS if n not in ("merged_lora", "shared_prefix")]
    speedups.configure(None)  # the run's own switches cleared: the environment's still hold
    assert speedups.active() == [n for n in speedups.SPEEDUPS if n != "merged_lora"]
    monkeypatch.setenv(speedups.ENV, "all")
    assert speedups.active() == []


def test_cpu_speedups_off_is_a_flag_checked_before_any_model_loads():
    from helpers.train import overrides_from, parse_args

    overrides = overrides_from(parse_args(["--preset", "cpu", "--cpu-speedups-off", "shared_prefix,plain_sampler"]))
    assert overrides["cpu_speedups_off"] == ("shared_prefix", "plain_sampler")
    validate(get_preset("cpu", **overrides))
    assert get_preset("cpu").cpu_speedups_off == ()  # every speed-up on by default
    with pytest.raises(PresetError, match=r"cpu_speedups_off=\('nope',\): unknown CPU speed-up.*Fix: use 'all'"):
        validate(get_preset("cpu", cpu_speedups_off=("nope",)))
    with pytest.raises(PresetError, match=r"cpu_speedups_off=.*cpu backend only.*Fix: leave it empty"):
        validate(get_preset("t4", cpu_speedups_off=("shared_prefix",)))
    for name in ("cpu_bf16_sampling", "cpu_bf16_loss"):
        with pytest.raises(PresetError, match=rf"{name}=True: applies to the cpu backend only.*Fix: leave it False"):
            validate(get_preset("t4", **{name: True}))


# ------------------------------------------------------------------------------------------------- each gate


class _CpuModel:
    """Stands in for a CPU model: records the generate calls and merges."""

    device = torch.device("cpu")

    def __init__(self):
        self.calls, self.merges = [], 0

    def generate(self, **kwargs):
        self.calls.append(kwargs)
        return "plain"

    def modules(self):
        return []

    def merge_adapter(self):
        self.merges += 1

    def unmerge_adapter(self):
        self.merges -= 1


def test_shared_prefix_off_makes_generate_shared_prefix_plain_generate():
    from helpers.model import MIN_SHARED_PREFIX, generate_shared_prefix

    ids = torch.arange(3, 3 + MIN_SHARED_PREFIX + 4).repeat(2, 1)  # two rows sharing a long prefix
    mask = torch.ones_like(ids)
    model = _CpuModel()
    speedups.configure("shared_prefix")
    assert generate_shared_prefix(model, ids, mask) == "plain"
    assert model.calls[0]["input_ids"] is ids and "past_key_values" not in model.calls[0]
    speedups.configure(None)  # on: the prefix is pre-filled first (a forward pass, which the stand-in lacks)
    with pytest.raises(AttributeError):
        generate_shared_prefix(model, ids, mask)
    assert len(model.calls) == 1


@pytest.mark.parametrize("off", [False, True])
def test_merged_lora_off_generates_with_the_adapter_unmerged(off):
    from helpers.model import merged_lora

    model = _CpuModel()
    speedups.configure("merged_lora" if off else None)
    with merged_lora(model):
        assert model.merges == (0 if off else 1)
    assert model.merges == 0


def _stand_in_trainer(num_iterations=1):
    """What speed_up_grpo_on_cpu reads of a GRPOTrainer; its two methods record that TRL's own code ran."""
    ran = []
    trainer = types.SimpleNamespace(
        model=object(), temperature=1.0, num_iterations=num_iterations, use_vllm=False,
        args=types.SimpleNamespace(steps_per_generation=1, gradient_accumulation_steps=1),
        accelerator=types.SimpleNamespace(unwrap_model=lambda m: m, autocast=lambda: torch.autocast("cpu", enabled=False)),
        _generate_single_turn=lambda *a, **k: ran.append("generate"),
        _get_per_token_logps_and_entropies=lambda *a, **k: (ran.append("trl_logps"), None, None),
        _generate_and_score_completions=lambda *a, **k: None, _compute_loss=lambda *a, **k: None)
    return trainer, ran


@pytest.mark.parametrize("off", [False, True])
def test_plain_sampler_off_samples_with_the_policy_itself(monkeypatch, off):
    made = []
    monkeypatch.setattr(trl_patches, "PlainSampler", lambda policy, dtype: made.append(dtype) or "sampler")
    policy = types.SimpleNamespace(get_base_model=lambda: None)
    speedups.configure("plain_sampler" if off else None)
    assert trl_patches._sampler_for(policy, bf16_sampling=False) == (None if off else "sampler")
    assert trl_patches._sampler_for(policy, bf16_sampling=True) == "sampler"  # bf16 sampling is a setting of its own
    assert made == ([torch.bfloat16] if off else [torch.float32, torch.bfloat16])
    assert trl_patches._sampler_for(object(), bf16_sampling=False) is None  # no peft model: nothing to copy


@pytest.mark.parametrize("off", [False, True])
def test_shared_prompt_loss_off_runs_trls_own_log_probabilities(monkeypatch, off):
    shared = []
    monkeypatch.setattr(trl_patches, "shared_prompt_logps", lambda *a, **k: shared.append(1) or ("logps", None))
    speedups.configure("shared_prompt_loss" if off else None)
    trainer, ran = _stand_in_trainer()
    trl_patches.speed_up_grpo_on_cpu(trainer)
    result = trainer._get_per_token_logps_and_entropies(None, torch.zeros(1, 2), torch.ones(1, 2), 1)
    assert (ran, shared) == ((["trl_logps"], []) if off else ([], [1]))
    assert result[0] == (None if off else "logps")


@pytest.mark.parametrize("off", [False, True])
def test_old_logps_first_pass_off_keeps_trls_no_grad_pass(off):
    speedups.configure("old_logps_first_pass" if off else None)
    trainer, _ = _stand_in_trainer(num_iterations=2)
    compute_loss = trainer._compute_loss
    trl_patches.speed_up_grpo_on_cpu(trainer)
    assert (trainer._compute_loss is compute_loss) is off


def test_bf16_loss_runs_the_loss_under_bf16_autocast_with_fp32_log_probabilities(monkeypatch):
    seen = []
    monkeypatch.setattr(trl_patches, "shared_prompt_logps", lambda *a, **k: seen.append(
        (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))) or ("logps", None))
    for bf16_loss in (False, True):
        trainer, _ = _stand_in_trainer()
        trl_patches.speed_up_grpo_on_cpu(trainer, bf16_loss=bf16_loss)
        trainer._get_per_token_logps_and_entropies(None, torch.zeros(1, 2), torch.ones(1, 2), 1)
    assert seen[0][0] is False and seen[1] == (True, torch.bfloat16)
    from helpers.cpu_compat import TorchChunkedLogProb

    hidden, weight = torch.randn(3, 8), torch.randn(5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logps = TorchChunkedLogProb.apply(hidden, weight, None, torch.tensor([0, 1, 2]), 1.0, 4, None, 1.0, ())[0]
    assert logps.dtype == torch.float32
    torch.testing.assert_close(logps, torch.log_softmax(hidden @ weight.t(), -1)[[0, 1, 2], [0, 1, 2]])


# ------------------------------------------------------------------------------------------------- summary.json


def test_a_runs_summary_names_the_speedups_it_used(tmp_path):
    """A stopped run's summary (pipeline._finish_stopped) names them as the finished run's does (one helper)."""
    from helpers.run.health import TrainingHealth

    health = TrainingHealth(say=lambda m: None)
    health.problem = "loss is nan at step 1"
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5, "loss": 0.0}) + "\n")
    preset = get_preset("cpu", cpu_speedups_off=("merged_lora",))
    speedups.configure(preset.cpu_speedups_off)
    state = types.SimpleNamespace(
        preset=preset, run_dir=tmp_path, started=0.0, reward_funcs=[], options=None,
        dist=types.SimpleNamespace(is_main=True), folder=types.SimpleNamespace(release=lambda: None),
        runtime=types.SimpleNamespace(describe=lambda: "a CPU"))
    trainer = types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=[health]),
                                    state=types.SimpleNamespace(global_step=1, log_history=[]))
    pipeline.finish(state, trainer, heldout=[], before=None)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["status"].startswith("stopped")
    assert saved["cpu_speedups"] == [n for n in speedups.SPEEDUPS if n != "merged_lora"]
    assert pipeline._speedups_used(get_preset("t4")) == {}  # a GPU run has none to name
