"""The capstone checker (helpers.capstone): every rule, on tiny scripts that load no model.

The scripts here train a fake GRPOTrainer: a `trl` and a `transformers` package written into a temporary folder put
first on PYTHONPATH, shaped like the real ones where the checker looks (transformers.trainer.Trainer with
__init__, train and state.log_history; trl.GRPOTrainer subclassing it). The real path, TRL 1.15 training the
reference solution for 2 CPU steps, runs once in CI: tests/test_notebooks.py executes notebooks/09_capstone.ipynb,
whose script is the reference solution (checked below) and whose last cell is the check.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from helpers import capstone

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "capstone" / "solution" / "train_grpo.py"
NOTEBOOK = ROOT / "notebooks" / "09_capstone.ipynb"
STUDENT_NOTEBOOK = ROOT / "notebooks" / "student" / "09_capstone.ipynb"

FAKE_TRANSFORMERS_TRAINER = '''
class TrainerState:
    def __init__(self):
        self.global_step, self.log_history = 0, []


class Trainer:
    def __init__(self, args=None, **kwargs):
        self.args, self.state = args, TrainerState()

    def train(self):
        self._inner_training_loop()

    def _inner_training_loop(self):
        pass
'''
FAKE_TRL = '''
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from transformers.trainer import Trainer


class GRPOConfig:
    def __init__(self, max_steps=1, logging_steps=1, **kwargs):
        self.max_steps, self.logging_steps = max_steps, logging_steps


class GRPOTrainer(Trainer):
    def __init__(self, model=None, reward_funcs=(), args=None, **kwargs):
        super().__init__(args=args)
        self.reward_func_names = [f.__name__ for f in reward_funcs]

    def _inner_training_loop(self):
        for step in range(1, self.args.max_steps + 1):
            self.state.global_step = step
            if step % self.args.logging_steps == 0:
                self.state.log_history.append({"step": step, "reward": 0.25 * step})


def save_adapter(folder, value=1.0):
    """What peft's save_pretrained writes, as far as the checker reads it."""
    Path(folder).mkdir(parents=True)
    (Path(folder) / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    save_file({"q_proj.lora_A.weight": np.ones((2, 4), np.float32),
               "q_proj.lora_B.weight": np.full((4, 2), value, np.float32)}, str(Path(folder) / "adapter_model.safetensors"))
'''
CONTRACT = '''
import argparse
ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()
'''
GOOD = CONTRACT + '''
from trl import GRPOConfig, GRPOTrainer, save_adapter


def my_reward(prompts, completions, **kwargs):
    return [1.0 for _ in completions]


trainer = GRPOTrainer(model=None, reward_funcs=[my_reward], args=GRPOConfig(max_steps=args.max_steps))
trainer.train()
save_adapter(f"{args.output_dir}/adapter")
'''


@pytest.fixture
def fake_trl(tmp_path, monkeypatch):
    """A fake trl and transformers first on the script's PYTHONPATH (the checker puts the kit's folder before it)."""
    site = tmp_path / "site"
    (site / "transformers").mkdir(parents=True)
    (site / "transformers" / "__init__.py").write_text("")
    (site / "transformers" / "trainer.py").write_text(FAKE_TRANSFORMERS_TRAINER)
    (site / "trl").mkdir()
    (site / "trl" / "__init__.py").write_text(FAKE_TRL)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site


def _script(tmp_path: Path, code: str) -> Path:
    path = tmp_path / "train_grpo.py"
    path.write_text(textwrap.dedent(code))
    return path


def _not_yet(result, *phrases):
    assert not result.passed and repr(result).startswith("Not yet: "), repr(result)
    for phrase in phrases:
        assert phrase in result.message, f"{phrase!r} not in {result.message!r}"
    return result.message


# ------------------------------------------------------------------------------------- the pass path (fake TRL)


def test_a_script_that_trains_a_grpo_trainer_passes(tmp_path, fake_trl, capsys):
    result = capstone.check(_script(tmp_path, GOOD))
    assert result.passed and repr(result).startswith("Passed: "), repr(result)
    assert "trained 2 steps" in repr(result) and "my_reward" in repr(result) and "0.250, 0.500" in repr(result)
    assert result.details["lora_b_nonzero"] == result.details["lora_b_tensors"] == 1
    capsys.readouterr()
    assert capstone.main([str(tmp_path / "train_grpo.py")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("Passed: ")
    # what the script is doing, as it happens, with the elapsed time (the real check runs about a minute)
    assert out[0].startswith("[grpo-kit] capstone: running train_grpo.py --max-steps 2 in a fresh Python")
    assert any(re.fullmatch(r"\[grpo-kit\] capstone: built GRPOTrainer \(\d+ s\)", line) for line in out)
    assert any(line.startswith("[grpo-kit] capstone: trainer.train() returned at step 2 (") for line in out)
    assert re.fullmatch(r"\[grpo-kit\] capstone: the script ended after \d+ s \(exit 0\); judging what it did", out[-2])


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


def test_a_student_module_that_imports_the_pipeline_is_refused(tmp_path, fake_trl):
    (tmp_path / "mine.py").write_text("from helpers.run import pipeline  # noqa\n")
    _not_yet(capstone.check(_script(tmp_path, "import mine\n" + GOOD)), "mine.py imports helpers.run.pipeline")


def test_a_trainer_that_is_never_built(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, CONTRACT + "from trl import GRPOTrainer\n")),
             "never built TRL's GRPOTrainer", "no trainer at all", "Fix: trainer = GRPOTrainer(")


def test_another_trainer_is_not_grpo(tmp_path, fake_trl):
    code = GOOD.replace("trainer = GRPOTrainer(model=None, reward_funcs=[my_reward], ",
                        "from transformers.trainer import Trainer\ntrainer = Trainer(")
    _not_yet(capstone.check(_script(tmp_path, code + "GRPOTrainer\n")), "it built transformers.trainer.Trainer")


def test_a_trainer_that_never_trains(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace("trainer.train()", ""))), "never called trainer.train()")


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
             "ran 3 steps, not the 2", "GRPOConfig(max_steps=args.max_steps")


def test_rewards_logged_on_fewer_steps(tmp_path, fake_trl):
    code = GOOD.replace("GRPOConfig(max_steps=args.max_steps)", "GRPOConfig(max_steps=args.max_steps, logging_steps=2)")
    _not_yet(capstone.check(_script(tmp_path, code)), "a reward on 1 of the 2 steps", "logging_steps=1")


def test_no_adapter(tmp_path, fake_trl):
    _not_yet(capstone.check(_script(tmp_path, GOOD.replace('save_adapter(f"{args.output_dir}/adapter")', ""))),
             "no LoRA adapter was saved", "model.save_pretrained(f\"{args.output_dir}/adapter\")")


def test_an_adapter_that_did_not_change(tmp_path, fake_trl):
    code = GOOD.replace('save_adapter(f"{args.output_dir}/adapter")', 'save_adapter(f"{args.output_dir}/adapter", 0.0)')
    _not_yet(capstone.check(_script(tmp_path, code)), "LoRA B matrices are all zero", "differ within a group")


# ------------------------------------------------------------------------------------- the reference solution


def test_reference_solution_is_about_forty_lines_of_real_calls():
    """The calls a student writes are called in the code (not in a comment or a string), the rewards are its own,
    and the checker's own static rules accept it."""
    code = [line for line in REFERENCE.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]
    assert 40 <= len(code) <= 60
    tree = ast.parse(REFERENCE.read_text())
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert {"GRPOConfig", "GRPOTrainer", "trainer.train", "get_peft_model", "model.save_pretrained",
            "FastLanguageModel.from_pretrained", "FastLanguageModel.get_peft_model", "patch_trl_for_cpu"} <= called
    assert {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} == {"correctness_reward", "format_reward"}
    capstone.read_script(REFERENCE)


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
             "the script ran past 2 s for 2 steps")
    assert time.monotonic() - started < 30  # killed, not waited for
