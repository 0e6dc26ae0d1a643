"""helpers.run.reward_specs: one loader for a student's rewards, whether the CLI names them (--reward module:name)
or 05 loads RUN_DIR/my_rewards.py (course.load_rewards); both refuse a broken file with the file, the line and the
fix, a missing name, and a name that holds no function."""

import sys

import pytest

from helpers.config import PresetError
from helpers.run.reward_specs import load_reward_functions, resolve_rewards
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
