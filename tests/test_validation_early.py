"""Every refusal of `python -m helpers.train` comes before TRL (and transformers) is imported, within seconds; and the
command line's conventions: underscores, TRL's flag names, `~`, a YAML --config, --print-config, --help. Those of
`python -m helpers.evaluate` too, with its run folder left as it was."""

import json
import os
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
    # issue 46: a recipe for several processes started as one; a limit that is no limit; rewards tried before loading
    (["--num-processes", "2"], "num_processes=2, but this is one process"),
    (["--eval-size", "100000"], "--eval-size 100000: the synthetic held-out split (levels 1) has 7545 questions"),
    (["--reward-timeout", "-1"], "--reward-timeout -1.0: is not a number of seconds >= 0"),
    (["--reward", "broken_rewards:raising_reward"], "raised AttributeError: 'list' object has no attribute 'strip'"),
    (["--reward", "broken_rewards:emptying_reward"], "changed its argument completions"),
    (["--reward", "broken_rewards:one_reward"], "returned 1 rewards for 8 completions"),
    (["--reward", "broken_rewards:text_reward"], "returned 'good' (str) among its rewards, not a number"),
    (["--reward", "broken_rewards:sleeping_reward", "--reward-timeout", "1"], "ran for more than 1 s on one group"),
    (["--reward", "syntax_rewards:brevity"], "syntax_rewards.py, line 1 is not valid Python (expected ':')"),
]
BROKEN_REWARDS = """import time

def raising_reward(completions, answer, **kw):
    return [float(c.strip() == answer[0]) for c in completions]  # a chat completion is a list of messages

def emptying_reward(completions, **kw):
    completions.clear()
    return []

def one_reward(completions, **kw):
    return [1.0]

def text_reward(completions, **kw):
    return ["good" for c in completions]

def sleeping_reward(completions, **kw):
    time.sleep(30)
    return [0.0 for c in completions]
"""


# TRL's parser (trl.scripts.utils.TrlParser, helpers.cli) loads TRL's lazy package shell and nothing else of it
TRL_PARSER = ("trl", "trl._compat", "trl.import_utils", "trl._lazy_module", "trl.scripts", "trl.scripts.utils",
              "trl.scripts._hf_argparser")


def test_beta_nan_is_refused_in_seconds_without_importing_trl(tmp_path):
    """The command a user types: exit 2 with the field and the fix, before TRL's trainer, transformers or peft is
    imported (-X importtime lists every module imported; of TRL only its parser), well under 10 s (the TRL import
    alone took 6-7 s)."""
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "helpers.train", "--preset", "cpu", "--beta", "nan",
                        "--run-dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    assert r.returncode == 2 and "error: beta=nan: is not a finite number" in r.stderr and "Fix:" in r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert imported and not {m for m in imported if m.split(".")[0] in ("trl", "transformers", "peft")} - {*TRL_PARSER}
    assert set(TRL_PARSER) <= imported  # the parser is TRL's
    assert seconds < 10, f"{seconds:.1f} s"
    assert not (tmp_path / "run").exists()


def test_every_early_refusal_imports_no_trl_and_creates_nothing(tmp_path):
    """In a fresh interpreter: main() for each case of REFUSED returns 2 with its message, sys.modules holds no trl,
    transformers or peft afterwards (TRL's parser leaves none: helpers.cli), and no run folder was made."""
    (tmp_path / "syntax_rewards.py").write_text("def brevity(prompts, completions, **kw)\n    return [0.0]\n")
    (tmp_path / "broken_rewards.py").write_text(BROKEN_REWARDS)
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
    assert str(tmp_path / "syntax_rewards.py") in report["results"][-1][1]
    assert str(tmp_path / "broken_rewards.py") in report["results"][-6][1]  # the function's file and line
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
    ("max_step: 3\n", "unknown key(s) max_step. Fix: use the flags' names: accelerate_config, backend"),
    ("eval_size: ten\n", "eval_size='ten': is the text 'ten', not a whole number"),
    ("max_steps: [3\n", "is not YAML of `field: value` lines (while parsing a flow sequence)"),
    ("- 3\n", "is not YAML of `field: value` lines (Config file"),
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


def test_a_config_files_values_are_typed_as_the_fields(tmp_path):
    """TRL's parser sets a file's values as the flags' defaults as they are; the kit types them first (text and lists
    become the field's type), and a missing file is refused with the fix."""
    (tmp_path / "c.yaml").write_text("keep: '3'\nsynthetic_levels: 1,2\nlora_target_modules: [q_proj]\n")
    args = train.parse_args(["--config", str(tmp_path / "c.yaml")])
    assert (args.keep, args.synthetic_levels, args.lora_target_modules) == (3, (1, 2), ("q_proj",))
    (tmp_path / "c.yaml").write_text("keep: many\n")
    with pytest.raises(PresetError, match=r"^keep='many': is the text 'many', not a whole number\. Fix:"):
        train.parse_args(["--config", str(tmp_path / "c.yaml")])
    with pytest.raises(PresetError, match=r"missing.yaml: cannot be read \(No such file or directory\)\. Fix:"):
        train.parse_args([f"--config={tmp_path / 'missing.yaml'}"])


# ------------------------------------------------------------------ python -m helpers.evaluate (issue 46)

HEAVY = ("torch", "transformers", "peft", "trl")


def _evaluable_run(tmp_path) -> Path:
    """A cpu run folder as helpers.evaluate reads it: config.json, an adapter (only its config is looked at before
    the model loads) and an earlier eval.json that a refusal must leave alone."""
    from helpers.config import get_preset

    run = tmp_path / "run"
    (run / "adapter").mkdir(parents=True)
    config = dict(json.loads(json.dumps(get_preset("cpu").to_dict(), default=list)), reward_funcs=["correctness"])
    (run / "config.json").write_text(json.dumps(config, indent=2))
    (run / "adapter" / "adapter_config.json").write_text("{}")
    (run / "eval.json").write_text('{"greedy": "the earlier evaluation"}')
    return run


def _files(folder: Path) -> dict:
    """Every file under folder with its bytes and modification time: what "nothing written" compares."""
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _evaluate(*args, code=None):
    """`python -m helpers.evaluate ARGS` (or the script `code` given ARGS) under -X importtime: (result, the heavy
    libraries it imported)."""
    command = ["-c", code] if code else ["-m", "helpers.evaluate"]
    r = subprocess.run([sys.executable, "-X", "importtime", *command, *map(str, args)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert imported, "-X importtime printed nothing"
    r.stderr = "\n".join(line for line in r.stderr.splitlines() if not line.startswith("import time:"))
    return r, sorted(m for m in imported if m.split(".")[0] in HEAVY)


EVALUATE_REFUSED = [
    (["--k", "0"], "error: --k 0: each k must be 1 or more (pass@k draws k of the samples). Fix: pass e.g. --k 1,4"),
    (["--samples", "-1"], "error: --samples -1: must be 0 (no pass@k) or more sampled completions per question. "
                          "Fix: pass e.g. --samples 4, or --samples 0 to skip pass@k"),
    (["--eval-size", "0"], "error: --eval-size 0: must be 1 or more. Fix: pass e.g. --eval-size 50"),
    (["--eval-size", "-5"], "error: --eval-size -5: must be 1 or more. Fix:"),
    (["--eval-max-new-tokens", "0"], "error: --eval-max-new-tokens 0: must be 1 or more. Fix:"),
    (["--samples", "0", "--k", "2"], "error: --k 2 with --samples 0: pass@k needs sampled completions. Fix: pass "
                                     "--samples 2"),
    (["--k", "8"], "error: --k 8 is larger than --samples 4; pass@k needs k <= samples. Fix: pass --samples 8"),
    (["--eval-size", "100000"], "error: --eval-size 100000: the synthetic held-out split (levels 1) has 7545 "
                                "questions. Fix: pass --eval-size 7545 or less (the run evaluated 50)"),
]


@pytest.mark.parametrize("args, message", EVALUATE_REFUSED, ids=[" ".join(a) for a, _ in EVALUATE_REFUSED])
def test_evaluate_refuses_a_flag_out_of_range_at_once(tmp_path, args, message):
    """Issue 46: --k 0, --samples -1 and --eval-size 0 failed only after the model loaded and sampled ("1
    completions for 0 questions"), --eval-size 100000 searched the synthetic split for minutes. Now: exit 2 naming
    the flag, its value, the range and the fix, before torch or transformers is imported, the folder untouched."""
    run = _evaluable_run(tmp_path)
    before = _files(run)
    r, heavy = _evaluate("--run-dir", run, *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert heavy == [] and _files(run) == before


def test_evaluate_refuses_a_cut_off_config_json_with_the_fix(tmp_path):
    """A config.json cut off by a kill or a full disk (its first 40 bytes) gave JSONDecodeError's "Unterminated
    string" traceback."""
    run = _evaluable_run(tmp_path)
    (run / "config.json").write_bytes((run / "config.json").read_bytes()[:40])
    before = _files(run)
    r, heavy = _evaluate("--run-dir", run)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: {run / 'config.json'} is unreadable (JSONDecodeError: Unterminated string")
    assert "it was cut off (a kill or a full disk while it was written) or edited" in r.stderr
    assert "Fix: put back a copy" in r.stderr and f"python -m helpers.train --run-dir {run} --overwrite" in r.stderr
    assert heavy == [] and _files(run) == before


# Every write under the run folder fails as on a read-only folder or disk, even as root (chmod stops no root).
READ_ONLY_EVALUATE = """
import builtins, sys
run, real_open = sys.argv[2], builtins.open

def read_only(file, mode="r", *args, **kwargs):
    if str(file).startswith(run) and set(mode) & set("wax+"):
        raise PermissionError(13, "Permission denied", str(file))
    return real_open(file, mode, *args, **kwargs)

builtins.open = read_only
from helpers.evaluate import main
sys.exit(main(sys.argv[1:]))
"""


def test_evaluate_refuses_a_read_only_run_folder_before_the_model_loads(tmp_path):
    """It evaluated for minutes, then died on a raw OSError writing eval.json."""
    run = _evaluable_run(tmp_path)
    before = _files(run)
    r, heavy = _evaluate("--run-dir", run, code=READ_ONLY_EVALUATE)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"error: --run-dir {run} is not writable (Permission denied: {run}/" in r.stderr
    assert f"Fix: copy the run folder somewhere writable (cp -r {run} runs/copy) and pass --run-dir runs/copy" in r.stderr
    assert heavy == [] and _files(run) == before
    run.chmod(0o555)  # the real thing, where chmod binds (not as root)
    try:
        if not os.access(run, os.W_OK):
            r, heavy = _evaluate("--run-dir", run)
            assert r.returncode == 2 and f"--run-dir {run} is not writable" in r.stderr and heavy == [], r.stderr
    finally:
        run.chmod(0o755)
    assert _files(run) == before


def test_evaluate_refuses_a_run_folder_another_process_writes(tmp_path):
    """It took no lock: beside a training process it replaced the run's own eval.json. A folder whose RunLock
    another process holds (here: this test's) is refused with RunLock's message, before the model loads."""
    from helpers.run.folder import RunLock

    run = _evaluable_run(tmp_path)
    lock = RunLock(run)
    try:
        before = _files(run)
        r, heavy = _evaluate("--run-dir", run)
        after = _files(run)  # the holder's .grpo-kit.lock.json included: it goes with the release below
    finally:
        lock.release()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"error: --run-dir {run} is in use by process {os.getpid()}" in r.stderr
    assert f"Fix: wait for it to finish, stop it (kill {os.getpid()}" in r.stderr
    assert heavy == [] and after == before


def test_evaluate_holds_the_lock_while_it_evaluates_and_releases_it(tmp_path, monkeypatch):
    """The claim lasts from before the model loads to after eval.json is written, and goes with an error too."""
    from helpers import evaluate
    from helpers.run.folder import LOCK_INFO, RunLock

    run = _evaluable_run(tmp_path)
    seen = []

    def evaluating(run_dir, preset, adapter, samples, ks):
        seen.append(json.loads((run_dir / LOCK_INFO).read_text())["pid"])
        if len(seen) == 2:
            raise ValueError("stopped inside the evaluation")
        return {"evaluated": preset.eval_size}

    monkeypatch.setattr(evaluate, "_evaluate", evaluating)
    assert evaluate.evaluate_run(run, eval_size=3) == {"evaluated": 3}
    with pytest.raises(ValueError, match="stopped inside"):
        evaluate.evaluate_run(run)
    assert seen == [os.getpid()] * 2 and not (run / LOCK_INFO).exists()
    RunLock(run).release()  # free again: taken and given back


def test_the_held_out_count_is_what_the_synthetic_split_gives():
    """helpers.evaluate's count of the synthetic held-out split is the exact number synthetic_problems can draw:
    at it, it succeeds; one more, it gives up (the search that took minutes for --eval-size 100000)."""
    from helpers.data import synthetic_problems
    from helpers.data import synthetic_heldout_count

    assert synthetic_heldout_count((1,)) == 7545 and len(synthetic_problems(7545, "heldout")) == 7545
    assert synthetic_heldout_count((1,), ("sub",)) == 1886 and len(synthetic_problems(1886, "heldout",
                                                                                     operations=("sub",))) == 1886
    with pytest.raises(ValueError, match="could not find 1887 distinct heldout problems"):
        synthetic_problems(1887, "heldout", operations=("sub",))
