"""The student copies (notebooks/student/): in sync with the instructor notebooks, and runnable up to their first
exercise.

- sync: scripts/make_student_notebooks.py regenerates them into a temporary folder; the result must equal the
  committed files (fix: run `.venv/bin/python scripts/make_student_notebooks.py` and commit notebooks/student/).
- run: each student notebook is executed top to bottom with nbclient on a fresh kernel (CI's tiny parameters,
  injected after the parameters cell as papermill would), as "Run all" would with every exercise left blank: every
  cell must run without error, and every check must say "not answered yet".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from test_notebooks import TINY  # CI's smallest CPU settings, one home

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTOR = sorted((ROOT / "notebooks").glob("0[1-9]_*.ipynb"))
STUDENT_DIR = ROOT / "notebooks" / "student"


def _generator():
    from scripts import make_student_notebooks

    return make_student_notebooks


def _ids(paths):
    return [p.stem for p in paths]


def test_every_instructor_notebook_has_a_student_copy():
    assert [p.name for p in INSTRUCTOR] == sorted(p.name for p in STUDENT_DIR.glob("*.ipynb"))


def test_student_copies_are_in_sync(tmp_path):
    _generator().write_all(tmp_path)
    stale = [p.name for p in INSTRUCTOR
             if (tmp_path / p.name).read_text() != (STUDENT_DIR / p.name).read_text()]
    assert not stale, (f"notebooks/student/ is out of date for {stale}: run `.venv/bin/python "
                       "scripts/make_student_notebooks.py` and commit notebooks/student/")


@pytest.mark.parametrize("path", INSTRUCTOR, ids=_ids(INSTRUCTOR))
def test_student_copy_has_no_solutions(path):
    instructor = nbformat.read(path, as_version=4)
    student = nbformat.read(STUDENT_DIR / path.name, as_version=4)
    assert len(instructor.cells) == len(student.cells)
    n = 0
    for a, b in zip(instructor.cells, student.cells):
        if "solution" in a.metadata.get("tags", []):
            n += 1
            solution_body = a.source.split("# SOLUTION", 1)[1].strip()
            assert solution_body and solution_body not in b.source
            blank = "raise NotImplementedError(" in b.source and "Student exercise: " in b.source
            script = b.source.startswith("%%writefile ") and "# TODO 1. " in b.source  # 09: a script's skeleton
            partial = "# Replace each ... with your code" in b.source and re.search(r"=\s*\.\.\.,?\s+#", b.source)
            assert blank or script or partial or "= ...  # your answer here" in b.source
            assert "exercise" in b.metadata.get("tags", []) and "solution" not in b.metadata.get("tags", [])
        elif a.cell_type == "code":
            assert a.source == b.source
        assert b.cell_type != "code" or (not b.outputs and b.execution_count is None)
    assert n >= 1, "every notebook has at least one exercise"


def _builder():
    from scripts import make_notebooks

    return make_notebooks


def test_committed_notebooks_are_what_the_lessons_build():
    """CI's --check: a notebook edited by hand, or a lesson edited without rebuilding, fails here."""
    assert _builder().main(["--check"]) == 0, "run `.venv/bin/python scripts/make_notebooks.py` and commit"


def _copy_built(tmp_path):
    """A copy of everything make_notebooks.py writes: the notebooks, registry.json and the markdown files."""
    import shutil

    builder = _builder()
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    for path in (builder.REGISTRY, *builder.markdown_files()):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return builder


def test_check_mode_names_a_stale_notebook(tmp_path, capsys, monkeypatch):
    builder = _copy_built(tmp_path)
    edited = tmp_path / "notebooks" / "student" / "05_train.ipynb"
    edited.write_text(edited.read_text().replace("GRPOTrainer(", "GRPOTrainer ("))
    monkeypatch.setattr(builder, "REPO", tmp_path)  # the lessons stay the kit's
    assert builder.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "stale notebooks (not what lessons/ builds): notebooks/student/05_train.ipynb\n" in err and "Fix:" in err


def test_check_mode_names_a_notebook_without_a_lesson(tmp_path, capsys, monkeypatch):
    import shutil

    builder = _copy_built(tmp_path)
    shutil.copy(tmp_path / "notebooks" / "03_data.ipynb", tmp_path / "notebooks" / "08_orphan.ipynb")
    monkeypatch.setattr(builder, "REPO", tmp_path)
    assert builder.main(["--check"]) == 1
    assert "notebooks/08_orphan.ipynb" in capsys.readouterr().err


@pytest.mark.parametrize("path,edit", [
    ("helpers/teaching/exercises/registry.json", lambda t: t.replace('"number": "4.4"', '"number": "4.3"', 1)),
    ("docs/instructor-guide.md", lambda t: t.replace("| 4.4 | [04_rewards]", "| 4.3 | [04_rewards]", 1)),
])
def test_check_mode_names_a_stale_registry_or_answer_key(tmp_path, capsys, monkeypatch, path, edit):
    """registry.json and the guide's answer key are built from the lessons like the notebooks: a hand edit fails."""
    builder = _copy_built(tmp_path)
    text = (tmp_path / path).read_text()
    assert edit(text) != text
    (tmp_path / path).write_text(edit(text))
    monkeypatch.setattr(builder, "REPO", tmp_path)
    assert builder.main(["--check"]) == 1
    assert f"stale notebooks (not what lessons/ builds): {path}\n" in capsys.readouterr().err


def _lesson_nb(cells: list[tuple[str, str, list]]):
    return nbformat.v4.new_notebook(cells=[
        (nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src, metadata={"tags": tags}))
        for kind, src, tags in cells])


def test_exercises_are_numbered_in_the_order_of_their_solution_cells():
    """The k-th solution cell of lesson 04 is exercise 4.k, checked by ex.qk; its answer is what the check passes."""
    builder = _builder()
    lesson = Path("04_x.py")
    nb = _lesson_nb([("md", "**Exercise 4.1.** One.", []), ("code", "# Exercise 4.1: one\n# SOLUTION\nf = 1", ["solution"]),
                     ("code", "r = ex.q1.check(f)", []),
                     ("code", "# Exercise 4.2: two\n# SOLUTION\ndef g(x):  # blank:\n    return x", ["solution"]),
                     ("code", "ex.q2.check(g)", [])])
    entries = builder.exercise_entries(nb, lesson)
    assert [(e["number"], e["qid"], e["name"], e["task"]) for e in entries] == [("4.1", "q1", "f", "one"),
                                                                               ("4.2", "q2", "g", "two")]
    assert entries[1]["solution"] == "def g(x):\n    return x"
    swapped = _lesson_nb([("code", "# Exercise 4.2: two\n# SOLUTION\ng = 2", ["solution"]), ("code", "ex.q2.check(g)", [])])
    with pytest.raises(SystemExit, match=r"says exercise 4.2, .* so exercise 4.1 .*Fix: renumber"):
        builder.exercise_entries(swapped, lesson)
    heading = _lesson_nb([("md", "**Exercise 4.5 (predict).**", []),
                          ("code", "# Exercise 4.1: one\n# SOLUTION\nf = 1", ["solution"]), ("code", "ex.q1.check(f)", [])])
    with pytest.raises(SystemExit, match="says exercise 4.5"):
        builder.exercise_entries(heading, lesson)
    wrong_check = _lesson_nb([("code", "# Exercise 4.1: one\n# SOLUTION\nf = 1", ["solution"]), ("code", "ex.q3.check(f)", [])])
    with pytest.raises(SystemExit, match=r"calls ex.q3; .* so ex.q1"):
        builder.exercise_entries(wrong_check, lesson)


def test_a_lesson_cites_another_exercise_by_its_answer():
    builder = _builder()
    assert builder.fill_placeholders("04's exercise {{exercise.brevity_reward}}", "x", {"brevity_reward": "4.4"}) == \
        "04's exercise 4.4"
    with pytest.raises(SystemExit, match="names no exercise"):
        builder.fill_placeholders("{{exercise.nothing}}", "x", {"brevity_reward": "4.4"})
    from helpers.teaching.exercises import registry

    text = " ".join(c.source for c in nbformat.read(ROOT / "notebooks" / "05_train.ipynb", as_version=4).cells)
    assert f"04's exercise\n{registry.number('brevity_reward')} (on Colab" in text  # the reward 05 trains with


def test_lessons_take_numbers_from_the_presets():
    from helpers.config import PRESETS

    params = next(c for c in nbformat.read(ROOT / "notebooks" / "05_train.ipynb", as_version=4).cells
                  if "parameters" in c.metadata.get("tags", [])).source
    assert f"cpu preset: {PRESETS['cpu'].max_steps}, t4 preset: {PRESETS['t4'].max_steps}" in params
    assert "{{" not in "".join(p.read_text() for p in INSTRUCTOR)


def test_an_include_line_becomes_the_kit_file_and_a_wrong_path_is_named(tmp_path):
    from scripts import make_notebooks as maker

    lesson = tmp_path / "99_x.py"
    lesson.write_text("# %%\nx = 1\n# {{include capstone/solution/train_grpo.py}}\n")
    script = (ROOT / "capstone" / "solution" / "train_grpo.py").read_text()
    assert maker.lesson_text(lesson) == "# %%\nx = 1\n" + script.rstrip("\n") + "\n"
    lesson.write_text("# {{include capstone/solution/nothing.py}}\n")
    with pytest.raises(SystemExit, match=r"99_x.py: # \{\{include capstone/solution/nothing.py\}\} names no file"):
        maker.lesson_text(lesson)


def test_generator_refuses_a_malformed_solution_cell():
    gen = _generator()
    with pytest.raises(gen.StudentNotebookError, match="# SOLUTION"):
        gen.strip_solution("# Exercise 1.1: do it\nx = 1")
    with pytest.raises(gen.StudentNotebookError, match="# Exercise <n>: <task>"):
        gen.strip_solution("x = 1\n# SOLUTION\nx = 2")
    assert gen.strip_solution("# Exercise 9.9: add one\n# SOLUTION\nx = 2").endswith("x = ...  # your answer here")
    student = gen.strip_solution('# Exercise 9.8: add one\n# SOLUTION\nimport math\n\ndef add_one(x: int) -> int:\n'
                                 '    """x + 1."""\n    y = x + 1\n    return y\n\nfor i in range(3):\n    print(i)')
    assert "import math\ndef add_one(x: int) -> int:\n    \"\"\"x + 1.\"\"\"\n" in student  # imports, signature, docstring
    assert "y = x + 1" not in student and "print(i)" not in student  # the answer and the rest are gone
    assert student.endswith("raise NotImplementedError('Student exercise: add one')")


def test_partial_scaffold_blanks_only_the_marked_lines():
    """A `# blank: <why>` line keeps its name and loses its value; the structure around it stays (Neuromatch-style)."""
    gen = _generator()
    student = gen.strip_solution(
        '# Exercise 9.7: map a record\n# SOLUTION\ndef to_row(record, flag=True):\n    """Doc."""\n'
        '    gold = record["a"].split("#")[-1]  # blank: the number after #\n    config = dict(\n        keep=1,\n'
        '        size=record["n"] * 2,  # blank: twice n\n    )\n    return {"gold": gold}  # blank:\n')
    assert 'def to_row(record, flag=True):\n    """Doc."""\n    gold = ...  # the number after #\n' in student
    assert "        keep=1,\n        size=...,  # twice n\n    )\n    return ...\n" in student + "\n"
    assert "split" not in student and "* 2" not in student and "Replace each ..." in student
    with pytest.raises(gen.StudentNotebookError, match="name = value"):
        gen.strip_solution("# Exercise 9.6: call\n# SOLUTION\nprint(1)  # blank: a call cannot be blanked")


def test_partial_scaffold_blanks_count_as_not_answered(tmp_path):
    """The check says 'not answered yet' (naming how many blanks are left) before running a function with `...`."""
    import importlib.util

    from helpers.teaching.exercises import nb03

    blank = tmp_path / "blank_answer.py"  # a file, so inspect finds the source as it does for a notebook cell
    blank.write_text('def gsm8k_to_row(record, worked_example=True):\n    gold = ...\n    return {"answer": ...}\n')
    spec = importlib.util.spec_from_file_location("blank_answer", blank)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = nb03.q1.check(module.gsm8k_to_row)
    assert not result.passed and "not answered yet: 2 blanks (`...`) left in gsm8k_to_row" in result.message


def test_a_writefile_solution_becomes_the_script_skeleton():
    """09's exercise writes a whole script: the student copy keeps the magic line and the task, then the script's
    header (imports, the --max-steps/--output-dir contract) and one TODO per step, in order; no solution code."""
    gen = _generator()
    solution = ("%%writefile {SCRIPT}\n# Exercise 9.1: write it\n# SOLUTION\nimport argparse\n\nap = "
                "argparse.ArgumentParser()\nargs = ap.parse_args()\n\n# 1. The dataset\ndata = [1]\n\n# 2. The "
                "trainer\ntrainer = GRPOTrainer(data)\ntrainer.train()")
    student = gen.strip_solution(solution)
    assert student.startswith("%%writefile {SCRIPT}\n# Exercise 9.1: write it\nimport argparse\n\nap = argparse")
    assert "args = ap.parse_args()" in student and "# TODO 1. The dataset" in student
    assert student.index("# TODO 1.") < student.index("# TODO 2. The trainer")
    assert "data = [1]" not in student and "GRPOTrainer(" not in student and "# SOLUTION" not in student
    with pytest.raises(gen.StudentNotebookError, match="step comments"):
        gen.strip_solution("%%writefile x.py\n# Exercise 9.2: t\n# SOLUTION\nimport argparse\n")
    nb = nbformat.read(STUDENT_DIR / "09_capstone.ipynb", as_version=4)
    [cell] = [c for c in nb.cells if "exercise" in c.metadata.get("tags", [])]
    assert cell.source.splitlines()[0] == "%%writefile {SCRIPT}" and "--max-steps" in cell.source
    assert [line.split(".")[0] for line in cell.source.splitlines() if line.startswith("# TODO")] == [
        f"# TODO {n}" for n in range(1, 7)]


def _prepared(path: Path, run_dir: Path):
    """The whole notebook, with CI's parameters injected after the parameters cell (as papermill does)."""
    nb = nbformat.read(path, as_version=4)
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    if "PRESET" in nb.cells[params].source:
        values = {**TINY, "RUN_DIR": str(run_dir)}
        if "PASS_K_SAMPLES" in nb.cells[params].source:
            values["PASS_K_SAMPLES"] = 2  # as tests/test_notebooks.py runs 06
        if "CAPSTONE_DIR" in nb.cells[params].source:
            values["CAPSTONE_DIR"] = str(run_dir / "capstone")  # 09 writes its skeleton there, not into the kit
        injected = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in values.items()))
        nb.cells.insert(params + 1, injected)
    return nb


def _outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") if out.output_type == "stream" else str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def student_run_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("student-run")


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(STUDENT_DIR.glob("0[1-9]_*.ipynb")), ids=_ids(sorted(STUDENT_DIR.glob("*.ipynb"))))
def test_run_all_on_a_blank_student_copy_reaches_the_end(path, student_run_dir):
    from nbclient import NotebookClient

    nb = _prepared(path, student_run_dir)  # one RUN_DIR, as a student's: 06 uses the adapter 05 trained
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError at the first cell that fails: "Run all" would stop there
    exercises = [i for i, c in enumerate(nb.cells) if "exercise" in c.metadata.get("tags", [])]
    assert exercises
    for i in exercises:
        check = next(c for c in nb.cells[i + 1:] if c.cell_type == "code" and ".check(" in c.source)
        assert "not answered yet" in _outputs_text(check), f"{path.name}: the check after cell {i} says {_outputs_text(check)!r}"
    assert not any(o.output_type == "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)


# What may still name a preset's old value after it changes: the capstone's worked script (a student's file, which
# cannot import the presets), 05's recipe answer (the learning rate the measured runs used), a line that reports a
# measurement, docs/memory.md and docs/gpu-stack.md (that model measured on a GPU, the stack it ran on) and the lab's
# record of measured runs.
_RECORDS = ("docs/memory.md", "docs/gpu-stack.md", "lab/docs/performance.md", "lab/docs/gpu-memory.md")


def test_a_changed_t4_model_and_cpu_learning_rate_reach_every_lesson_readme_and_doc(tmp_path, monkeypatch):
    """An instructor changes the t4 model and the cpu learning rate once, in helpers/config.py's presets, and
    rebuilds: every notebook, README and doc mention follows, and none is left behind."""
    from dataclasses import replace

    builder = _builder()
    old_t4, old_cpu = builder.PRESETS["t4"], builder.PRESETS["cpu"]
    new_model, new_lr = "Qwen/Qwen3-4B-Instruct-2507", 3e-4
    monkeypatch.setattr(builder, "PRESETS", {**builder.PRESETS, "t4": replace(old_t4, model_name=new_model),
                                             "cpu": replace(old_cpu, learning_rate=new_lr)})
    texts = {p.relative_to(tmp_path).as_posix(): "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
             if p.suffix == ".ipynb" else p.read_text() for p in builder.build(tmp_path) if p.suffix in (".ipynb", ".md")}
    capstone = (ROOT / "capstone" / "solution" / "train_grpo.py").read_text()
    recipe = next(e["solution"] for e in builder.registry()["05"]["exercises"] if e["name"] == "recipe_choice")
    old_model = old_t4.model_name.rsplit("/", 1)[-1].removesuffix("-Instruct")  # the family and size
    old_lrs = (builder.FILTERS["e"](str(old_cpu.learning_rate)), str(old_cpu.learning_rate))  # 2.5e-4, 0.00025
    left = []
    for path, text in texts.items():
        if path in _RECORDS:
            continue
        for line in text.splitlines():
            if line.strip() and (line.strip() in capstone or line.strip() in recipe or "measured" in line):
                continue
            if old_model in line or any(lr in line for lr in old_lrs):
                left.append(f"{path}: {line.strip()[:120]}")
    assert not left, "a preset's value typed by hand (write {{t4.model_name|name}} / {{cpu.learning_rate|e}}):\n" + \
        "\n".join(left)
    readme, notebook_02 = texts["README.md"], texts["notebooks/02_load_model.ipynb"]
    assert readme.count("Qwen3-4B-Instruct-2507") >= 2 and "Qwen3-4B-Instruct-2507" in notebook_02
    assert "LoRA on the tiny CPU model: 3e-4" in texts["notebooks/05_train.ipynb"]


def test_a_changed_measured_time_reaches_every_lesson_readme_and_doc(tmp_path, monkeypatch):
    """The lead re-measures the capstone check and the cpu preset's main job and changes their seconds once, in
    results/measured-times.json, and rebuilds: every notebook, README and doc mention follows (the class plans' too,
    rendered as spans), and no typed copy of the old time is left."""
    import json

    from helpers.teaching import class_plans as cp

    builder = _builder()
    source = json.loads(cp.TIMES_FILE.read_text())
    old = {name: cp.TIMES[name] for name in ("capstone_check", "cpu_preset_run")}
    source["times"]["capstone_check"]["seconds"] = 61.5
    source["times"]["cpu_preset_run"]["seconds"] = 503.4  # 8 min 23 s
    copy = tmp_path / "measured-times.json"
    copy.write_text(json.dumps(source))
    monkeypatch.setattr(builder, "TIMES", cp.measured_times(copy))
    out = tmp_path / "out"
    texts = {p.relative_to(out).as_posix(): "\n".join(c.source for c in nbformat.read(p, as_version=4).cells)
             if p.suffix == ".ipynb" else p.read_text() for p in builder.build(out) if p.suffix in (".ipynb", ".md")}
    typed = re.compile("|".join([rf"(?<!min )\b{old['capstone_check']} s\b", re.escape(f"{old['cpu_preset_run']} s"),
                                 re.escape(cp.time_text("cpu_preset_run", "min"))]))
    not_this = ("53 s wall",)  # lab/docs/scale-out.md's "53 s wall" is another command's
    left = [f"{path}: {line.strip()[:120]}" for path, text in texts.items()
            if path not in _RECORDS for line in text.splitlines()
            if typed.search(line) and not any(s in line for s in not_this)]
    assert not left, "a measured time typed by hand (write {{time.NAME}} / <!--{{time.NAME}}-->...<!--/-->):\n" + \
        "\n".join(left)
    found = {path: (text.count("61.5 s"), text.count("8 min 23 s"), text.count("503.4 s")) for path, text in texts.items()
             if "61.5 s" in text or "8 min 23 s" in text or "503.4 s" in text}
    assert found == {"README.md": (1, 1, 1), "capstone/README.md": (1, 0, 0), "docs/notebooks.md": (1, 1, 0),
                     "docs/instructor-guide.md": (1, 4, 0), "notebooks/09_capstone.ipynb": (2, 0, 0),
                     "notebooks/student/09_capstone.ipynb": (2, 0, 0), "notebooks/05_train.ipynb": (0, 1, 1),
                     "notebooks/student/05_train.ipynb": (0, 1, 1)}, found


def test_every_measured_time_has_its_provenance_and_a_wrong_name_is_refused_with_the_fix():
    """Each time of results/measured-times.json says what was timed, by which command, on which machine and when; a
    placeholder naming no time, or no filter, stops the build saying which exist."""
    import json

    from helpers.teaching import class_plans as cp

    entries = json.loads(cp.TIMES_FILE.read_text())["times"]
    missing = [f"{name}: {key}" for name, e in entries.items() for key in ("seconds", "what", "command", "machine", "date")
               if not e.get(key)]
    assert not missing, f"a measured time without its provenance: {missing}"
    builder = _builder()
    times = {"job": 441.8, "notebook": 150.0, "loop": [117.9, 127.9]}  # the docs' forms of these seconds:
    assert [cp.time_text(name, how, times) for name, how in [("job", "min"), ("job", None), ("notebook", "minutes"),
                                                            ("notebook", None), ("loop", "round")]] == [
        "7 min 22 s", "441.8 s", "2.5 minutes", "150.0 s", "118-128 s"]
    with pytest.raises(SystemExit, match=r"lessons/x.py: \{\{time.capstone_chek\}\}: no measured time 'capstone_chek'.*"
                                         r"capstone_check.*Fix: name a time of results/measured-times.json"):
        builder.fill_placeholders("{{time.capstone_chek}}", "lessons/x.py")
    with pytest.raises(SystemExit, match=r"no time filter 'hours' \(filters: round, min, minutes\)"):
        builder.fill_placeholders("{{time.capstone_check|hours}}", "lessons/x.py")


# Issue 44: in the student copy of the T4 lab, the lines a student reads that call the kit are no more than the lines
# of Unsloth and TRL code. Kit lines: imports from helpers, and calls on a kit name: every name the notebook imports
# from helpers (`from helpers.x import a as b` binds b, `import helpers.x as y` binds y), plus the objects the kit
# returns that the lesson calls (KIT_OBJECTS: setup.prepare's `kit`, unsloth_guard's `started`). Unsloth + TRL lines:
# imports from trl/unsloth and calls on FastLanguageModel, GRPOConfig, GRPOTrainer, trainer. A line that is both
# (trainer.train(resume_from_checkpoint=pipeline...)) counts as Unsloth/TRL.
KIT_OBJECTS = {"kit", "started"}
REAL_NAMES = {"FastLanguageModel", "GRPOConfig", "GRPOTrainer", "trainer"}


def _call_root(node) -> str:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return getattr(node, "id", "")


def _is_helpers(module: str | None) -> bool:
    return (module or "").split(".")[0] == "helpers"


def _code_trees(nb) -> list:
    """(cell index, source lines, ast) of each code cell, magics (% and !) blanked."""
    trees = []
    for c, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            lines = cell.source.splitlines()
            trees.append((c, lines, ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                                        for line in lines))))
    return trees


def kit_names(nb) -> set:
    """The names a notebook binds by importing from helpers, plus KIT_OBJECTS."""
    names = set(KIT_OBJECTS)
    for _, _, tree in _code_trees(nb):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _is_helpers(node.module):
                names |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.asname or a.name.split(".")[0] for a in node.names if _is_helpers(a.name)}
    return names


def kit_and_real_lines(nb) -> tuple[dict, set]:
    """({(cell, line): text} of kit lines, {(cell, line)} of Unsloth + TRL lines) in a notebook's code cells."""
    kit, real, names = {}, set(), kit_names(nb)
    for c, lines, tree in _code_trees(nb):
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                side = {"helpers": "kit", "trl": "real", "unsloth": "real"}.get((module or "").split(".")[0])
            elif isinstance(node, ast.Call):
                root = _call_root(node.func)
                side = "real" if root in REAL_NAMES else "kit" if root in names else None
            else:
                continue
            for n in range(node.lineno, node.end_lineno + 1):
                if side == "real":
                    real.add((c, n))
                elif side == "kit":
                    kit[(c, n)] = lines[n - 1].strip()
    return {k: text for k, text in kit.items() if k not in real}, real


def test_kit_lines_in_a_toy_notebook_are_counted_per_line():
    """Every name imported from helpers counts, whatever it is called; a name from elsewhere does not."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from helpers.run import pipeline\nfrom trl import GRPOConfig\n%time x = 1\n"
        "state = pipeline.start(kit.preset,\n                      options)\nconfig = GRPOConfig(beta=0.0)\n"
        "trainer.train(resume_from_checkpoint=pipeline.resume_checkpoint(state))\nprint(len([1]))"),
        nbformat.v4.new_code_cell("from helpers.memory import VLLM_WORKSPACE_GB as W\nimport helpers.sharing as sh\n"
                                  "import json\ny = W * 2\nfolder = sh.export_dir(run)\nguess = max(W, 1)\n"
                                  "json.dumps({})\nrows = read_metrics(run)")])
    assert kit_names(nb) == {"pipeline", "W", "sh", "kit", "started"}
    kit, real = kit_and_real_lines(nb)
    assert sorted(kit) == [(0, 1), (0, 4), (0, 5), (1, 1), (1, 2), (1, 5)]
    assert sorted(n for _, n in real) == [2, 6, 7]


def test_the_student_t4_lab_has_no_more_kit_lines_than_unsloth_and_trl_lines():
    kit, real = kit_and_real_lines(nbformat.read(STUDENT_DIR / "05_train.ipynb", as_version=4))
    assert len(kit) <= len(real), (
        f"the student copy of 05 has {len(kit)} lines of kit calls and {len(real)} of Unsloth + TRL code (issue 44: "
        "no more kit than Unsloth + TRL). Fold what is not the lesson into a call already there, import once per "
        "package; do not hide calls from this count. The kit lines:\n"
        + "\n".join(f"  cell {c}: {text}" for (c, _), text in sorted(kit.items())))
