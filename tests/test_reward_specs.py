"""helpers.run.reward_specs: one loader for a student's rewards, whether the CLI names them (--reward module:name)
or 05 loads RUN_DIR/my_rewards.py (course.load_rewards); both refuse a broken file with the file, the line and the
fix, a missing name, and a name that holds no function."""

import sys
import threading
import time
from types import SimpleNamespace

import pytest

from helpers.config import PresetError, get_preset
from helpers.rewards import DEFAULT_REWARDS
from helpers.run import reward_specs
from helpers.run.reward_specs import RewardError, load_reward_functions, resolve_rewards, try_rewards, watch_rewards
from helpers.teaching import course

OWN = ("from helpers.rewards import answer_of\n\n"
       "def brevity_reward(completions, **kw):\n    return [1.0 for _ in completions]\n\n"
       "def helper(x):\n    return x\n\nSCALE_reward = 2.0\n")


@pytest.fixture
def importable(tmp_path, monkeypatch):
    """A folder on sys.path for the CLI's module:name; the modules written there are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        sys.modules.pop(name)


def test_the_notebook_loads_the_files_own_reward_functions_only(tmp_path, capsys):
    (tmp_path / "my_rewards.py").write_text(OWN)
    [reward] = course.load_rewards(tmp_path)  # not answer_of (imported), helper (no _reward), SCALE_reward (a float)
    assert reward.__name__ == "brevity_reward" and reward(completions=["a", "b"]) == [1.0, 1.0]
    assert f"your rewards from {tmp_path / 'my_rewards.py'}: brevity_reward" in capsys.readouterr().out


def test_a_broken_file_is_named_with_its_line_by_both_callers(importable):
    (importable / "rewards_nb.py").write_text("def brevity_reward(completions, **kw)\n    return [0.0]\n")
    (importable / "my_rewards.py").write_text("import math\n\ndef brevity_reward(completions, **kw)\n"
                                              "    return [0.0]\n")
    with pytest.raises(PresetError, match=r"rewards_nb.py, line 1 is not valid Python .*and run the command again"):
        resolve_rewards(["rewards_nb:brevity_reward"])
    with pytest.raises(PresetError, match=r"my_rewards.py, line 3 is not valid Python .*and run this cell again"):
        course.load_rewards(importable)


def test_a_name_that_is_missing_or_holds_no_function_is_refused(importable):
    (importable / "rewards_cli.py").write_text(OWN + "PAIR = [brevity_reward, 3]\n")
    with pytest.raises(PresetError, match="--reward 'rewards_cli:nope': .*no attribute 'nope'"):
        resolve_rewards(["rewards_cli:nope"])
    with pytest.raises(PresetError, match=r"SCALE_reward holds 2.0 \(float\), not a function\. Fix:"):
        resolve_rewards(["rewards_cli:SCALE_reward"])
    with pytest.raises(PresetError, match=r"PAIR holds 3 \(int\), not a function"):
        resolve_rewards(["rewards_cli:PAIR"])
    assert [f.__name__ for f in resolve_rewards(["rewards_cli:brevity_reward"])] == ["brevity_reward"]


def test_an_import_that_fails_inside_the_file_names_the_file_and_the_fix(tmp_path):
    (tmp_path / "my_rewards.py").write_text("from helpers.rewards import no_such_helper\n")
    with pytest.raises(PresetError, match=r"cannot import name 'no_such_helper'.*Fix: correct that import in .*"
                                          r"my_rewards.py and run this cell again"):
        load_reward_functions(tmp_path / "my_rewards.py", again="run this cell again")


def test_a_latin1_byte_in_a_reward_file_says_save_it_as_utf8(importable):
    (importable / "accents.py").write_bytes(b'CAFE = "caf\xe9"\ndef brevity_reward(completions, **kw):\n    return [0.0]\n')
    with pytest.raises(PresetError, match=r"accents.py, line 1 holds a byte that is not UTF-8.*Fix: save the file as "
                                          r"UTF-8") as err:
        resolve_rewards(["accents:brevity_reward"])
    assert "coding line" not in str(err.value)


# ------------------------------------------------- tried on a sample group before the model loads, watched after

def _reward(body: str, name: str = "my_reward"):
    """A reward function written as a student would, in a file of its own (so its line can be named)."""
    namespace = {}
    code = compile(f"import time\ndef {name}(prompts, completions, answer, **kw):\n{body}\n", f"{name}.py", "exec")
    exec(code, namespace)  # noqa: S102 - the stand-in student's file
    return namespace[name]


@pytest.mark.parametrize("body, said", [
    ("    return [1.0 / 0 for c in completions]", "raised ZeroDivisionError: float division by zero (my_reward.py, line 3)"),
    ("    completions.clear()\n    return []", "changed its argument completions"),
    ("    return [1.0]", "returned 1 rewards for 4 completions"),
    ("    return 1.0", "returned float 1.0, not a list of numbers"),
    ("    return ['1.0' for c in completions]", "returned '1.0' (str) among its rewards, not a number"),
    ("    answer[0] = 'x'\n    return [0.0 for c in completions]", "changed its argument the dataset's columns"),
])
def test_a_broken_reward_is_refused_on_a_sample_group_naming_the_function_and_the_fix(body, said):
    with pytest.raises(RewardError) as err:
        try_rewards([_reward(body)], get_preset("cpu", num_generations=4, per_device_train_batch_size=4))
    assert said in str(err.value) and "reward function my_reward" in str(err.value) and "Fix:" in str(err.value)
    assert "before loading the model" in str(err.value)


def test_the_kits_rewards_and_a_correct_student_reward_pass_the_sample_group():
    good = _reward("    return [float(answer[i] in c[0]['content']) for i, c in enumerate(completions)]")
    try_rewards([*DEFAULT_REWARDS, good], get_preset("cpu"))
    try_rewards(list(DEFAULT_REWARDS), get_preset("t4"))  # GSM8K's columns


def test_a_reward_that_never_returns_is_stopped_at_the_limit_with_the_fix():
    start = time.perf_counter()
    with pytest.raises(RewardError, match=r"my_reward \(my_reward.py, line 2\) ran for more than 1 s .*--reward-timeout"):
        try_rewards([_reward("    time.sleep(60)")], get_preset("cpu"), limit_s=1)
    assert time.perf_counter() - start < 10


def test_a_long_reward_call_in_training_says_so_and_the_limit_stops_it_in_any_thread(monkeypatch, capsys):
    """During training (watch_rewards around the trainer's own list): a heartbeat while a call runs, its name kept for
    TRL's logs, and the limit also where the call runs outside the main thread."""
    monkeypatch.setattr(reward_specs, "REWARD_HEARTBEAT_S", 0.3)
    slow, hang = _reward("    time.sleep(1.0)\n    return [0.0]", "slow_reward"), _reward("    while True:\n        pass",
                                                                                           "hang_reward")
    trainer = SimpleNamespace(reward_funcs=[slow, hang], state=SimpleNamespace(global_step=3))
    watch_rewards(trainer, limit_s=2)
    assert [f.__name__ for f in trainer.reward_funcs] == ["slow_reward", "hang_reward"]
    assert trainer.reward_funcs[0](prompts=[], completions=[], answer=[]) == [0.0]
    assert "reward function slow_reward has been running for 0 s on one group at step 3" in capsys.readouterr().out
    errors = []

    def in_a_thread():
        try:
            trainer.reward_funcs[1](prompts=[], completions=[], answer=[])
        except RewardError as err:
            errors.append(str(err))

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive() and "hang_reward" in errors[0] and "ran for more than 2 s" in errors[0]


HANGS_IN_TRAINING = """import time

def stuck_reward(completions, trainer_state=None, **kw):
    if type(trainer_state).__name__ == "TrainerState":  # the sample group passes; the real run's first batch hangs
        time.sleep(600)
    return [0.0 for c in completions]
"""


@pytest.mark.slow
def test_a_reward_that_hangs_in_training_is_stopped_with_the_fix_and_the_resume_line(tmp_path):
    """The command a user types: the reward passes the sample group, then never returns on the first real batch.
    With --reward-timeout 5 the run stops at step 0 with the function named, the fix, how to resume, exit 2; the
    folder's lock is released and nothing trained is claimed."""
    import json
    import subprocess

    (tmp_path / "stuck.py").write_text(HANGS_IN_TRAINING)
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--max-steps", "2", "--eval-size",
                        "2", "--no-evaluate", "--run-dir", str(run), "--reward", "stuck:stuck_reward",
                        "--reward-timeout", "5"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2, r.stderr[-3000:]
    assert "reward function stuck_reward" in r.stderr and "ran for more than 5 s on one group" in r.stderr
    assert "--reward-timeout" in r.stderr and "again: it starts over from step 0" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (run / "summary.json").exists() and json.loads((run / "config.json").read_text())["reward_funcs"] == [
        "stuck_reward"]
    assert not (run / ".grpo-kit.lock.json").exists()
