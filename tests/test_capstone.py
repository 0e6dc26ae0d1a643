"""The capstone checker (helpers.capstone): every rule, on tiny scripts that load no model, and the verdict on
scripts written as students would, trained for real.

The tiny scripts train a fake GRPOTrainer: a `trl` and a `transformers` package written into a temporary folder put
first on PYTHONPATH, shaped like the real ones where the checker looks (transformers.trainer.Trainer with
__init__, train, add_callback and the callback events; trl.GRPOTrainer subclassing it, sampling and scoring every
num_iterations steps as TRL does, its LoRA B moving only when a group's scores differ). With no real model, the
checker's measurement of the saved adapter is stood in for there; it runs for real in
tests/test_capstone_scripts.py (tests/capstone_scripts/, TRL 1.15, 2 CPU steps each, slow) and in
tests/test_notebooks.py, which executes notebooks/09_capstone.ipynb (the reference solution and its check).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import tempfile
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from helpers import capstone, capstone_watch

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "capstone" / "solution" / "train_grpo.py"
NOTEBOOK = ROOT / "notebooks" / "09_capstone.ipynb"
STUDENT_NOTEBOOK = ROOT / "notebooks" / "student" / "09_capstone.ipynb"

FAKE_TRANSFORMERS = '''
class TrainerCallback:
    pass
'''
FAKE_TRANSFORMERS_TRAINER = '''
class TrainerState:
    def __init__(self):
        self.global_step, self.max_steps, self.log_history = 0, 0, []


class Trainer:
    def __init__(self, model=None, args=None, **kwargs):
        self.model, self.args, self.state, self.callbacks = model, args, TrainerState(), []

    def add_callback(self, callback):
        self.callbacks.append(callback)

    def event(self, name, **kwargs):
        for callback in self.callbacks:
            getattr(callback, name, lambda *a, **k: None)(self.args, self.state, None, **kwargs)

    def train(self):
        self._inner_training_loop()

    def _inner_training_loop(self):
        pass
'''
# TRL's arithmetic where the checker looks: a batch is sampled (and its rewards scored) every num_iterations steps;
# log() reports the metrics gathered since the last log, so a step that did not sample logs no reward.
FAKE_TRL = '''
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from transformers.trainer import Trainer


# a group of two: one right answer, one without an answer; the rows it comes from
SAMPLED = [[{"role": "assistant", "content": "<reasoning>\\n3 * 4\\n</reasoning>\\n<answer>\\n12\\n</answer>"}],
           [{"role": "assistant", "content": "a"}]]
ROWS = [{"prompt": [{"role": "user", "content": "Ana has 3 bags with 4 apples in each bag. How many apples does Ana "
                                                "have?"}], "answer": "12"}]


class GRPOConfig:
    def __init__(self, max_steps=1, logging_steps=1, num_iterations=1, learning_rate=0.1, **kwargs):
        self.max_steps, self.logging_steps, self.num_iterations = max_steps, logging_steps, num_iterations
        self.learning_rate, self.gradient_accumulation_steps, self.steps_per_generation = learning_rate, 1, 1


class LoraModel:
    """peft's names: lora_B starts at zero; save_pretrained drops the adapter's name (.default)."""

    def __init__(self):
        self.weights = {"base_model.q_proj.lora_A.default.weight": np.ones((2, 4), np.float32),
                        "base_model.q_proj.lora_B.default.weight": np.zeros((4, 2), np.float32)}

    def named_parameters(self):
        return list(self.weights.items())

    def save_pretrained(self, folder):
        Path(folder).mkdir(parents=True)
        (Path(folder) / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
        save_file({k.replace(".default", ""): v for k, v in self.weights.items()},
                  str(Path(folder) / "adapter_model.safetensors"))


class GRPOTrainer(Trainer):
    def __init__(self, model=None, reward_funcs=(), args=None, train_dataset=None, **kwargs):
        super().__init__(model=model, args=args)
        self.reward_funcs, self.train_dataset = list(reward_funcs), train_dataset or ROWS

    def _inner_training_loop(self):
        self.state.max_steps, metrics = self.args.max_steps, []
        self.event("on_train_begin")
        for step in range(1, self.args.max_steps + 1):
            self.state.global_step = step
            if (step - 1) % self.args.num_iterations == 0:  # sample a group of 2, score it
                totals = np.sum([f(prompts=["q"] * 2, completions=SAMPLED, answer=["12"] * 2)
                                 for f in self.reward_funcs], axis=0)
                metrics.append(0.25 * step)
            # no spread in the group, no advantage, no gradient: the adapter moves only when the scores differ
            self.model.weights["base_model.q_proj.lora_B.default.weight"] += self.args.learning_rate * (totals.std() > 0)
            self.event("on_step_end")
            if step % self.args.logging_steps == 0:
                logs = {"loss": 0.0, **({"reward": sum(metrics) / len(metrics), "reward_std": float(totals.std())}
                                        if metrics else {})}
                metrics.clear()
                self.state.log_history.append({**logs, "step": step})
                self.event("on_log", logs=logs)
        self.event("on_train_end")
'''
CONTRACT = '''
import argparse
ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()
'''
GOOD = CONTRACT + '''
from trl import GRPOConfig, GRPOTrainer, LoraModel


def my_reward(prompts, completions, answer, **kwargs):
    return [2.0 if c[0]["content"].strip().endswith(f"{a}\\n</answer>") else 0.0 for c, a in zip(completions, answer)]


model = LoraModel()
trainer = GRPOTrainer(model=model, reward_funcs=[my_reward], args=GRPOConfig(max_steps=args.max_steps))
trainer.train()
model.save_pretrained(f"{args.output_dir}/adapter")
'''

REWARD_LINE = GOOD.splitlines()[GOOD.splitlines().index("def my_reward(prompts, completions, answer, **kwargs):") + 1]


@pytest.fixture
def fake_trl(tmp_path, monkeypatch):
    """A fake trl and transformers first on the script's PYTHONPATH (the checker puts the kit's folder before it)."""
    site = tmp_path / "site"
    (site / "transformers").mkdir(parents=True)
    (site / "transformers" / "__init__.py").write_text(FAKE_TRANSFORMERS)
    (site / "transformers" / "trainer.py").write_text(FAKE_TRANSFORMERS_TRAINER)
    (site / "trl").mkdir()
    (site / "trl" / "__init__.py").write_text(FAKE_TRL)
    monkeypatch.setenv("PYTHONPATH", str(site))
    # No real model trains here, so nothing moves a real adapter: what the checker measures on the saved adapter
    # (helpers.capstone._judge_learning) is judged on TRL's real runs (tests/test_capstone_scripts.py),
    # and stood in for here by a measurement that says it was reached (details["stand_in"]).
    monkeypatch.setattr(capstone, "_judge_learning", lambda t, out, weights: {"direction": 1.0, "agreement": 1.0,
                                                                              "stand_in": True})
    return site


def _script(tmp_path: Path, code: str) -> Path:
    path = tmp_path / "train_grpo.py"
    path.write_text(textwrap.dedent(code))
    return path


RIGHTS = ("[grpo-kit] capstone: train_grpo.py runs as you, with your rights: it can read, change and delete your "
          "files, and it sees your environment (an HF token in it too). Review a script before you check someone "
          "else's.")


def _not_yet(result, *phrases):
    assert not result.passed and repr(result).startswith("Not yet: "), repr(result)
    for phrase in phrases:
        assert phrase in result.message, f"{phrase!r} not in {result.message!r}"
    return result.message


# ------------------------------------------------------------------------------------- the pass path (fake TRL)


def test_a_script_that_trains_a_grpo_trainer_passes(tmp_path, fake_trl, capsys):
    result = capstone.check(_script(tmp_path, GOOD))
    assert result.passed and repr(result).startswith("Passed: "), repr(result)
    assert repr(result).startswith("Passed: TRL's GRPOTrainer trained 2 steps in your trainer.train() with your "
                                   "rewards (my_reward;") and "the adapter you saved learned from them" in repr(result)
    assert "the 2 steps that sampled: 0.250, 0.500" in repr(result)
    assert result.details["lora_b_changed"] == result.details["lora_b_tensors"] == 1
    assert result.details["stand_in"]  # the adapter's measurement was reached (a stand-in here: no real model)
    capsys.readouterr()
    assert capstone.main([str(tmp_path / "train_grpo.py"), "--timeout", "60"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("Passed: ")
    # what the script is doing, as it happens, with the elapsed time (the real check runs about a minute)
    assert out[0].startswith("[grpo-kit] capstone: running train_grpo.py --max-steps 2 in a fresh Python")
    assert out[1] == RIGHTS
    assert any(re.fullmatch(r"\[grpo-kit\] capstone: built GRPOTrainer \(\d+ s\)", line) for line in out)
    assert any(line.startswith("[grpo-kit] capstone: trainer.train() returned at step 2 (") for line in out)
    assert re.fullmatch(r"\[grpo-kit\] capstone: the script ended after \d+ s \(exit 0\); judging what it did", out[-3])
    assert out[-2] == "[grpo-kit] capstone: the script's run is over; measuring its saved adapter on the base model ..."


def test_a_subclass_of_grpo_trainer_counts(tmp_path, fake_trl):
    code = GOOD.replace("trainer = GRPOTrainer(", "class MyTrainer(GRPOTrainer):\n    pass\n\n\ntrainer = MyTrainer(")
    assert capstone.check(_script(tmp_path, code)).passed


# ------------------------------------------------------------------------------------- refusals before running


def test_missing_script_says_what_to_do(tmp_path, capsys):
    _not_yet(capstone.check(tmp_path / "train_grpo.py"), "does not exist", "Fix: write train_grpo.py")
    assert capstone.main([str(tmp_path / "train_grpo.py")]) == 1
    assert capsys.readouterr().err.startswith("Not yet: ")


def test_a_folder_is_called_a_folder_and_a_missing_file_missing(tmp_path):
    _not_yet(capstone.check(tmp_path), f"{tmp_path} is a folder, not a script",
             f"Fix: pass the path of the .py file inside it, e.g. {tmp_path / 'train_grpo.py'}")
    message = _not_yet(capstone.check(tmp_path / "nope.py"), "nope.py does not exist")
    assert "is a folder" not in message


def test_a_latin1_byte_names_the_line_and_says_save_as_utf8(tmp_path, capsys):
    script = tmp_path / "train_grpo.py"
    script.write_bytes(GOOD.encode() + "# caf\u00e9: r\u00e9compense\n".encode("latin-1"))
    line = GOOD.count("\n") + 1
    _not_yet(capstone.check(script), f"train_grpo.py is not UTF-8: byte 0xe9 on line {line}",
             "Fix: save the file as UTF-8")
    assert capstone.main([str(script)]) == 1
    assert "Traceback" not in capsys.readouterr().err
    # a coding line makes it valid Python: then it is read as the line says, and only the usual checks apply
    script.write_bytes(b"# -*- coding: latin-1 -*-\n" + script.read_bytes())
    capstone.read_script(script)


def test_the_kit_pipeline_is_refused_before_running(tmp_path):
    """Read with ast: no model loads, no subprocess starts (a fraction of a second)."""
    for code, module, fix in [
        ("from helpers.train import main\nmain()\n", "helpers.train", "GRPOTrainer(...) yourself"),
        ("from helpers.run import pipeline\nfrom trl import GRPOTrainer\n", "helpers.run.pipeline", "trl_patches"),
        ("import helpers.teaching.course\nGRPOTrainer = 1\n", "helpers.teaching.course", "teaching helpers"),
        ("from helpers import rewards\nfrom trl import GRPOTrainer\n", "helpers.rewards", "write your reward functions"),
        ("from helpers.rewards import correctness_reward\n", "helpers.rewards", "def my_reward(prompts, completions"),
        ("import importlib\nimportlib.import_module('helpers.cli')\n", "helpers.cli", "From the kit you may import"),
    ]:
        started = time.time()
        message = _not_yet(capstone.check(_script(tmp_path, code)), f"imports {module}", "Fix: ", fix,
                           "helpers.data, helpers.prompts, helpers.model")
        assert "line " in message and time.time() - started < 1.0


def test_the_allowed_kit_modules_pass_the_static_check(tmp_path):
    script = _script(tmp_path, "from helpers.data import synthetic_dataset\nfrom helpers import prompts\n"
                               "from helpers.model import prepare_embedded_model\nimport helpers.cpu_compat\n"
                               "from helpers.run.trl_patches import patch_trl_for_cpu\nfrom trl import GRPOTrainer\n")
    capstone.read_script(script)  # raises CapstoneError on a refusal


def test_the_skeleton_is_not_answered_yet_without_running(tmp_path):
    """The student copy's skeleton (imports, the argparse contract, TODOs): feedback at once, no traceback."""
    from scripts.make_student_notebooks import capstone_skeleton

    skeleton = capstone_skeleton(REFERENCE.read_text())
    started = time.time()
    message = _not_yet(capstone.check(_script(tmp_path, skeleton)), "not answered yet", "TODO", "Fix: write each")
    assert time.time() - started < 1.0 and "Traceback" not in message


def test_a_syntax_error_names_the_line(tmp_path):
    _not_yet(capstone.check(_script(tmp_path, "x = (\n")), "line 1", "Fix that line")


def test_a_script_without_grpo_trainer_is_refused_before_running(tmp_path):
    _not_yet(capstone.check(_script(tmp_path, CONTRACT)), "never uses GRPOTrainer", "from trl import")


# ------------------------------------------------------------------------------------- refusals after running


def test_the_kit_pipeline_imported_at_runtime_is_refused(tmp_path, fake_trl):
    """A name built at runtime escapes ast; the bootstrap records what the student's code imported."""
    code = GOOD.replace("trainer.train()", "import importlib\nimportlib.import_module('helpers.' + 'train')\n"
                                           "trainer.train()")
    _not_yet(capstone.check(_script(tmp_path, code)), "while running, train_grpo.py imports helpers.train",
             "GRPOTrainer(...) yourself")


@pytest.mark.parametrize("reach, how", [
    ("import runpy\nrunpy.run_module('helpers.' + 'train', run_name='not_main')", "imports helpers.train"),
    ("import runpy\nrunpy.run_path(HELPERS + '/train.py', run_name='not_main')", "reads the source of helpers.train"),
    ("exec(compile(open(HELPERS + '/run/pipeline.py').read(), 'x.py', 'exec'))",
     "reads the source of helpers.run.pipeline"),
    ("__import__('helpers.run.' + 'pipeline')", "imports helpers.run.pipeline"),
    ("exec(compile('import helpers.train', HELPERS + '/data.py', 'exec'))",  # posing as an allowed module
     "compiles code under the file name of helpers.data"),
    ("f = lambda: __import__('helpers.' + 'train')\nf.__code__ = f.__code__.replace(co_filename=HELPERS + '/data.py')",
     "compiles code under the file name of helpers.data"),
    ("import importlib.util\nimportlib.util.find_spec('helpers.' + 'train')", "imports helpers.train"),
])
def test_the_pipeline_reached_without_an_import_statement_is_refused(tmp_path, fake_trl, reach, how):
    """The issue's first cheat: the kit's pipeline run without an import statement naming it (runpy, exec, a name
    built at runtime). Refused whatever the script does afterwards, even if it also trains for real."""
    code = GOOD.replace("trainer.train()", f"HELPERS = {str(capstone.HELPERS)!r}\ntry:\n    "
                        + reach.replace("\n", "\n    ") + "\nexcept Exception:\n    pass\ntrainer.train()")
    _not_yet(capstone.check(_script(tmp_path, code)), f"while running, train_grpo.py {how}", "Fix: ",
             "From the kit you may import only")


@pytest.mark.parametrize("spawn", ["subprocess.run([sys.executable, '-m', 'helpers.train', '--help'])",
                                   "os.system('python3 -c pass')",
                                   "subprocess.run('echo go && python -m helpers.' + 'train', shell=True)"])
def test_a_python_subprocess_is_refused(tmp_path, fake_trl, spawn):
    code = GOOD.replace("trainer.train()", f"import os, subprocess, sys\n{spawn}\ntrainer.train()")
    started = time.monotonic()
    _not_yet(capstone.check(_script(tmp_path, code)), "while running, train_grpo.py starts another Python",
             "no subprocess")
    assert time.monotonic() - started < 20  # stopped before it starts: the kit's pipeline never loads


def test_a_non_python_subprocess_is_allowed(tmp_path, fake_trl):
    code = GOOD.replace("trainer.train()", "import subprocess\nsubprocess.run(['true'])\ntrainer.train()")
    assert capstone.check(_script(tmp_path, code)).passed


def test_the_kit_modules_the_allowed_ones_import_are_not_the_students(tmp_path, fake_trl):
    """helpers.model imports helpers.runtime and helpers.backend itself: allowed. The script importing
    helpers.runtime by a name built at runtime is not, even once it is loaded."""
    allowed = GOOD.replace("from trl import", "from helpers.model import prepare_embedded_model\nfrom trl import")
    assert capstone.check(_script(tmp_path, allowed)).passed
    direct = allowed.replace("trainer.train()", "import importlib\nimportlib.import_module('helpers.' + 'runtime')"
                                                "\ntrainer.train()")
    _not_yet(capstone.check(_script(tmp_path, direct)), "train_grpo.py imports helpers.runtime")


def test_kit_module_names_a_file_of_helpers():
    assert capstone.kit_module(str(capstone.HELPERS / "run" / "pipeline.py")) == "helpers.run.pipeline"
    assert capstone.kit_module(str(capstone.HELPERS / "__pycache__" / "train.cpython-311.pyc")) == "helpers.train"
    assert capstone.kit_module(str(capstone.HELPERS / "run" / "__init__.py")) == "helpers.run"
    assert capstone.kit_module(str(capstone.KIT / "capstone" / "solution" / "train_grpo.py")) is None
    assert capstone.kit_module(3) is None and capstone.kit_module("<string>") is None


def test_a_student_module_that_imports_the_pipeline_is_refused(tmp_path, fake_trl):
    (tmp_path / "mine.py").write_text("from helpers.run import pipeline  # noqa\n")
    _not_yet(capstone.check(_script(tmp_path, "import mine\n" + GOOD)), "mine.py imports helpers.run.pipeline")


def test_a_trainer_that_is_never_built(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, CONTRACT + "from trl import GRPOTrainer\n")),
             "never built TRL's GRPOTrainer", "no trainer at all", "Fix: trainer = GRPOTrainer(")


def test_another_trainer_is_not_grpo(tmp_path, fake_trl):
    code = GOOD.replace("trainer = GRPOTrainer(model=model, reward_funcs=[my_reward], ",
                        "from transformers.trainer import Trainer\ntrainer = Trainer(model=model, ")
    _not_yet(capstone.check(_script(tmp_path, code + "GRPOTrainer\n")), "it built transformers.trainer.Trainer")


def test_a_trainer_that_never_trains(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace("trainer.train()", ""))), "never called trainer.train()")


def test_state_written_by_hand_and_lora_noise_without_train_is_refused(tmp_path, fake_trl):
    """The issue's second cheat: a GRPOTrainer built, train() never called, trainer.state written by hand (steps and
    rewards in log_history) and the LoRA B matrices filled with noise, then saved."""
    code = GOOD.replace("trainer.train()", """import numpy as np
trainer.state.global_step = args.max_steps
trainer.state.log_history += [{"step": s, "reward": 1.0} for s in range(1, args.max_steps + 1)]
for name, w in model.named_parameters():
    if "lora_B" in name:
        w += np.random.default_rng(0).normal(size=w.shape).astype(w.dtype)""")
    _not_yet(capstone.check(_script(tmp_path, code)), "never called trainer.train()", "does not count",
             "the checker counts the steps train() runs")


def test_lora_noise_after_a_train_that_changed_nothing_is_refused(tmp_path, fake_trl):
    """train() called with nothing learned, the adapter filled with noise afterwards: it did not change THROUGH the
    steps; and noise added after a real train() is not the trained weights."""
    noise = """trainer.train()
for name, w in model.named_parameters():
    if "lora_B" in name:
        w += 0.5"""
    frozen = GOOD.replace("GRPOConfig(max_steps=args.max_steps)", "GRPOConfig(max_steps=args.max_steps, learning_rate=0)")
    _not_yet(capstone.check(_script(tmp_path, frozen.replace("trainer.train()", noise))),
             "left every LoRA B matrix as it found it")
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace("trainer.train()", noise))),
             "the saved adapter is not what train() trained: 1 of its 1 LoRA B matrices differ",
             "model.save_pretrained(f\"{args.output_dir}/adapter\")")


def test_num_iterations_2_passes_with_a_reward_on_each_sampling_step(tmp_path, fake_trl):
    """05's CPU recipe: TRL samples (and logs a reward) every num_iterations-th step; 2 steps log 1 reward."""
    code = GOOD.replace("GRPOConfig(max_steps=args.max_steps)", "GRPOConfig(max_steps=args.max_steps, num_iterations=2)")
    result = capstone.check(_script(tmp_path, code))
    assert result.passed, repr(result)
    assert "mean reward on the 1 step that sampled: 0.250" in result.message and result.details["num_iterations"] == 2
    fewer = code.replace("num_iterations=2)", "num_iterations=2, logging_steps=3)")
    _not_yet(capstone.check(_script(tmp_path, fewer)), "a reward on 0 of the 1 step that sampled",
             "num_iterations=2: a reward every 2 steps", "logging_steps=1")


def test_a_reward_that_silently_reads_chat_completions_as_strings_gets_04s_hint(tmp_path, fake_trl):
    """`"<answer>" in completion` is False for every chat completion (a list): every score 0, no spread, nothing
    learned, and no error. The refusal names the likely cause with 04's hint."""
    from helpers.teaching.exercises import nb04

    code = GOOD.replace(REWARD_LINE,
                        "    return [1.0 if '<answer>' in c else 0.0 for c in completions]")
    message = _not_yet(capstone.check(_script(tmp_path, code)), "left every LoRA B matrix as it found it",
                       "reward_std 0 on each step that sampled", 'text = completion[0]["content"]')
    assert nb04.CHAT in message


def test_rewards_must_be_written_in_the_students_files(tmp_path, fake_trl):
    made = GOOD.replace("trainer = GRPOTrainer(", "ns = {}\nexec('def made(prompts, completions, **kw):\\n    "
                        "return [0.0] * len(completions)', ns)\nmy_reward = ns['made']\ntrainer = GRPOTrainer(")
    _not_yet(capstone.check(_script(tmp_path, made)), "made was made by exec or eval (<string>)",
             "Fix: write your reward functions in train_grpo.py", "reward_funcs=[...]")
    none = GOOD.replace("reward_funcs=[my_reward]", "reward_funcs=[]")
    _not_yet(capstone.check(_script(tmp_path, none)), "GRPOTrainer got no reward function")


def test_reward_problem_names_where_a_reward_came_from():
    import trl

    from helpers import rewards

    assert capstone.reward_problem(capstone._origin(rewards.correctness_reward)) == (
        "correctness_reward is the kit's (helpers.rewards), not yours")
    trl_reward = {"name": "accuracy_reward", "module": "trl.rewards", "file": trl.__file__}
    assert "comes from an installed library (trl.rewards" in capstone.reward_problem(trl_reward)
    assert "not a Python function" in capstone.reward_problem(capstone._origin(len))
    mine = capstone._origin(test_reward_problem_names_where_a_reward_came_from)
    assert mine["file"] == __file__ and capstone.reward_problem(mine) is None


def test_a_reward_reading_chat_completions_as_strings_gets_04s_hint(tmp_path, fake_trl):
    """TRL passes a chat dataset's completions as [{"role": "assistant", "content": ...}]: re.search on one raises
    TypeError. The fix reuses 04's hint (helpers.teaching.exercises.nb04), not a generic traceback."""
    from helpers.teaching.exercises import nb04

    code = GOOD.replace(REWARD_LINE,
                        "    import re\n    return [1.0 if re.search('<answer>', c) else 0.0 for c in completions]")
    message = _not_yet(capstone.check(_script(tmp_path, code)), "your reward my_reward reads a completion as a string",
                       "TypeError", "Fix: ", 'completion[0]["content"]')
    assert f"04's hint: {nb04.CHAT}" in message and "Traceback" not in message


def test_the_missing_triton_kernel_names_the_cpu_patch(tmp_path, fake_trl):
    code = GOOD.replace("trainer.train()", "raise AttributeError(\"'NoneType' object has no attribute 'apply'\")")
    message = _not_yet(capstone.check(_script(tmp_path, code)), "Triton",
                       "helpers.run.trl_patches import patch_trl_for_cpu", "before GRPOTrainer(...)")
    assert "Traceback" not in message


def test_the_argparse_contract(tmp_path, fake_trl):
    code = GOOD.replace('ap.add_argument("--max-steps", type=int, default=40)\n', "")
    _not_yet(capstone.check(_script(tmp_path, code)), "--max-steps 2 --output-dir DIR", "ap.add_argument(\"--max-steps\"",
             "unrecognized arguments: --max-steps 2")


def test_an_unknown_failure_shows_the_traceback(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace("trainer.train()", "1 / 0"))),
             "ZeroDivisionError", "Traceback", 'train_grpo.py", line')


def test_max_steps_must_reach_grpo_config(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace("max_steps=args.max_steps", "max_steps=3"))),
             "train() ran 3 steps, not the 2", "GRPOConfig(max_steps=args.max_steps")


def test_rewards_logged_on_fewer_steps(tmp_path, fake_trl):
    code = GOOD.replace("GRPOConfig(max_steps=args.max_steps)", "GRPOConfig(max_steps=args.max_steps, logging_steps=2)")
    _not_yet(capstone.check(_script(tmp_path, code)), "a reward on 1 of the 2 steps that sampled", "logging_steps=1")


def test_no_adapter(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace('model.save_pretrained(f"{args.output_dir}/adapter")', ""))),
             "no LoRA adapter was saved", "model.save_pretrained(f\"{args.output_dir}/adapter\")")


def test_an_adapter_that_did_not_change_through_training(tmp_path, fake_trl):
    code = GOOD.replace("GRPOConfig(max_steps=args.max_steps)", "GRPOConfig(max_steps=args.max_steps, learning_rate=0)")
    _not_yet(capstone.check(_script(tmp_path, code)), "left every LoRA B matrix as it found it", "differ within a group")


# ------------------------------------------------------------------------------------- measured after the run


def test_a_reward_that_does_not_read_the_completion_is_refused(tmp_path, fake_trl):
    """Random numbers differ within a group, so the adapter moves: the checker runs the reward twice on lesson 04's
    labelled completions, and the same completion scoring differently names the mistake."""
    code = GOOD.replace(REWARD_LINE, "    import random\n    return [random.random() for _ in completions]")
    _not_yet(capstone.check(_script(tmp_path, code)), "your reward my_reward gave the same completions different "
             "scores on two calls", "it does not judge the completion", "Fix: score each completion from its text")


def test_rewards_that_do_not_prefer_right_answers_are_refused(tmp_path, fake_trl):
    """A format-only reward (deterministic, and it differs within a group) scores each of 04's right completions as
    high as its twin with a wrong answer: every right completion has tags, so only pairs of the same layout tell."""
    code = GOOD.replace(REWARD_LINE, "    return [0.5 * c[0]['content'].count('<answer>') for c in completions]")
    _not_yet(capstone.check(_script(tmp_path, code)), "your rewards (my_reward) do not score right answers above "
             "wrong ones: on 13 of lesson 04's completions, each beside its twin with the answer changed",
             "the right one scores +0 more on average", "Fix: a correctness reward")


def test_a_reward_that_fails_on_04s_completions_names_how_it_is_called(tmp_path, fake_trl):
    code = GOOD.replace(REWARD_LINE, REWARD_LINE + " if len(completions) == 2 else 1 / 0")
    _not_yet(capstone.check(_script(tmp_path, code)), "your rewards failed on lesson 04's labelled completions "
             "(ZeroDivisionError", "with answer= (04's gold) and your other columns")


def test_the_gold_answer_reaches_a_reward_under_the_column_name_the_dataset_uses(tmp_path, fake_trl):
    """The checker puts 04's gold answer in `answer` and in every column of the dataset's rows that holds a number:
    a reward that reads its gold from a column named `gold` (7 in the row) is judged on the gold of 04's completions."""
    code = GOOD.replace("def my_reward(prompts, completions, answer, **kwargs):",
                        "def my_reward(prompts, completions, answer=None, gold=None, **kwargs):\n"
                        "    answer = gold or answer").replace(
        "GRPOTrainer(model=model,", "GRPOTrainer(train_dataset=[{'prompt': [{'role': 'user', 'content': 'q'}], 'gold': '7'}], "
        "model=model,")
    result = capstone.check(_script(tmp_path, code))
    assert result.passed, repr(result)


def test_training_on_held_out_questions_is_refused(tmp_path, fake_trl):
    """helpers.data.split_of decides the synthetic splits: a training question from "heldout" is refused; GSM8K-like
    text that split_of happens to hash to "heldout" is not a kit question, and passes."""
    from helpers.data import split_of, synthetic_problems

    heldout = GOOD.replace("GRPOTrainer(model=model,", "GRPOTrainer(train_dataset=[{'prompt': p['prompt'], 'answer': "
                           "p['answer']} for p in synthetic_problems(30, 'heldout', levels=(1, 3))], model=model,")
    heldout = heldout.replace("from trl import", "from helpers.data import synthetic_problems\nfrom trl import")
    message = _not_yet(capstone.check(_script(tmp_path, heldout)), "30 of the 30 questions your script trains on are "
                       "from the held-out split", 'Fix: train on the train split: helpers.data.synthetic_problems(n, '
                       '"train")')
    assert any(p["question"] in message for p in synthetic_problems(30, "heldout", levels=(1, 3)))
    other = next(q for i in range(100) if split_of(q := f"Ana bought {i} pies at the fair. How many?") == "heldout")
    assert capstone_watch._judge_questions({"questions": [other]}) is None


def test_training_on_gsm8k_test_questions_is_refused_after_the_run(tmp_path, fake_trl, monkeypatch):
    """GSM8K's test split is a GPU run's held-out set: a script that trains on it is refused by the checker after the
    run (here on the kit's 20 shipped test rows, the Hub out of reach); the train split passes."""
    from helpers import data

    monkeypatch.setattr(data, "_hub_unreachable", lambda timeout_s: "offline: not asked in tests")
    train, test = ([r["question"] for r in data.gsm8k_sample(split)] for split in ("train", "test"))
    script = GOOD.replace("GRPOTrainer(model=model,", "GRPOTrainer(train_dataset=[{'prompt': [{'role': 'user', "
                          "'content': r['question']}], 'answer': '1'} for r in gsm8k_sample(SPLIT)], model=model,")
    script = script.replace("from trl import", "from helpers.data import gsm8k_sample\nfrom trl import")
    message = _not_yet(capstone.check(_script(tmp_path, script.replace("SPLIT", "'test'"))), "20 of the 20 questions "
                       "your script trains on are from GSM8K's test split", 'Fix: train on the train split')
    assert any(q[:90] in message for q in test)
    with pytest.raises(capstone.CapstoneError, match="2 of the 42 questions"):
        capstone_watch._judge_gsm8k_questions({"questions": train + test[:2]})
    assert capstone_watch._judge_gsm8k_questions({"questions": train}) is None


def test_direction_test_weighs_the_advantage_that_moved_its_way():
    """A group's advantages sum to 0: everything moved down (what noise does to the base model's own samples) is
    half the advantage; GRPO's move, the above-mean completions up and the others down, is all of it."""
    adv = [1.5, -0.5, -0.5, -0.5]
    assert capstone.direction_test([(adv, [2.0, -1.0, -3.0, -0.5])]) == (5.25, 1.0)
    s, agreement = capstone.direction_test([(adv, [-1.0, -1.0, -1.0, -1.0])])
    assert s == 0.0 and agreement == 0.5
    assert capstone.direction_test([(adv, [-2.0, 1.0, 1.0, 1.0])])[1] == 0.0


def test_an_adapter_still_at_its_initialisation_is_refused(tmp_path):
    import numpy as np

    message = _not_yet(capstone.CapstoneResult(False, _raised(capstone._judge_learning, {}, tmp_path, {
        "a.lora_B.weight": np.zeros((4, 2), np.float32)})), "the saved adapter is its initialisation", "every LoRA B "
        "matrix is zero", "Fix: save the model after trainer.train()")
    assert "Traceback" not in message


def _raised(func, *args) -> str:
    with pytest.raises(capstone.CapstoneError) as err:
        func(*args)
    return str(err.value)


# ------------------------------------------------------------------------------------- the reference solution


def test_reference_solution_is_about_fifty_lines_of_real_calls():
    """The calls a student writes are called in the code (not in a comment or a string), the rewards are its own,
    and the checker's own static rules accept it."""
    code = [line for line in REFERENCE.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]
    assert 40 <= len(code) <= 75
    tree = ast.parse(REFERENCE.read_text())
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert {"GRPOConfig", "GRPOTrainer", "trainer.train", "get_peft_model", "model.save_pretrained",
            "FastLanguageModel.from_pretrained", "FastLanguageModel.get_peft_model", "patch_trl_for_cpu"} <= called
    assert {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} == {
        "gsm8k_to_row", "as_number", "correctness_reward", "format_reward"}
    capstone.read_script(REFERENCE)


def _function(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_reference_dataset_step_is_03s_mapping():
    """The solution's gsm8k_to_row is lesson 03's solution cell, statement for statement (comments aside)."""
    lesson = ast.parse((ROOT / "lessons" / "03_data.py").read_text())
    mine = ast.parse(REFERENCE.read_text())
    assert ast.dump(_function(mine, "gsm8k_to_row")) == ast.dump(_function(lesson, "gsm8k_to_row"))
    assert "gsm8k_to_row(r, worked_example=not GPU) for r in records" in REFERENCE.read_text()


def _settings(gpu: bool) -> dict:
    """The reference's GRPOConfig keywords, evaluated as they run on a CPU (gpu=False) or on the T4 stack."""
    call = next(n for n in ast.walk(ast.parse(REFERENCE.read_text()))
                if isinstance(n, ast.Call) and ast.unparse(n.func) == "GRPOConfig")
    env = {"GPU": gpu, "args": type("Args", (), {"max_steps": 40, "output_dir": "out"})}
    return {k.arg: eval(compile(ast.Expression(k.value), "ref", "eval"), env) for k in call.keywords}


@pytest.mark.parametrize("gpu, preset", [(False, "cpu"), (True, "t4")])
def test_reference_recipe_is_the_presets_stable_one(gpu, preset):
    """The cpu preset's recipe (2.5e-4, each sampled batch trained on twice: 05's measured runs; the earlier 5e-4 with
    one step per batch collapsed), the t4 preset's on a GPU: every GRPOConfig setting the kit takes from a preset."""
    from helpers.config import GRPO_CONFIG_FIELDS, get_preset

    p, mine = get_preset(preset), _settings(gpu)
    expected = {f: getattr(p, f) for f in GRPO_CONFIG_FIELDS if f not in ("max_steps", "seed", "scale_rewards")}
    assert {f: mine.get(f, 1 if f == "gradient_accumulation_steps" else None) for f in expected} == expected  # 1: TRL's
    assert mine["use_vllm"] is gpu and mine["fp16"] is gpu and mine["use_cpu"] is not gpu


def test_reference_compares_answers_as_numbers():
    """04's lesson: 1,000 is 1000, $18 is 18, 72.0 is 72; a hedge or no <answer> block scores 0."""
    from helpers.prompts import extract_answer

    tree = ast.parse(REFERENCE.read_text())
    env = {"extract_answer": extract_answer}
    for name in ("as_number", "correctness_reward"):
        exec(compile(ast.Module([_function(tree, name)], []), "ref", "exec"), env)  # noqa: S102 - the shipped file
    cases = {"1,000": "1000", "$18": "18", "72.0": "72", "11 or 12": "12", "13": "12"}
    completions = [[{"role": "assistant", "content": f"<reasoning>x</reasoning>\n<answer>\n{a}\n</answer>"}]
                   for a in cases] + [[{"role": "assistant", "content": "12"}]]
    scores = env["correctness_reward"]([None] * 6, completions, [*cases.values(), "12"])
    assert scores == [2.0, 2.0, 2.0, 0.0, 0.0, 0.0]


def test_reference_gpu_branch_loads_with_fast_inference_the_pinned_unsloth_takes():
    """The GPU branch is the course's subject: Unsloth loads the 4-bit model with vLLM sharing its weights
    (fast_inference=True), and every keyword is one the pinned unsloth's from_pretrained accepts (read from its
    source, as tests/test_gpu_contracts.py does)."""
    import pinned_source as ps

    tree = ast.parse(REFERENCE.read_text())
    [call] = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
              and ast.unparse(n.func) == "FastLanguageModel.from_pretrained"]
    keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert keywords["fast_inference"] is True and keywords["load_in_4bit"] is True
    try:
        problems = ps.unknown_kwargs(sorted(keywords), [ps.Target("unsloth", "unsloth/models/loader.py",
                                                                  "FastLanguageModel.from_pretrained")])
    except ps.PinnedSourceError as err:
        pytest.fail(f"could not obtain the pinned source of unsloth: {err}", pytrace=False)
    assert not problems, problems


def _keywords(tree, call: str) -> set[str]:
    return {k.arg for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == call
            for k in n.keywords}


def test_reference_gpu_branch_passes_only_keywords_the_pinned_libraries_take():
    """The GPU branch cannot run here: its Unsloth keywords are among those helpers.model passes (checked against
    the pinned unsloth wheel in tests/test_gpu_contracts.py), its GRPOConfig keywords are fields of the pinned TRL."""
    from trl import GRPOConfig

    from helpers.config import get_preset
    from helpers.model import peft_lora_kwargs, unsloth_load_kwargs, unsloth_peft_kwargs

    tree, t4 = ast.parse(REFERENCE.read_text()), get_preset("t4")
    assert _keywords(tree, "FastLanguageModel.from_pretrained") <= set(unsloth_load_kwargs(t4))
    assert _keywords(tree, "FastLanguageModel.get_peft_model") == set(unsloth_peft_kwargs(t4))
    assert _keywords(tree, "LoraConfig") <= set(peft_lora_kwargs(t4))
    assert _keywords(tree, "GRPOConfig") <= {f.name for f in dataclasses.fields(GRPOConfig)}
    assert _keywords(tree, "GRPOTrainer") == {"model", "processing_class", "reward_funcs", "args", "train_dataset"}


def test_the_notebook_writes_the_reference_solution():
    """09's %%writefile cell is the reference solution, so the notebook's CI run checks it for real."""
    [cell] = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if "solution" in c.metadata.get("tags", [])]
    magic, exercise, marker, *script = cell.source.splitlines()
    assert re.fullmatch(r"%%writefile \S+", magic) and exercise.startswith("# Exercise 9.1: ") and marker == "# SOLUTION"
    assert "\n".join(script).strip() == REFERENCE.read_text().strip()


def test_a_quiet_wait_gets_a_heartbeat_and_a_script_past_the_timeout_is_stopped(tmp_path, fake_trl, monkeypatch, capsys):
    monkeypatch.setattr(capstone, "HEARTBEAT_S", 1)
    slow = GOOD.replace("trainer = GRPOTrainer(", "import time\ntime.sleep(2.5)\ntrainer = GRPOTrainer(")
    assert capstone.check(_script(tmp_path, slow)).passed
    assert "[grpo-kit] capstone: still running (" in capsys.readouterr().out
    started = time.monotonic()
    _not_yet(capstone.check(_script(tmp_path, "import time\nfrom trl import GRPOTrainer\ntime.sleep(60)\n"), timeout=2),
             "the script was stopped after 2 s with no finish")
    assert time.monotonic() - started < 30  # killed, not waited for


# ------------------------------------------------------------------------------------- runs that survive their users


def test_the_readme_says_the_script_runs_with_your_rights():
    readme = " ".join((ROOT / "capstone" / "README.md").read_text().split())
    assert "runs the script as you, with your rights" in readme and "HF token" in readme
    assert "Review a script before you check someone else's" in readme


def _gone(pid: int, within: float = 5.0) -> bool:
    """The process has ended (a zombie waiting for init to reap it counts as ended)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.is_file() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The checker's temporary folders made in a folder of the test's: empty again after each check."""
    folder = tmp_path / "checker-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _spawner(tmp_path: Path, then: str, code: str = "from trl import GRPOTrainer\n") -> tuple[Path, Path]:
    """A script in a folder of its own that starts `sleep 300`, writes its pid to child.pid there, then runs `then`."""
    mine = tmp_path / "mine"
    mine.mkdir()
    pid_file = mine / "child.pid"
    script = _script(mine, code + f"import subprocess\nchild = subprocess.Popen(['sleep', '300'])\n"
                                  f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n" + then)
    return script, pid_file


def test_a_hung_script_is_stopped_with_its_children_and_told_it_hung(tmp_path, fake_trl, own_tmp, capsys):
    """Issue 46: the script runs in its own session and the whole group is killed at --timeout, so the `sleep` it
    started does not outlive the check; the message says it hung and why, not "pass max_steps"."""
    script, pid_file = _spawner(tmp_path, "import time\ntime.sleep(300)\n")
    started = time.monotonic()
    assert capstone.main([str(script), "--timeout", "3"]) == 1
    assert time.monotonic() - started < 20
    captured = capsys.readouterr()
    err = captured.err
    assert RIGHTS in captured.out.splitlines()  # said before it runs, whatever it then does
    assert err.startswith("Not yet: the script was stopped after 3 s with no finish"), err
    for phrase in ("(--timeout, 3 s)", "stuck before it built a GRPOTrainer", "an infinite loop",
                   "waiting on input", "a reward function that never returns", "--timeout 900",
                   "capstone.check(..., timeout=SECONDS)"):
        assert phrase in err, (phrase, err)
    assert "max_steps" not in err and "Traceback" not in err
    assert _gone(int(pid_file.read_text())), "the script's child outlived the check"
    assert sorted(p.name for p in script.parent.iterdir()) == ["child.pid", "train_grpo.py"]
    assert not any(own_tmp.iterdir())  # the run's temporary folder is gone too


def test_a_reward_that_never_returns_is_named_and_max_steps_only_when_it_is_the_cause(tmp_path, fake_trl, own_tmp):
    stuck = GOOD.replace("    return [2.0 if", "    import time\n    time.sleep(300)\n    return [2.0 if")
    message = _not_yet(capstone.check(_script(tmp_path, stuck), timeout=3), "stopped after 3 s with no finish",
                       "Its last progress: trainer.train() started", "stuck in its first GRPO step",
                       "a reward function that never returns")
    assert "max_steps" not in message
    slow = GOOD.replace("    return [2.0 if", "    import time\n    time.sleep(0.5)\n    return [2.0 if")
    _not_yet(capstone.check(_script(tmp_path, slow.replace("max_steps=args.max_steps", "max_steps=40")), timeout=3),
             "stopped after 3 s with no finish", "trainer.train() was set to 40 steps, not the 2",
             "GRPOConfig(max_steps=args.max_steps")
    assert not any(own_tmp.iterdir())


def test_children_left_running_by_a_finished_script_are_stopped(tmp_path, fake_trl, own_tmp):
    script, pid_file = _spawner(tmp_path, "", GOOD)
    assert capstone.check(script).passed
    assert _gone(int(pid_file.read_text())), "a child the script left running outlived the check"
    assert not any(own_tmp.iterdir())


def test_ctrl_c_during_the_check_stops_the_script_and_its_children(tmp_path, fake_trl, own_tmp, monkeypatch):
    """In its own session the script no longer gets the terminal's Ctrl-C (or Jupyter's interrupt): the checker's
    KeyboardInterrupt kills the group on its way out."""
    def interrupted(text):
        if text.startswith("still running"):
            raise KeyboardInterrupt

    monkeypatch.setattr(capstone, "HEARTBEAT_S", 1)
    monkeypatch.setattr(capstone, "_say", interrupted)
    script, pid_file = _spawner(tmp_path, "import time\ntime.sleep(300)\n")
    with pytest.raises(KeyboardInterrupt):
        capstone.check(script, timeout=60)
    assert _gone(int(pid_file.read_text()))
    assert not any(own_tmp.iterdir())


@pytest.mark.parametrize("value", ["0", "-5", "abc", "nan", ""])
def test_timeout_must_be_seconds_above_zero(tmp_path, own_tmp, capsys, value):
    """Refused with exit 2 before anything runs: the script (it would write ran.txt) never starts."""
    script = _script(tmp_path, f"open({str(tmp_path / 'ran.txt')!r}, 'w')\nfrom trl import GRPOTrainer\n")
    assert capstone.main([str(script), "--timeout", value]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: --timeout takes the seconds the script may run before the checker stops "
                                   f"it, a number above 0; got {value!r}. Fix: e.g. --timeout 1800"), captured.err
    assert captured.out == "" and not (tmp_path / "ran.txt").exists() and not any(own_tmp.iterdir())
    with pytest.raises(ValueError, match="--timeout takes the seconds"):
        capstone.check(script, timeout=float(value) if value in ("0", "-5") else value)


def test_no_script_is_a_usage_error(capsys):
    assert capstone.main([]) == 2
    assert "usage: python -m helpers.capstone [-h] [--timeout SECONDS] script" in capsys.readouterr().err


@pytest.mark.parametrize("notebook", [NOTEBOOK, STUDENT_NOTEBOOK])
def test_a_notebook_is_refused_with_how_to_export_it(notebook, own_tmp, capsys):
    """`python -m helpers.capstone notebooks/09_capstone.ipynb`: a notebook's JSON parses as Python, which once made
    this "never uses GRPOTrainer"."""
    before = notebook.read_bytes()
    assert capstone.main([str(notebook)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Not yet: 09_capstone.ipynb is a notebook, and the checker takes a .py script"), err
    for phrase in (f"jupyter nbconvert --to script {notebook.name}", "File > Download as > Python (.py)",
                   "runs/capstone/train_grpo.py"):
        assert phrase in err, (phrase, err)
    assert "GRPOTrainer" not in err and notebook.read_bytes() == before and not any(own_tmp.iterdir())


def test_a_notebook_saved_as_py_is_refused_as_a_notebook(tmp_path):
    script = tmp_path / "train_grpo.py"
    script.write_bytes(STUDENT_NOTEBOOK.read_bytes())
    _not_yet(capstone.check(script), "train_grpo.py holds a notebook (its JSON)", "rename it train_grpo.ipynb",
             "jupyter nbconvert --to script train_grpo.ipynb")


def test_a_latin1_byte_on_line_1_without_a_coding_line_says_save_as_utf8(tmp_path, capsys):
    """Python's detect_encoding reads lines 1-2 itself and calls such a byte an "invalid or missing encoding
    declaration": the student has no coding line to remove."""
    script = tmp_path / "train_grpo.py"
    script.write_bytes("# r\u00e9compense\n".encode("latin-1") + GOOD.encode())
    assert capstone.main([str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Not yet: train_grpo.py is not UTF-8: byte 0xe9 on line 1"), err
    assert "Fix: save the file as UTF-8" in err and "coding line" not in err and "encoding declaration" not in err
    # a coding line that names no encoding is the coding line's fault
    script.write_bytes(b"# -*- coding: klingon -*-\n" + GOOD.encode())
    _not_yet(capstone.check(script), "unknown encoding: klingon", "remove the coding line")
    script.write_bytes(b"# -*- coding: ascii -*-\n# r\xe9compense\n" + GOOD.encode())
    _not_yet(capstone.check(script), "train_grpo.py's coding line says ascii, and byte 0xe9 on line 2 is not ascii",
             "save the file as UTF-8", "remove the coding line")


def test_input_gets_no_keyboard_and_says_so(tmp_path, fake_trl, own_tmp):
    """stdin is closed: input() ends the script (EOFError) instead of waiting on the terminal until --timeout."""
    code = GOOD.replace("model = LoraModel()", "steps = int(input('how many steps? '))\nmodel = LoraModel()")
    started = time.monotonic()
    message = _not_yet(capstone.check(_script(tmp_path, code)), "the script asked for input",
                       "Fix: take what it needs from argparse arguments")
    assert "Traceback" not in message and time.monotonic() - started < 20 and not any(own_tmp.iterdir())
