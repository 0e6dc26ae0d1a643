"""Every refusal of `python -m helpers.train` comes before TRL (and transformers) is imported, within seconds; and the
command line's conventions: underscores, TRL's flag names, `~`, a YAML --config, --print-config, --help."""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import train
from helpers.config import PresetError
from helpers.memory import cli as memory_cli

ROOT = Path(__file__).resolve().parents[1]

# Each command a user typed in issue 35 that failed only after the model loaded (or never), with what it must say.
REFUSED = [
    (["--beta", "nan"], "beta=nan: is not a finite number"),
    (["--temperature", "inf"], "temperature=inf: is not a finite number"),
    (["--keep", "0"], "--keep 0: checkpoints are written"),
    (["--seed", "-1"], "seed=-1: must be between 0 and 2**32 - 1"),
    (["--lr-scheduler-type", "bogus"], "lr_scheduler_type='bogus': is not a learning-rate schedule"),
    (["--lora-target-modules", "nope_proj"], "nope_proj: not a layer of the Llama/Qwen2 models"),
    (["--synthetic-levels", "99"], "synthetic_levels=(99,): the synthetic dataset has levels 1, 2, 3"),
    (["--logging-steps", "5", "--max-steps", "2"], "logging_steps=5: is more than max_steps (2)"),
    (["--drive"], "--drive: Google Drive is mounted only on Colab"),
    (["--reward", "broken_rewards:brevity"], "broken_rewards.py, line 1 is not valid Python (expected ':')"),
]


def test_beta_nan_is_refused_in_seconds_without_importing_trl(tmp_path):
    """The command a user types: exit 2 with the field and the fix, no TRL or transformers import (-X importtime
    lists every module imported), well under 10 s (the TRL import alone took 6-7 s)."""
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "helpers.train", "--preset", "cpu", "--beta", "nan",
                        "--run-dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    assert r.returncode == 2 and "error: beta=nan: is not a finite number" in r.stderr and "Fix:" in r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert imported and not {m for m in imported if m.split(".")[0] in ("trl", "transformers", "peft")}
    assert seconds < 10, f"{seconds:.1f} s"
    assert not (tmp_path / "run").exists()


def test_every_early_refusal_imports_no_trl_and_creates_nothing(tmp_path):
    """In a fresh interpreter: main() for each case of REFUSED returns 2 with its message, sys.modules holds no trl,
    transformers or peft afterwards, and no run folder was made."""
    (tmp_path / "broken_rewards.py").write_text("def brevity(prompts, completions, **kw)\n    return [0.0]\n")
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys, time
        sys.path.insert(0, {str(tmp_path)!r})
        from helpers.train import main
        out = []
        for args, _ in {REFUSED!r}:
            err = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stderr(err):
                rc = main(["--preset", "cpu", "--run-dir", {str(tmp_path / "run")!r}, *args])
            out.append((rc, err.getvalue(), time.perf_counter() - start))
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("trl", "transformers", "peft"))
        print(json.dumps({{"results": out, "heavy": heavy}}))
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout.splitlines()[-1])
    assert report["heavy"] == []
    for (args, message), (rc, stderr, seconds) in zip(REFUSED, report["results"]):
        assert rc == 2 and message in stderr and "Fix:" in stderr and "Traceback" not in stderr, (args, stderr)
        assert seconds < 10, (args, seconds)
    assert str(tmp_path / "broken_rewards.py") in report["results"][-1][1]
    assert not (tmp_path / "run").exists()


def test_ctrl_c_exits_130_without_a_traceback(monkeypatch, tmp_path, capsys):
    from helpers.run import pipeline

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run_all", interrupted)
    assert train.main(["--preset", "cpu", "--max-steps", "2", "--run-dir", str(tmp_path / "run")]) == 130
    assert "Traceback" not in capsys.readouterr().err


def _printed_config(capsys, *args) -> dict:
    assert train.main([*args, "--print-config"]) == 0
    return json.loads(capsys.readouterr().out)


def test_print_config_shows_the_resolved_preset_and_options_without_loading_anything(capsys, tmp_path):
    config = _printed_config(capsys, "--preset", "t4", "--max-steps", "3")  # a GPU preset, on this CPU machine
    assert config["preset"] == "t4" and config["max_steps"] == 3 and config["optim"] == "adamw_8bit"
    assert config["keep"] == 2 and config["run_dir"] is None and "name" not in config
    saved = tmp_path / "resolved.yaml"
    saved.write_text(json.dumps(config))
    assert _printed_config(capsys, "--config", str(saved)) == config  # what it prints, --config reads back


def test_underscore_spellings_and_trl_names_are_aliases(capsys, tmp_path):
    config = _printed_config(capsys, "--max_steps", "3", "--per_device_train_batch_size=16", "--output_dir",
                             str(tmp_path / "a"), "--save_total_limit", "4", "--resume_from_checkpoint",
                             "--no_worked_example")
    assert (config["max_steps"], config["per_device_train_batch_size"], config["run_dir"], config["keep"],
            config["resume"], config["worked_example"]) == (3, 16, str(tmp_path / "a"), 4, True, False)
    assert _printed_config(capsys, "--output-dir", "x", "--resume_from_checkpoint", "false")["resume"] is False
    with pytest.raises(SystemExit) as exit_:
        train.main(["--resume_from_checkpoint", "runs/x/trainer/checkpoint-2"])
    assert exit_.value.code == 2 and "Fix: pass --run-dir" in capsys.readouterr().err


def test_a_tilde_in_a_path_flag_is_your_home_folder(capsys):
    """`--run-dir=~/x` (no shell expands a ~ after =) made a folder named "~"."""
    for args in (["--run-dir=~/x"], ["--run-dir", "~/x"], ["--checkpoint-dir", "~/c"]):
        config = _printed_config(capsys, *args)
        assert str(Path.home()) in (config["run_dir"] or config["checkpoint_dir"]) and "~" not in json.dumps(config)


def test_a_yaml_config_file_with_flags_overriding_it(capsys, tmp_path):
    (tmp_path / "run.yaml").write_text(textwrap.dedent("""\
        preset: cpu
        max_steps: 6
        learning_rate: 1e-4          # YAML reads this as text: parsed as the field's type
        lora_target_modules: [q_proj, v_proj]
        run_dir: ~/from-yaml
        rewards: [helpers.rewards:correctness_reward]
    """))
    config = _printed_config(capsys, "--config", str(tmp_path / "run.yaml"), "--max-steps", "8")
    assert (config["max_steps"], config["learning_rate"], config["lora_target_modules"]) == (8, 1e-4,
                                                                                           ["q_proj", "v_proj"])
    assert config["run_dir"] == str(Path.home() / "from-yaml")
    assert config["rewards"] == ["helpers.rewards:correctness_reward"]
    assert _printed_config(capsys, "--config", str(tmp_path / "run.yaml"), "--reward", "m:f")["rewards"] == ["m:f"]


@pytest.mark.parametrize("text,message", [
    ("max_step: 3\n", "unknown key(s) max_step. Fix: use field names: preset, accelerate_config"),
    ("eval_size: ten\n", "eval_size='ten': is the text 'ten', not a whole number"),
    ("max_steps: [3\n", "not valid YAML"),
    ("- 3\n", "holds a list"),
])
def test_a_bad_config_file_is_refused_with_the_fix(tmp_path, capsys, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    assert train.main(["--config", str(tmp_path / "bad.yaml"), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Fix:" in err


def test_help_shows_each_presets_values_and_stays_short():
    r = subprocess.run([sys.executable, "-m", "helpers.train", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and "(cpu: 40, t4: 250)" in r.stdout and "(cpu: adamw_torch, t4: adamw_8bit)" in r.stdout
    assert "the preset's)" not in r.stdout and "--output-dir" in r.stdout and "--save-total-limit" in r.stdout
    assert len(r.stdout.splitlines()) < 140


def test_memory_takes_a_number_of_gb_for_gpu(capsys):
    """Its help says "or a number of GB"; `--gpu 24` was refused as an unknown GPU."""
    from helpers.memory import estimate

    assert memory_cli.main(["--preset", "t4", "--gpu", "24", "--budget-gb", "24", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["peak_gb"] == pytest.approx(estimate("t4", gpu=24.0, budget_gb=24).peak_gb, abs=1e-3)
    assert printed["budget_gb"] == 24
    assert memory_cli.main(["--gpu", "lots"]) == 2 and "unknown GPU 'lots'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        memory_cli.main(["--gpu", "0"])
    assert "positive number of GB" in capsys.readouterr().err


def test_config_file_values_is_the_one_typed_reader(tmp_path):
    (tmp_path / "c.yaml").write_text("keep: '3'\nsynthetic_levels: 1,2\n")
    assert train.config_file_values(tmp_path / "c.yaml") == {"keep": 3, "synthetic_levels": (1, 2)}
    with pytest.raises(PresetError, match="cannot be read"):
        train.config_file_values(tmp_path / "missing.yaml")
