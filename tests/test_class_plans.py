"""The instructor guide's class plans (helpers/teaching/class_plans.py) cannot rot.

- fast: the guide's plan tables are what the data gives (scripts/make_class_plans.py --check); every value a plan
  types into a parameters cell is a parameter of that notebook, read after that cell; the CPU equivalent changes
  sizes only; the run folders connect the right notebooks; the T4 values make a valid t4 preset.
- the dry run: the 90-minute plan's CPU equivalent is executed by tests/test_notebooks.py (04 -> 05 -> 06 -> 05 in
  ONE kit folder, as a class would: 04 saves the reward, 05 trains with it, 06 evaluates, the homework's 05 with a
  larger MAX_STEPS continues the class run from the checkpoint of its last step); here, that it is the plan's.
"""

from __future__ import annotations

import json

import pytest

from helpers.config import get_preset, validate
from helpers.memory.architectures import MODELS
from helpers.colab import LESSONS
from helpers.run.folder import config_differences
from helpers.teaching import class_plans as cp
from notebook_runner import NOTEBOOK_DIR, ROOT, SHARE_THE_RUN, course_run, names_read_after_parameters, parameter_defaults, read
from scripts import make_class_plans as maker

PLANS = list(cp.PLANS.values())
BLOCKS = [(plan, block) for plan in PLANS for block in plan.blocks if block.notebook]


def _id(item) -> str:
    plan, block = item
    return f"{plan.key}-{plan.blocks.index(block)}-{block.notebook}"


def _defaults(notebook: str) -> dict:
    return parameter_defaults(read(NOTEBOOK_DIR / f"{notebook}.ipynb"))


def _run_dir(block: cp.Block) -> str:
    return block.parameters.get("RUN_DIR", _defaults(block.notebook)["RUN_DIR"])


# ------------------------------------------------------------------------------------------- fast: the guide


def test_the_guide_shows_the_plans_as_the_data_gives_them():
    assert maker.main(["--check"]) == 0, "run `.venv/bin/python scripts/make_class_plans.py` and commit the guide"


def test_check_names_a_stale_part_and_render_rewrites_only_between_markers(tmp_path, monkeypatch, capsys):
    guide = tmp_path / "guide.md"
    text = (ROOT / "docs" / "instructor-guide.md").read_text()
    guide.write_text(text.replace("`MAX_STEPS = 60`", "`MAX_STEPS = 6`", 1))
    monkeypatch.setattr(maker, "DOC", guide)
    assert maker.main(["--check"]) == 1
    assert "stale class-plan parts: 90-minutes." in capsys.readouterr().err
    assert maker.main([]) == 0 and guide.read_text() == text  # rewritten: back to the data, the prose untouched
    with pytest.raises(SystemExit, match="no '<!-- class-plans:90-minutes:begin"):
        maker.render("no markers here")


# ------------------------------------------------------------------------------------------ fast: the plans


@pytest.mark.parametrize("item", BLOCKS, ids=[_id(i) for i in BLOCKS])
def test_every_value_a_plan_types_is_a_parameter_its_notebook_reads(item):
    """Typed into the parameters cell, so read by the setup cell and the cells after it; a name the notebook lacks,
    or one it defines only after the setup cell read it, would be ignored (or fail) in class."""
    _, block = item
    nb = read(NOTEBOOK_DIR / f"{block.notebook}.ipynb")
    defined, read_later = set(parameter_defaults(nb)), names_read_after_parameters(nb)
    for name in {**block.parameters, **block.cpu_parameters()}:
        assert name in defined, f"{block.notebook}'s parameters cell has no {name}"
        assert name in read_later, f"{block.notebook} never reads {name} after its parameters cell"


@pytest.mark.parametrize("plan", PLANS, ids=[p.key for p in PLANS])
def test_the_cpu_equivalent_changes_sizes_only(plan):
    assert set(cp.CPU_SIZES) - {"PRESET"} <= set(cp.SIZE_PARAMETERS) and cp.CPU_SIZES["PRESET"] == "cpu"
    for block in plan.blocks:
        assert set(block.cpu) <= set(cp.SIZE_PARAMETERS), f"{block.notebook}: {set(block.cpu)} are not sizes"
        cpu = block.cpu_parameters()
        changed = {k for k, v in cpu.items() if k not in block.parameters or block.parameters[k] != v}
        assert changed <= set(cp.SIZE_PARAMETERS) | {"PRESET"}, f"{block.notebook}: {changed}"
        assert set(block.parameters) <= set(cpu)
        if "MAX_STEPS" in block.parameters:  # a T4 step count is never run on the CPU as it is
            assert "MAX_STEPS" in block.cpu, f"{block.notebook}: MAX_STEPS needs a CPU size"


@pytest.mark.parametrize("plan", PLANS, ids=[p.key for p in PLANS])
def test_the_blocks_fill_the_plan_on_the_runtime_each_notebook_asks_for(plan):
    assert sum(b.minutes for b in plan.in_class) == plan.minutes
    assert all(b.minutes > 0 for b in plan.in_class) and all(b.minutes == 0 for b in plan.homework)
    for block in plan.blocks:
        assert block.step in cp.STEPS
        assert (block.notebook is None) == (block.step == cp.TALK) == (block.runtime is None)
        if block.notebook:
            assert block.runtime == (cp.T4 if LESSONS[block.notebook].needs_gpu else cp.CPU), block.notebook


@pytest.mark.parametrize("plan", PLANS, ids=[p.key for p in PLANS])
def test_a_notebook_opened_for_its_install_runs_with_the_values_it_was_opened_with(plan):
    for i, block in enumerate(plan.blocks):
        if block.step == cp.SETUP:
            later = next(b for b in plan.blocks[i + 1:] if b.notebook == block.notebook and b.step == cp.RUN)
            assert later.parameters == block.parameters and later.cpu == block.cpu


@pytest.mark.parametrize("plan", PLANS, ids=[p.key for p in PLANS])
def test_the_run_folders_connect_the_notebooks_that_share_a_run(plan):
    """04's reward reaches 05 through their shared run folder, and 06 reads the class run from it (on a CPU runtime
    it shows a T4 run from its files and trains its own tiny run elsewhere: course.adapter_for_this_runtime)."""
    folders = {}
    for block in plan.blocks:
        if block.notebook in SHARE_THE_RUN and block.step in cp.EXECUTED:
            folders.setdefault(block.notebook, set()).add(_run_dir(block))
    assert len(folders["05_train"]) == 1, "every 05 of a plan continues one run"
    assert folders.get("04_rewards", folders["05_train"]) == folders["05_train"]
    assert folders["06_evaluate_and_save"] == folders["05_train"], "06 shows the class's own run"


@pytest.mark.parametrize("plan", PLANS, ids=[p.key for p in PLANS])
def test_the_values_make_valid_presets_and_the_homework_extends_the_class_run(plan):
    runs = [b for b in plan.blocks if b.notebook == "05_train" and b.step == cp.RUN]
    for block in runs:
        validate(cp.t4_preset(block.parameters))
        validate(_cpu_preset(block))
    class_run, homework = [b for b in runs if not b.homework][-1], [b for b in runs if b.homework]
    assert homework, "the homework extends the class run"
    for extension in homework:
        assert extension.parameters["MAX_STEPS"] > class_run.parameters["MAX_STEPS"]
        assert extension.cpu_parameters()["MAX_STEPS"] > class_run.cpu_parameters()["MAX_STEPS"]
        # the kit's own rule for continuing a run (helpers.run.folder), on the T4 and on the CPU
        assert not config_differences(_config(cp.t4_preset(class_run.parameters)),
                                      _config(cp.t4_preset(extension.parameters)))
        assert not config_differences(_config(_cpu_preset(class_run)), _config(_cpu_preset(extension)))
        # and the evaluation before training is reused: the same questions
        assert extension.parameters.get("EVAL_SIZE") == class_run.parameters.get("EVAL_SIZE")


def _cpu_preset(block: cp.Block):
    return get_preset("cpu", **{cp.PRESET_FIELDS[k]: v for k, v in block.cpu_parameters().items()
                                if k in cp.PRESET_FIELDS})


def _config(preset) -> dict:
    return json.loads(json.dumps(preset.to_dict(), default=list))  # as config.json holds it


@pytest.mark.parametrize("plan", PLANS, ids=[p.key for p in PLANS])
def test_what_shows_the_class_run_starts_after_05s_slowest_estimate(plan):
    """06 and 05's results read the finished class run: they start no earlier than the end of the block where 05
    was started, plus 05's slowest T4 estimate (load, both evaluations at most, the steps at the high rate)."""
    assert not plan.too_early()
    assert all(b.reads_run for b in plan.in_class if b.notebook == "06_evaluate_and_save"), "06 shows the class run"
    last_05 = [b for b in plan.in_class if b.notebook == "05_train"][-1]
    assert last_05.step == cp.CONTINUE and last_05.reads_run, "the plan ends on 05's results"
    run_block = [b for b in plan.in_class if b.notebook == "05_train" and b.step == cp.RUN][-1]
    e = cp.t4_training_estimate(run_block.parameters)
    assert cp.t4_minutes(run_block.parameters)[1] == pytest.approx(
        e["load"] + e["before_at_most"] + e["train"][1] + e["after_at_most"])


def test_a_plan_that_shows_the_run_before_05_can_end_is_named():
    """The 90-minute plan as it was (06 at minute 60, 05 started at 40-45 with up to 32 minutes to run) fails."""
    blocks = list(cp.NINETY_MINUTES.blocks)
    i06 = next(i for i, b in enumerate(blocks) if b.notebook == "06_evaluate_and_save")
    early = cp.Plan("early", "early", 90, tuple(blocks[:i06 - 1] + [blocks[i06]] + [blocks[i06 - 1]] + blocks[i06 + 1:]))
    assert early.too_early() and early.too_early()[0].startswith("06_evaluate_and_save at minute 55 (05 may run")


def test_the_t4_estimate_scales_the_logged_run():
    ref = cp.REFERENCE_RUN
    assert MODELS[ref.model].lora_params(ref.lora_rank) == 119_734_272  # the log's "Number of trainable parameters"
    low, high = cp.t4_seconds_per_step()
    assert low < high < ref.train_seconds / ref.steps  # a smaller model, fewer completion tokens per step
    assert cp.t4_seconds_per_step(get_preset("t4", max_completion_length=512))[1] == pytest.approx(2 * high)
    estimate = cp.t4_training_estimate({"MAX_STEPS": 250, "EVAL_SIZE": 50}, from_step=60)
    assert estimate["steps"] == 190 and estimate["before_at_most"] == 0  # a continued run reuses before.json


# ------------------------------------------------------------------------------------------- the dry run


def test_the_notebook_tests_are_the_90_minute_plans_dry_run():
    """tests/test_notebooks.py executes 04 -> 05 -> 06 -> 05 in one copy of the kit with these parameters (the plan's
    CPU equivalent) and checks the hand-offs there: 04 saves the reward, 05 trains with it, 06 evaluates and leaves
    the run alone, the homework's 05 continues the class run. If the plan changes, that sequence must change with it."""
    plan = cp.NINETY_MINUTES
    assert [name for name, _ in course_run(plan)] == ["04_rewards", "05_train", "06_evaluate_and_save", "05_train"]
    left_out = {name for name, _ in plan.executed()} - set(SHARE_THE_RUN)
    assert left_out == {"01_setup", "03_data", "07_memory_lab"}, (
        f"{left_out}: the plan runs another notebook. Fix: add it to SHARE_THE_RUN if it reads or writes the run folder")
    class_run, homework = (p for n, p in course_run(plan) if n == "05_train")
    assert homework["MAX_STEPS"] > class_run["MAX_STEPS"], "the homework extends the class run"
    assert len({p.get("RUN_DIR", _defaults(n)["RUN_DIR"]) for n, p in course_run(plan)}) == 1, "one run folder"
