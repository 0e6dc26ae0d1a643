"""The course notebooks: committed clean and well-formed (fast), and each runs top to bottom on CPU (slow).

The slow tests execute notebooks 01-06 and 09 with papermill (07 and 08 run in test_memory_lab_notebook.py and
test_grpo_step.py), with tiny parameters (2 GRPO steps, 4 generations, 4 held-out questions), into a temporary output
notebook: the committed notebooks are never rewritten. 04 -> 05 -> 06 -> 05 (the homework) are the 90-minute class
plan's dry run: executed in its order with its CPU parameters in one copy of the kit, sharing the run folder its
default RUN_DIR names, as a class's would (tests/test_class_plans.py checks that this is the plan's sequence). A
separate test starts 06 on CPU with the T4 lab's run in RUN_DIR (a Qwen adapter, as Drive would hold it): 06 shows
that run from its files and trains a tiny CPU run of its own.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest

from helpers.colab import lesson_needs_gpu
from helpers.config import PRESETS
from helpers.notebook_setup import REPO_SLUG, SETUP_CELL, SETUP_CELL_PARAMETERS
from helpers.teaching import class_plans as cp
from notebook_runner import copy_kit, course_run, execute, parameter_defaults
from notebook_runner import has_image as _has_image
from notebook_runner import output_text as _text

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
EXPECTED = ["01_setup", "02_load_model", "03_data", "04_rewards", "05_train", "06_evaluate_and_save", "07_memory_lab",
            "08_grpo_step", "09_capstone"]
# Every lesson's notebook; 07 and 08 run top to bottom in their own test files (test_memory_lab_notebook, test_grpo_step).
ALL_LESSONS = sorted(NOTEBOOK_DIR.glob("0[1-9]*.ipynb"))
REQUIRED_PARAMETERS = ("PRESET", "LESSON", "USE_DRIVE", "MAX_STEPS", "EVAL_SIZE", "RUN_DIR")

# What CI runs: the cpu preset with the smallest settings that still exercise every step, the class plans' CPU
# sizes (so the notebooks' own runs and the 90-minute plan's dry run are the same runs), 2 GRPO steps.
TINY = {**cp.CPU_SIZES, "MAX_STEPS": 2}


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _ids(paths):
    return [p.stem for p in paths]


def _setup_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and "notebook_setup" in c.source]


def _markdown(nb) -> str:
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


# ------------------------------------------------------------------------------------------- fast: structure


def test_the_nine_notebooks_exist_one_per_lesson():
    assert [p.stem for p in ALL_LESSONS] == EXPECTED
    assert [p.stem for p in sorted((ROOT / "lessons").glob("0[1-9]_*.py"))] == EXPECTED


@pytest.mark.parametrize("path", ALL_LESSONS, ids=_ids(ALL_LESSONS))
def test_committed_without_outputs(path):
    nb = _read(path)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; clear them before committing"


@pytest.mark.parametrize("path", ALL_LESSONS, ids=_ids(ALL_LESSONS))
def test_opens_with_a_colab_badge_that_opens_this_notebook(path):
    first = _read(path).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("[![Open In Colab]"), "the badge comes first"
    opened = re.match(r"\[!\[Open In Colab\]\([^)]*\)\]\(https://colab\.research\.google\.com/github/([^)]+)\)",
                      first.source)
    assert opened and opened.group(1) == f"{REPO_SLUG}/blob/main/{path.relative_to(ROOT).as_posix()}"


@pytest.mark.parametrize("path", ALL_LESSONS, ids=_ids(ALL_LESSONS))
def test_parameters_cell_then_one_setup_cell(path):
    nb = _read(path)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters' (papermill)"
    params = nb.cells[tagged[0]]
    assert params.cell_type == "code"
    for name in REQUIRED_PARAMETERS:
        assert re.search(rf"^{name}\s*=", params.source, re.M), f"parameter {name} missing"
    assert re.search(r"^PRESET\s*=\s*None", params.source, re.M), "PRESET defaults to None (automatic)"
    setups = _setup_cells(nb)
    assert len(setups) == 1, "exactly one setup cell"
    setup_index = nb.cells.index(setups[0])
    assert tagged[0] < setup_index <= 3, "parameters first, the setup cell right after, both near the top"
    for name in SETUP_CELL_PARAMETERS:
        assert re.search(rf"^{name}\s*=", params.source, re.M), f"the setup cell reads {name}; define it"
    lesson = re.search(r'^LESSON\s*=\s*"([^"]+)"', params.source, re.M)
    assert lesson and lesson.group(1) == path.stem, "LESSON names this notebook (helpers.colab.LESSONS)"
    # what LESSON does (a T4 lesson refuses a CPU runtime, the others run there): tests/test_colab_emulation.py


def test_setup_cell_is_the_shared_one_everywhere():
    """helpers.notebook_setup.SETUP_CELL is the one text (the build writes it where a lesson says `# {{setup cell}}`;
    scripts/set_repo.py keeps its slug)."""
    for path in ALL_LESSONS:
        assert _setup_cells(_read(path))[0].source.strip() == SETUP_CELL.strip(), (
            f"{path.name}: the setup cell differs from helpers.notebook_setup.SETUP_CELL; make lessons/{path.stem}.py's "
            "setup cell the line `# {{setup cell}}` and rebuild (scripts/make_notebooks.py)")
    # what the cell does (clone from REPO_SLUG, install once, guard the runtime): tests/test_colab_emulation.py
    assert len(SETUP_CELL.splitlines()) <= 18, "keep the setup cell tiny: logic belongs in helpers/notebook_setup.py"


@pytest.mark.parametrize("path", ALL_LESSONS, ids=_ids(ALL_LESSONS))
def test_ends_with_recap_and_exercises(path):
    last = _read(path).cells[-1]
    assert last.cell_type == "markdown"
    assert "## Recap" in last.source and "## Exercises" in last.source
    exercises = last.source.split("## Exercises", 1)[1]
    assert 1 <= len(re.findall(r"^\d+\. ", exercises, re.M)) <= 3


def test_only_the_t4_lab_asks_colab_for_a_gpu():
    """One GPU runtime per class: a notebook's badge opens a T4 runtime only if its lesson needs one (LESSONS)."""
    notebooks = [*NOTEBOOK_DIR.glob("0*.ipynb"), *(NOTEBOOK_DIR / "student").glob("0*.ipynb")]
    asks = {p.relative_to(NOTEBOOK_DIR).as_posix() for p in notebooks if _read(p).metadata.get("accelerator") == "GPU"}
    assert asks == {"05_train.ipynb", "student/05_train.ipynb"}
    assert all((_read(p).metadata.get("accelerator") == "GPU") == lesson_needs_gpu(p.stem) for p in notebooks)


def test_05_passes_its_drive_checkpoint_and_resume_parameters_to_the_kit():
    """The parameters reach the calls that act on them; what those calls do (Drive run folder, resume from the latest
    complete checkpoint, refuse or overwrite) is tested in test_colab_emulation.py and test_checkpoints.py."""
    nb = _read(NOTEBOOK_DIR / "05_train.ipynb")
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", [])).source
    assert re.search(r"^USE_DRIVE\s*=\s*None", params, re.M) and re.search(r"^OVERWRITE\s*=\s*False", params, re.M)
    code = _code("05_train")
    [setup_call] = _calls(code, "setup.prepare")
    assert setup_call["drive"] == "USE_DRIVE" and setup_call["run_dir"] == "RUN_DIR"
    # the run folder is the one the setup cell chose (on Drive with USE_DRIVE)
    assert {"run_dir": "kit.run_dir", "overwrite": "OVERWRITE", "save_steps": "SAVE_STEPS", "keep": "KEEP"} in _calls(
        code, "RunOptions")
    assert any("resume_checkpoint(state)" in c.get("resume_from_checkpoint", "") for c in _calls(code, "trainer.train"))


def test_06_evaluates_exports_and_shares():
    nb = _read(NOTEBOOK_DIR / "06_evaluate_and_save.ipynb")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for call in ("pass_at_k_before_after(", "evaluation.show_side_by_side(", "pass_at_k=pass_k", "sharing.fresh_folder(",
                 "sharing.check_reload(", "sharing.export_merged(", "sharing.export_gguf(", "sharing.push_folder(",
                 "evaluation.read_run(", "course.adapter_for_this_runtime(", "sharing.export_dir("):
        assert call in code, f"06 should call {call}"
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", code + _markdown(nb)), "never a token in a notebook"


def _code(name: str) -> str:
    return "\n".join(c.source for c in _read(NOTEBOOK_DIR / f"{name}.ipynb").cells if c.cell_type == "code")


def _calls(code: str, call: str) -> list[dict[str, str]]:
    """For each call of `call` (or of `anything.call`): keyword -> the source of its value."""
    import ast

    return [{k.arg: ast.unparse(k.value) for k in node.keywords if k.arg} for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.Call) and (ast.unparse(node.func) == call or ast.unparse(node.func).endswith("." + call))]


def _keywords(code: str, call: str) -> set[str]:
    """The keyword names passed to every call of `call` (e.g. 'GRPOConfig' or 'FastLanguageModel.from_pretrained')."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == call:
            found |= {k.arg for k in node.keywords if k.arg}
    return found


# The calls a student's own GRPO project is made of, in the code cells of the lesson that teaches each.
REAL_API = {
    "02_load_model": ("FastLanguageModel.from_pretrained(", "FastLanguageModel.get_peft_model(", "get_peft_model(model, LoraConfig(",
                      "AutoModelForCausalLM.from_pretrained("),
    "03_data": ("data.training_questions(", "data.gsm8k_records(", "data.gsm8k_rows(", "AutoTokenizer.from_pretrained(",
                "data.prompt_token_length(", "data.filter_long_prompts("),
    "04_rewards": ("def my_correctness_reward(prompts=None, completions=None, answer=None, **kwargs)", "answers_match(",
                   "def my_strict_format_reward(", "course.compare_rewards(", "course.save_rewards(["),
    "05_train": ("GRPOConfig(", "GRPOTrainer(", "trainer.train(resume_from_checkpoint=", "pipeline.kit_callbacks(state)",
                 "course.load_rewards(", "pipeline.start(", "pipeline.finish("),
    "06_evaluate_and_save": ("model.fast_generate(", "lora_request=model.load_lora(", "model.save_lora(",
                             "model.save_pretrained(", "sharing.export_merged(", "sharing.push_folder(",
                             "evaluation.load_for_eval(", "evaluation.before_after(", "evaluation.write_eval("),
}


@pytest.mark.parametrize("name", sorted(REAL_API))
def test_the_real_api_is_written_in_code_cells(name):
    code = _code(name)
    missing = [call for call in REAL_API[name] if call not in code]
    assert not missing, f"{name} should show {missing} in a code cell"


def test_02_passes_the_keywords_the_pinned_unsloth_accepts():
    """The keyword names 02 writes out are the ones helpers.model passes (contract-tested against unsloth 2026.10.9)."""
    from helpers.model import peft_lora_kwargs, unsloth_load_kwargs, unsloth_peft_kwargs
    from helpers.config import get_preset

    t4, code = get_preset("t4"), _code("02_load_model")
    assert _keywords(code, "FastLanguageModel.from_pretrained") == set(unsloth_load_kwargs(t4))
    # vllm_enforce_eager=True adds enforce_eager through the call's ** (a keyword only when asked for)
    (splat,) = [k.value for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Call)
                and ast.unparse(node.func) == "FastLanguageModel.from_pretrained" for k in node.keywords if k.arg is None]
    for preset in (t4, get_preset("t4", vllm_enforce_eager=True)):
        extra = eval(compile(ast.Expression(splat), "<02>", "eval"), {"p": preset})  # noqa: S307 - the lesson's own code
        kit = unsloth_load_kwargs(preset)
        assert _keywords(code, "FastLanguageModel.from_pretrained") | set(extra) == set(kit)
        assert extra.get("enforce_eager") == kit.get("enforce_eager")
    assert _keywords(code, "FastLanguageModel.get_peft_model") == set(unsloth_peft_kwargs(t4))
    assert _keywords(code, "LoraConfig") == set(peft_lora_kwargs(t4))


def test_05_writes_out_every_grpo_config_argument_and_the_trainer():
    from helpers import runtime as rt
    from helpers.config import get_preset, grpo_config_kwargs

    code = _code("05_train")
    written = _keywords(code, "GRPOConfig")
    for preset, runtime in (("cpu", rt.fake_runtime("cpu")), ("t4", rt.fake_runtime("t4", on_colab=True))):
        kit_keys = set(grpo_config_kwargs(get_preset(preset), runtime, save_steps=5))
        assert kit_keys <= written, f"05's GRPOConfig(...) leaves out {kit_keys - written} ({preset})"
    assert _keywords(code, "GRPOTrainer") == {"model", "processing_class", "reward_funcs", "args", "train_dataset",
                                              "callbacks"}
    # the written-out config cannot drift from the preset: describe_config checks it (pipeline.check_config) first
    assert "course.describe_config(state, config)" in code


@pytest.mark.parametrize("path", ALL_LESSONS, ids=_ids(ALL_LESSONS))
def test_has_self_check_exercises(path):
    nb = _read(path)
    solutions = [i for i, c in enumerate(nb.cells) if "solution" in c.metadata.get("tags", [])]
    assert solutions, "every notebook has at least one exercise with a self-check"
    for i in solutions:
        lines = [x for x in nb.cells[i].source.splitlines() if not x.startswith("%%")]  # 09: %%writefile {SCRIPT}
        assert re.match(r"# Exercise [\d.]+: \S", lines[0]) and lines[1] == "# SOLUTION"
        assert ".check(" in nb.cells[i + 1].source, "the cell after a solution checks it"


@pytest.mark.parametrize("path", ALL_LESSONS, ids=_ids(ALL_LESSONS))
def test_kernel_is_python3(path):
    assert _read(path).metadata["kernelspec"]["name"] == "python3"


# ------------------------------------------------------------------------------------------- slow: execution


def _execute(name: str, out_dir: Path, **parameters):
    return execute(name, out_dir, {**TINY, **parameters})


COURSE = course_run(cp.NINETY_MINUTES)  # [(notebook, parameters)]: 04, 05, 06, 05 (the homework)
CLASS_STEPS, HOMEWORK_STEPS = (p["MAX_STEPS"] for name, p in COURSE if name == "05_train")


def _execute_course(name: str, out_dir: Path, kit: Path, nth: int = 0):
    """The plan's nth execution of this notebook, with its CPU parameters, in the kit copy (its default RUN_DIR)."""
    parameters = [p for n, p in COURSE if n == name][nth]
    return execute(name, out_dir, parameters, cwd=kit / "notebooks", source_dir=kit / "notebooks")


@pytest.fixture(scope="module")
def course_kit(tmp_path_factory):
    """A class's clone of the kit, in which 04 -> 05 -> 06 -> 05 run as the 90-minute plan runs them."""
    return copy_kit(tmp_path_factory.mktemp("class") / "grpo-course-kit")


@pytest.fixture(scope="module")
def shared_run_dir(course_kit):
    """The RUN_DIR 04 to 06 share: the notebooks' default (runs/course in the kit), a student's."""
    run_dir = parameter_defaults(_read(NOTEBOOK_DIR / "05_train.ipynb"))["RUN_DIR"]
    return (course_kit / run_dir).resolve()


def test_the_class_run_uses_the_sizes_these_tests_check():
    for name, parameters in COURSE:  # a block's own cpu values change MAX_STEPS only
        assert {k: parameters[k] for k in cp.CPU_SIZES} == cp.CPU_SIZES, name
    assert CLASS_STEPS == TINY["MAX_STEPS"] and HOMEWORK_STEPS > CLASS_STEPS
    assert all(p.get("PASS_K_SAMPLES", PASS_K_SAMPLES) == PASS_K_SAMPLES for n, p in COURSE if n.startswith("06"))


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("executed-notebooks")


@pytest.mark.slow
def test_01_setup_runs(out_dir, shared_run_dir):
    nb = _execute("01_setup", out_dir, RUN_DIR=str(shared_run_dir))
    text = _text(nb)
    assert "runtime:" in text and "precision flags for training" in text
    assert "STOP - No GPU is attached to this Colab session" in text
    assert "OK - precision flags {'bf16': False, 'fp16': True}" in text  # a T4 trains in fp16
    assert "Correct!" in text and re.search(r"1 of \d+ right .*: a right answer \+\d", text), "exercise 1.1"


@pytest.mark.slow
def test_02_load_model_runs(out_dir, shared_run_dir):
    nb = _execute("02_load_model", out_dir, RUN_DIR=str(shared_run_dir))
    text = _text(nb)
    assert "trainable params" in text
    assert "rss_gb" in text and "need a GPU" in text  # CPU: says the CUDA figures need a GPU, shows RSS
    assert text.count("--- rewards:") == min(3, TINY["EVAL_SIZE"])


@pytest.mark.slow
def test_03_data_runs(out_dir, shared_run_dir):
    nb = _execute("03_data", out_dir, RUN_DIR=str(shared_run_dir))
    text = _text(nb)
    # real GSM8K rows on a CPU: the kit's sample when the Hub is out of reach (CI), the split when it is not
    assert re.search(r"GSM8K train: 40 (real rows shipped with the kit \(helpers/fixtures/gsm8k/train\.jsonl\), not the "
                     r"whole split: \S|rows of the real split)", text)
    assert "#### 72" in text and "gold answer: 72" in text and "Natalia sold clips" in text
    assert "Correct! it builds the same rows as the kit's data.gsm8k_rows" in text, "exercise 3.1: the GSM8K mapping"
    assert re.search(r"GSM8K prompts \(40\): min \d+, median \d+, max \d+; \d+ over the t4 limit 256", text)
    assert re.search(r"max_prompt_length=256: kept \d+, dropped \d+", text)
    assert re.search(r"\(the median\): kept \d+, dropped [1-9]\d*", text), "the tight limit drops something"
    assert _has_image(nb), "the prompt-length histogram"
    assert "Correct!" in text and re.search(r"-> \d+ questions of the \d+ in the training set", text), "exercise 3.2"
    steps, sampled = map(int, re.search(r"this preset: (\d+) steps, num_iterations=2: TRL samples on (\d+) of them",
                                        text).groups())
    assert sampled == -(-steps // 2), "the cpu preset samples on every other step (data.sampling_steps)"


@pytest.mark.slow
def test_04_rewards_runs(out_dir, course_kit, shared_run_dir):
    nb = _execute_course("04_rewards", out_dir, course_kit)
    text = _text(nb)
    assert re.search(r"^perfect\s+2\.000\s+0\.500\s+0\.500\s+0\.500\s+0\.500\s+4\.000$", text, re.M)
    assert "'total': 4.0" in text  # the playground's score dict
    assert "NAIVE rewards" in text and "repeated tags" in text
    assert "best hack under the kit's rewards" in text
    assert text.count("agrees on all") == 5 and "DIFFERS" not in text  # the rewards written in cells = the kit's
    assert "Correct! it agrees with helpers.rewards.correctness_reward" in text, "exercise 4.1"
    assert "Correct! it agrees with helpers.rewards.strict_format_reward" in text, "exercise 4.2"
    assert "saved 1 reward function(s)" in text and (shared_run_dir / "my_rewards.py").is_file()


@pytest.mark.slow
def test_05_train_writes_the_run_folder(out_dir, course_kit, shared_run_dir):
    if not (shared_run_dir / "my_rewards.py").is_file():  # run alone (-k): 04 saves the student's reward first
        _execute_course("04_rewards", out_dir, course_kit)
    nb = _execute_course("05_train", out_dir, course_kit)
    rows = [json.loads(line) for line in (shared_run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == CLASS_STEPS
    assert "reward" in rows[0] and "reward_std" in rows[0]
    # the reward the student wrote in 04's exercise trained in 05: TRL logged it at every step that sampled (the cpu
    # preset trains on each sampled batch twice, so steps 1, 3, ...)
    sampled = [row for row in rows if "reward" in row]
    assert [row["step"] for row in sampled] == list(range(1, CLASS_STEPS + 1, 2))
    assert all("rewards/brevity_reward/mean" in row for row in sampled), sorted(rows[0])
    assert "brevity_reward" in json.loads((shared_run_dir / "config.json").read_text())["reward_funcs"]
    for name in ("reward_curve.png", "training_curves.png", "summary.json", "samples.jsonl",
                 "adapter/adapter_config.json", "adapter/adapter_model.safetensors"):
        assert (shared_run_dir / name).is_file(), f"05 must write {name}"
    assert json.loads((shared_run_dir / "summary.json").read_text())["steps"] == CLASS_STEPS
    assert (shared_run_dir / "dashboard.png").stat().st_size > 0, "the dashboard writes dashboard.png at the end"
    checkpoints = sorted(p.name for p in (shared_run_dir / "trainer").glob("checkpoint-*"))
    assert f"checkpoint-{CLASS_STEPS}" in checkpoints, f"05 must leave a resumable checkpoint ({checkpoints})"
    assert (shared_run_dir / "trainer" / f"checkpoint-{CLASS_STEPS}" / "trainer_state.json").is_file()
    text = _text(nb)
    assert "Correct! it builds the config helpers.train builds" in text, "exercise 5.1: the GRPOConfig"
    assert "Correct! the group, the answers' room and the step are kept" in text, "exercise 5.2: the budget fix"
    assert "Correct! this is the call helpers.run.pipeline.build_trainer makes" in text, "exercise 5.4: the trainer"
    assert "of groups of" in text and "have no spread" in text  # exercise 5.3 on this preset's num_generations
    assert "Your prediction, recorded" in text, "exercise 5.5: the prediction is recorded before the rerun"
    assert "final reward (last 3 groups): yours" in text, "exercise 5.5: 08's loop rerun, beside the stored seeds"
    assert "Correct! each setting chosen from runs that differ in it alone" in text, "exercise 5.10: the recipe"


PASS_K_SAMPLES = 2  # 06's sampled answers per question in CI


def _files(folder: Path, skip: str | None = None) -> dict[str, bytes]:
    """Every file under folder (relative path -> bytes), leaving out the subfolder `skip`."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not (skip and p.relative_to(folder).parts[0] == skip)}


def _check_eval_outputs(exports: Path, exported: bool):
    """What 06 wrote into its exports folder: eval.json (greedy and pass@k) and the saved adapter; the merged 16-bit
    model only when EXPORT_MERGED is True. (The GGUF cell: tests/test_gpu_faults.py runs it on a CPU and on a faked
    T4; the CPU's GGUF file itself is read back in tests/test_sharing.py, the one GGUF round trip of the suite.)"""
    result = json.loads((exports / "eval.json").read_text())
    assert result["before"]["n"] == result["after"]["n"] == TINY["EVAL_SIZE"]
    assert len(result["samples"]) == TINY["EVAL_SIZE"]
    for when in ("before", "after"):
        pk = result["pass_at_k"][when]
        assert pk["n"] == PASS_K_SAMPLES and pk["questions"] == TINY["EVAL_SIZE"]
        assert 0.0 <= pk["pass@1"] <= pk[f"pass@{PASS_K_SAMPLES}"] <= 1.0
    assert (exports / "adapter" / "adapter_config.json").is_file()
    assert (exports / "adapter" / "adapter_model.safetensors").is_file()
    if not exported:
        assert sorted(p.name for p in exports.iterdir()) == ["adapter", "eval.json"], "the exports are opt-in"
        return
    assert (exports / "merged" / "config.json").is_file() and (exports / "merged" / "model.safetensors").is_file()
    assert json.loads((exports / "merged" / "config.json").read_text())["dtype"] == "float16"
    assert not (exports / "gguf").exists(), "EXPORT_GGUF = False writes no GGUF"


@pytest.mark.slow
def test_06_uses_the_adapter_from_05(out_dir, course_kit, shared_run_dir):
    """After 05 on CPU (the same RUN_DIR): 06 shows 05's results, evaluates that run, saves its adapter, and with
    the default parameters exports nothing else; RUN_DIR gains only its exports/ folder."""
    had_adapter = (shared_run_dir / "adapter" / "adapter_config.json").is_file()  # False when run without 05
    before = _files(shared_run_dir)
    nb = _execute_course("06_evaluate_and_save", out_dir, course_kit)
    text = _text(nb)
    work_dir = shared_run_dir if had_adapter else shared_run_dir.parent / f"{shared_run_dir.name}-cpu"
    if had_adapter:
        assert f"using the trained adapter in {shared_run_dir / 'adapter'}" in text
        summary = json.loads((shared_run_dir / "summary.json").read_text())
        assert f"accuracy {summary['before']['accuracy']:.2f} -> {summary['after']['accuracy']:.2f}" in text
    assert _files(shared_run_dir, skip="exports") == before, "06 changes nothing of 05's run"
    _check_eval_outputs(work_dir / "exports", exported=False)
    assert "reloaded adapter gives the same greedy answers: True" in text


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_05_as_homework_continues_the_class_run(out_dir, course_kit, shared_run_dir, tmp_path):
    """The plan's homework: the same 05 with a larger MAX_STEPS resumes the class run from the checkpoint of its last
    step, keeps its steps and its evaluation before training, and keeps the class run's summary beside the new one."""
    if not (shared_run_dir / "summary.json").is_file():  # run alone (-k): the class run first
        _execute_course("04_rewards", out_dir, course_kit)
        _execute_course("05_train", out_dir, course_kit)
    summary, metrics = json.loads((shared_run_dir / "summary.json").read_text()), _metrics(shared_run_dir)
    before = (shared_run_dir / "before.json").read_text()
    assert summary["steps"] == CLASS_STEPS
    text = _text(_execute_course("05_train", tmp_path, course_kit, nth=1))
    checkpoint = shared_run_dir / "trainer" / f"checkpoint-{CLASS_STEPS}"
    assert f"resuming from step {CLASS_STEPS} ({checkpoint})" in text
    assert "reusing an identical earlier run of 08's loop (" in text, "5.5's rerun is read back"
    rows = _metrics(shared_run_dir)
    assert [r["step"] for r in rows] == list(range(1, HOMEWORK_STEPS + 1))
    assert rows[:CLASS_STEPS] == metrics, "the class run's steps are kept, not trained again"
    assert json.loads((shared_run_dir / f"summary-step-{CLASS_STEPS}.json").read_text()) == summary
    assert json.loads((shared_run_dir / "summary.json").read_text())["steps"] == HOMEWORK_STEPS
    assert (shared_run_dir / "before.json").read_text() == before, "the evaluation before is reused"


def _fake_t4_run(run_dir: Path) -> dict:
    """What the T4 lab (05 on a T4, USE_DRIVE) leaves in RUN_DIR: a Qwen adapter, summary.json, eval.json."""
    adapter = run_dir / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": PRESETS["t4"].model_name.lower() + "-unsloth-bnb-4bit", "peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"not loaded on a CPU")
    summary = {"preset": "t4", "model": PRESETS["t4"].model_name, "backend": "unsloth", "steps": 250,
               "runtime": "Colab, Tesla T4", "before": {"accuracy": 0.31, "format_rate": 0.12, "n": 200},
               "after": {"accuracy": 0.57, "format_rate": 0.96, "n": 200}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    pairs = [{"question": f"T4-question-{i}", "gold": "7", "before": "about 6", "before_answer": "6",
              "before_correct": False, "after": f"<answer>7</answer> T4-answer-{i}", "after_answer": "7",
              "after_correct": True} for i in range(3)]
    (run_dir / "eval.json").write_text(json.dumps({"before": summary["before"], "after": summary["after"],
                                                   "pass_at_k": None, "samples": pairs}))
    return summary


@pytest.mark.slow
def test_06_on_a_cpu_runtime_with_the_t4_run_in_run_dir(out_dir, tmp_path):
    """RUN_DIR holds the T4 lab's run (a Qwen adapter this CPU cannot evaluate in lesson time): 06 shows that run's
    own results from its files, trains a tiny CPU run in a folder of its own (TRAIN_IF_MISSING defaults to True),
    evaluates and saves that one, and writes the merged model because EXPORT_MERGED is True. RUN_DIR is never
    written to."""
    run_dir = tmp_path / "course"
    _fake_t4_run(run_dir)
    before = _files(run_dir)
    nb = _execute("06_evaluate_and_save", out_dir, RUN_DIR=str(run_dir), PASS_K_SAMPLES=PASS_K_SAMPLES,
                  EXPORT_MERGED=True)
    text = _text(nb)
    html = "\n".join(out.data["text/html"] for c in nb.cells for out in c.get("outputs", [])
                     if "text/html" in out.get("data", {}))
    assert "accuracy 0.31 -> 0.57, format 0.12 -> 0.96" in text  # summary.json's numbers
    assert all(f"T4-answer-{i}" in html for i in range(3)), "the T4 run's own answers, from eval.json"
    assert _files(run_dir) == before, "06 never writes into RUN_DIR"
    local = tmp_path / "course-cpu"
    tiny = json.loads((local / "summary.json").read_text())
    assert tiny["steps"] == 1, "the tiny CPU run, in its own folder"
    assert tiny["before"] is None and tiny["after"] is None and not (local / "eval.json").exists(), \
        "the tiny run does not evaluate itself: 06 evaluates its adapter next"
    _check_eval_outputs(local / "exports", exported=True)


@pytest.mark.slow
def test_09_capstone_writes_the_script_and_its_check_passes(out_dir, tmp_path):
    """The real path of helpers.capstone, once in the suite: the notebook writes the reference train_grpo.py (equal
    to capstone/solution/, tests/test_capstone.py) and its check cell trains it for 2 GRPO steps with TRL 1.15."""
    nb = _execute("09_capstone", out_dir, RUN_DIR=str(tmp_path / "run"), CAPSTONE_DIR=str(tmp_path / "capstone"))
    assert (tmp_path / "capstone" / "train_grpo.py").is_file()
    check = next(c for c in nb.cells if c.cell_type == "code" and "capstone.check(" in c.source)
    text = _text(nbformat.v4.new_notebook(cells=[check]))
    progress, verdict = text.rsplit("\n\n", 1)  # the check says what the script does while it runs, then judges
    assert "[grpo-kit] capstone: GRPO step 2/2 done" in progress, text
    assert verdict.startswith("Passed: TRL's GRPOTrainer trained 2 steps"), text
    assert "correctness_reward, format_reward" in text

