"""lab/benchmark_cpu.py's --bandwidth and --levers: the arithmetic, the variants' environments, the table, and
one tiny real sampling call. (Its step timing is tested on a real run in tests/test_step_timing.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.speedups import ENV, SPEEDUPS
from lab import benchmark_cpu as bench


def test_the_limit_is_bandwidth_over_the_bytes_per_step_times_the_batch():
    # the figures: 28 GB/s, 538 MB of fp32 weights per decoding step, batch 8 -> about 416 row-tokens/s
    assert bench.row_token_limit(28.0, 538_000_000, 8) == pytest.approx(416.4, abs=0.1)
    assert bench.row_token_limit(28.0, 269_000_000, 8) == pytest.approx(2 * 416.4, abs=0.2)  # bf16: half the bytes


class _TinyLM(nn.Module):
    def __init__(self, tied: bool, dtype=torch.float32):
        super().__init__()
        self.embed = nn.Embedding(10, 4).to(dtype)
        self.layer = nn.Linear(4, 4, bias=False).to(dtype)
        self.head = nn.Linear(4, 10, bias=False).to(dtype)
        if tied:
            self.head.weight = self.embed.weight

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.head


def test_weight_bytes_count_a_tied_head_once_and_leave_out_an_untied_embedding():
    # tied: embedding/head (40) + layer (16) parameters, read once each per step
    assert bench.weight_bytes_per_step(_TinyLM(tied=True)) == (40 + 16) * 4
    assert bench.weight_bytes_per_step(_TinyLM(tied=True, dtype=torch.bfloat16)) == (40 + 16) * 2
    # untied: the head is read whole, the embedding only for the batch's rows (left out)
    assert bench.weight_bytes_per_step(_TinyLM(tied=False)) == (40 + 16) * 4


def test_generated_tokens_stop_at_each_rows_first_end_of_text():
    eos, pad = 2, 0
    new = torch.tensor([[5, 6, 2, pad, pad], [5, 6, 7, 8, 9], [2, pad, pad, pad, pad]])
    assert bench.generated_tokens(new, eos) == 3 + 5 + 1


def test_each_variant_turns_off_only_its_speedup_and_nothing_inherited_leaks():
    base = {"PATH": "/bin", ENV: "all"}
    assert bench.variant_env(None, base) == {"PATH": "/bin"}
    assert bench.variant_env("merged_lora", base) == {"PATH": "/bin", ENV: "merged_lora"}
    assert base[ENV] == "all"  # the caller's environment is not changed


def test_the_plan_pairs_each_speedup_and_alternates_which_side_goes_first():
    plan = bench.lever_plan(["a", "b"], repeats=2)
    assert plan == [("a", "on"), ("a", "off"), ("b", "on"), ("b", "off"),
                    ("a", "off"), ("a", "on"), ("b", "off"), ("b", "on")]


def test_every_speedup_has_the_phase_it_changes():
    missing = set(SPEEDUPS) - set(bench.LEVER_PHASE)
    assert not missing, f"{missing}: Fix: add the phase each changes to LEVER_PHASE in lab/benchmark_cpu.py"


def _run(wall=100.0, train=60.0, **seconds):
    return {"wall_seconds": wall, "train_seconds": train, "time": {"seconds": seconds}}


def test_phase_seconds_reads_the_phase_the_loss_or_the_time_outside_training():
    run = _run(generation=20.0, logps_nograd=1.0, policy_forward=5.0, backward=6.0, step=50.0)
    assert bench.phase_seconds(run, "generation") == 20.0
    assert bench.phase_seconds(run, "loss") == 12.0
    assert bench.phase_seconds(run, "step") == 50.0
    assert bench.phase_seconds(run, "outside training") == 40.0
    assert bench.phase_seconds(run, "job") == 100.0


def test_the_table_gives_the_median_of_each_side_and_their_ratio():
    table = bench.lever_table([{"name": "merged_lora", "phase": "generation", "on": [6.0, 9.0, 7.0],
                                "off": [10.0, 12.0, 9.0]}])
    header, rule, row = table.splitlines()
    assert header.startswith("| speed-up | phase timed |") and rule.count("---") == 6
    assert row == "| merged_lora | generation | 7.0 | 10.0 | 0.70 | 3 |"


def test_levers_run_each_variant_with_its_environment_and_print_the_table(monkeypatch, capsys):
    calls = []

    def fake_run_once(checkout, steps, eval_size, extra, setup="", env=None):
        calls.append((env.get(ENV), list(extra)))
        gen = 10.0 if env.get(ENV) else 7.0  # turning a generation speed-up off makes generation slower
        used = [n for n in SPEEDUPS if n != env.get(ENV)]
        return {**_run(generation=gen, step=30.0), "rows": [], "summary": {"cpu_speedups": used}, "busy_cores": 1.0,
                "time": {"seconds": {"generation": gen, "step": 30.0}, "share": {},
                         "seconds_per_step": 15.0, "generation_tokens_per_s": 40.0}}

    monkeypatch.setattr(bench, "run_once", fake_run_once)
    monkeypatch.setenv(ENV, "all")  # inherited: must not reach the "on" runs
    assert bench.main(["--levers", "merged_lora,pass_at_k_one_call", "--repeats", "2", "--steps", "2"]) == 0
    assert [c[0] for c in calls] == [None, "merged_lora", None, "pass_at_k_one_call",
                                     "merged_lora", None, "pass_at_k_one_call", None]
    assert all("--pass-k-samples" in extra for off, extra in calls[2:4])  # pass@k only where it is timed
    out = capsys.readouterr().out
    assert "| merged_lora | generation | 7.0 | 10.0 | 0.70 | 2 |" in out


def test_a_run_whose_summary_contradicts_its_variant_stops_the_comparison():
    bench.check_switched({"summary": {"cpu_speedups": ["merged_lora"]}}, "merged_lora", "on")
    bench.check_switched({"summary": {}}, "merged_lora", "off")  # an older kit records nothing: nothing to check
    with pytest.raises(SystemExit, match=f"merged_lora off used \\['merged_lora'\\]. Fix: the job must read \\${ENV}"):
        bench.check_switched({"summary": {"cpu_speedups": ["merged_lora"]}}, "merged_lora", "off")


def test_levers_refuse_an_unknown_name_with_the_known_ones():
    with pytest.raises(ValueError, match="Fix: use 'all' or any of"):
        bench.main(["--levers", "warp_drive"])
    with pytest.raises(SystemExit, match="pick one"):
        bench.main(["--levers", "all", "--bandwidth"])


@pytest.mark.slow
def test_bandwidth_and_a_tiny_real_sampling_call_give_sane_numbers(decode_loop_rows, speedups_all_on):
    assert bench.read_bandwidth_gbs(megabytes=64, repeats=2) > 0.1  # any machine reads more than 100 MB/s
    rate, weights = bench.time_sampling("fp32", batch=2, new_tokens=3, repeats=1)
    assert 530e6 < weights < 545e6  # SmolLM2-135M in fp32, the tied embedding counted once: the 538 MB
    assert rate > 0
    assert decode_loop_rows, "fp32 sampling is timed the way GRPO samples: through the kit's decoding loop"


def test_the_matmul_ceiling_times_every_distinct_weight_once():
    """A tied output layer and embedding are one matrix: read once per step, as a decoding step does."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    seen = []
    real_linear = torch.nn.functional.linear
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.nn.functional, "linear", lambda x, w, *a: seen.append(w.shape) or real_linear(x, w, *a))
        rate = bench.time_matmuls(model, batch=4, repeats=2)
    assert len(seen) == 3 * (2 * 7 + 1)  # warm-up + 2 timed passes over 7 projections x 2 layers + the lm_head
    assert rate > 0
