"""The capstone's checker: run a student's train_grpo.py for 2 GRPO steps and say "Passed" or what to fix.

    python -m helpers.capstone train_grpo.py                       # a terminal, or `!python ...` in Colab
    from helpers import capstone; capstone.check("train_grpo.py")    # a notebook cell: a result, never a raise

The contract (capstone/README.md): --max-steps N and --output-dir DIR, TRL's GRPOTrainer, the LoRA adapter saved to
DIR/adapter. The script runs as the user (their files, their environment: the checker says so) in a fresh
interpreter under helpers.capstone_watch's bootstrap, in a session of its own with stdin closed; its process group
is killed when it ends, hangs past --timeout, or the check is interrupted. The watch is a trip-wire: it stops the
kit's pipeline (only ALLOWED may be used), counts the steps of the student's own train(), notes the scored batches,
the training questions and the rewards' scores on 04's labelled completions, and names early mistakes. The script
can write that report, so the verdict rests on what this process measures after it ended: the saved adapter loads
on its base model, is not its initialisation and moves the run's completions the way their advantages (recomputed
here) say; the rewards score right answers above wrong ones, the same way twice; no training question is held out.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from helpers import data
from helpers.capstone_watch import (  # noqa: F401 - KIT, HELPERS, ALLOWED, kit_module: the checker's names too
    ALLOWED, CASES, HELPERS, KIT, KIT_USE, REPORT, TRAINED, CapstoneError, StoppedEarly, _allowed,
    _judge_gsm8k_questions, _judge_questions, _judge_reward_cases, _library_file, _lora_key, _named_modules, _origin,
    judge_before_training, kit_module, reward_cases)
from helpers.messages import say
from helpers.teaching.exercises.nb04 import CHAT  # 04's hint for a chat completion read as a string

STEPS = 2
TIMEOUT_S = 900  # the check's time limit, --timeout's default: 2 CPU steps take about a minute

_WRITE_IT = {
    "helpers.rewards": "write your reward functions in the script, with TRL's contract "
                       "`def my_reward(prompts, completions, answer, **kwargs) -> list[float]` (notebook 04)",
    "helpers.train": "build GRPOConfig(...) and GRPOTrainer(...) yourself and call trainer.train() (README steps 4-5)",
    "helpers.run": "build GRPOConfig(...) and GRPOTrainer(...) yourself and call trainer.train() (README steps 4-5); "
                   "from helpers.run only `from helpers.run.trl_patches import patch_trl_for_cpu` is allowed",
    "helpers.config": "write GRPOConfig(...)'s arguments yourself (notebook 05 shows each one)",
    "helpers.sharing": "save the adapter with model.save_pretrained(f\"{args.output_dir}/adapter\")",
    "helpers.teaching": "the teaching helpers are for the notebooks; write the calls they show in the script",
}
_ALLOWED_TEXT = ("helpers.data, helpers.prompts, helpers.model (prepare_embedded_model), "
                 "helpers.run.trl_patches (patch_trl_for_cpu) and helpers.cpu_compat")
TRITON_ERROR = "'NoneType' object has no attribute 'apply'"


@dataclass
class CapstoneResult:
    """check()'s answer: shown in a notebook as "Passed: ..." or "Not yet: <what is wrong and the fix>"."""

    passed: bool
    message: str
    details: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"{'Passed' if self.passed else 'Not yet'}: {self.message}"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return self.passed


# ------------------------------------------------------------------------------------- before running: ast


def _refusal(module: str, where: str, how: str = "imports") -> str:
    advice = next((text for prefix, text in _WRITE_IT.items() if module == prefix or module.startswith(prefix + ".")),
                  "write that part yourself")
    return (f"{where} {how} {module}, part of the kit's own pipeline: the capstone is your own GRPO script. "
            f"Fix: {advice}. From the kit you may import only {_ALLOWED_TEXT}.")


def static_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """(helpers module, line) for each kit module the code imports: import statements, and importlib.import_module
    or __import__ with a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(m, node.lineno) for m in _named_modules(node.module, [a.name for a in node.names])]
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module",
                                                                        "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.args[0].value, node.lineno))
    return [(m, line) for m, line in found if m == "helpers" or m.startswith("helpers.")]


def _todos(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if re.match(r"\s*#\s*TODO\b", line)]


def _calls(tree: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1] == name for n in ast.walk(tree))


def _mentions(tree: ast.AST, name: str) -> bool:
    return any((isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
               or (isinstance(n, ast.alias) and n.name.split(".")[-1] == name) for n in ast.walk(tree))


# PEP 263's coding line, on line 1 or 2 (tokenize's own pattern, on bytes)
_CODING_LINE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+", re.MULTILINE)


def _notebook(script: Path) -> CapstoneError:
    named = script.suffix.lower() == ".ipynb"
    notebook = script.name if named else f"{script.stem}.ipynb"
    return CapstoneError(
        f"{script.name} {'is' if named else 'holds'} a notebook{'' if named else ' (its JSON)'}, and the checker "
        "takes a .py script: it runs the file as `python train_grpo.py --max-steps 2 --output-dir DIR`. Fix: "
        + ("" if named else f"rename it {notebook}, then ") + "export the notebook as a script (`jupyter nbconvert "
        f"--to script {notebook}`, or in Jupyter File > Download as > Python (.py); in Colab File > Download > "
        "Download .py), delete the lines the export made of `!` and `%` commands (get_ipython()), and check that .py "
        "file. In notebook 09 the %%writefile cell already writes runs/capstone/train_grpo.py: check that file.")


def _source(script: Path) -> str:
    """The script's text, decoded as Python will run it (UTF-8 unless a `# -*- coding: ... -*-` line says
    otherwise); CapstoneError naming the path and the fix for a folder, a missing file, a notebook or a byte that is
    not UTF-8."""
    if script.is_dir():
        raise CapstoneError(f"{script} is a folder, not a script. Fix: pass the path of the .py file inside it, e.g. "
                            f"{script / 'train_grpo.py'}")
    if not script.is_file():
        raise CapstoneError(f"{script} does not exist. Fix: write train_grpo.py (capstone/README.md), then check it.")
    if script.suffix.lower() == ".ipynb":  # its JSON even parses as Python: refused by name, not as "no GRPOTrainer"
        raise _notebook(script)
    data = script.read_bytes()
    coding = _CODING_LINE.search(b"\n".join(data.splitlines()[:2]))
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as err:
        if coding:  # a coding line that names no known encoding, or one that contradicts a UTF-8 BOM
            raise CapstoneError(f"{script.name}: {err.msg} ({coding[0].decode('ascii', 'replace').strip()}). Fix: "
                                "remove the coding line and save the file as UTF-8, or name utf-8 in it.") from None
        encoding = "utf-8"  # no coding line: detect_encoding met a byte that is not UTF-8 on line 1 or 2
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        byte = f"byte 0x{data[err.start]:02x} on line {line}"
        what = f"{script.name}'s coding line says {encoding}, and {byte} is not {encoding}" if coding else \
            f"{script.name} is not UTF-8: {byte}"
        raise CapstoneError(
            f"{what} (a character such as 'é' saved as Latin-1 or Windows-1252)"
            + ("" if coding else ", and Python reads scripts as UTF-8") + ". Fix: save the file as UTF-8 (your "
            "editor's 'Save with encoding', or `iconv -f latin1 -t utf-8`)"
            + (" and remove the coding line" if coding else "") + ", then check again.") from None


def read_script(script: Path) -> None:
    """The checks that need no run: the file exists and parses, it is written (no TODO left in place of the
    trainer), it imports none of the kit's pipeline, and it names GRPOTrainer. Raises CapstoneError."""
    source = _source(script)
    try:
        tree = ast.parse(source, str(script))
    except SyntaxError as err:
        raise CapstoneError(f"{script.name} line {err.lineno}: {err.msg}. Fix that line, then check again.") from None
    if (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Dict)
            and '"nbformat"' in source):  # a notebook's JSON (a dict to Python) saved under a .py name
        raise _notebook(script)
    todos = _todos(source)
    if (todos and not _calls(tree, "GRPOTrainer")) or not source.strip():
        raise CapstoneError(f"not answered yet: {script.name} is the skeleton ({len(todos)} TODOs left). Fix: write "
                            f"each TODO's code under it, in order, starting with: {todos[0] if todos else 'the dataset'}")
    for module, line in static_imports(tree):
        if not _allowed(module):
            raise CapstoneError(_refusal(module, f"{script.name} line {line}"))
    if not _mentions(tree, "GRPOTrainer"):
        raise CapstoneError(f"{script.name} never uses GRPOTrainer. Fix: `from trl import GRPOConfig, GRPOTrainer`, "
                            "then trainer = GRPOTrainer(model=..., processing_class=..., reward_funcs=[...], "
                            "args=GRPOConfig(...), train_dataset=...) and trainer.train().")


# ------------------------------------------------------------------------------------- after running: the verdict


SHOW_PROGRESS = True  # say what the script is doing while it runs (about a minute); tests switch it off
HEARTBEAT_S = 15  # a "still running" line after this many quiet seconds


def _say(text: str) -> None:
    if SHOW_PROGRESS:
        say(f"capstone: {text}")


def _timeout(value) -> float:
    """--timeout's seconds (check()'s timeout too): a finite number above 0, else ValueError naming the flag and the
    fix, said before anything runs."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"--timeout takes the seconds the script may run before the checker stops it, a number above "
                         f"0; got {value!r}. Fix: e.g. --timeout 1800 (capstone.check(..., timeout=1800) in a "
                         f"notebook), or leave it out for the default {TIMEOUT_S} s.")
    return seconds


def _wait(proc: subprocess.Popen, progress: Path, timeout: float) -> None:
    """Wait for the script, printing each step the bootstrap notes (and a heartbeat when quiet) with the elapsed
    time; subprocess.TimeoutExpired past timeout (_run then kills the script's process group)."""
    started = last_said = time.monotonic()
    shown = 0
    while True:
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        notes = progress.read_text().splitlines() if progress.is_file() else []
        for note in notes[shown:]:
            _say(f"{note} ({now - started:.0f} s)")
            last_said = now
        shown = len(notes)
        if proc.returncode is not None:
            _say(f"the script ended after {now - started:.0f} s (exit {proc.returncode}); judging what it did")
            return
        if now - started > timeout:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        if now - last_said >= HEARTBEAT_S:
            doing = f"since: {notes[-1]}" if notes else "importing TRL and loading the model come first"
            _say(f"still running ({now - started:.0f} s; {doing})")
            last_said = now


def _stop_group(proc: subprocess.Popen) -> None:
    """Kill the script's process group (its own session): the processes it started go with it, whether it ended,
    hung or the check was interrupted (Ctrl-C: in its own session the script no longer gets the terminal's)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the script and everything it started have already ended
        pass
    proc.wait()


def _hung(name: str, notes: list[str], steps: int, timeout: float, output: str) -> str:
    """The timeout's message: stopped with no finish, where it was, the likely cause (max_steps only when the step
    count says so) and the --timeout flag."""
    last = notes[-1] if notes else None
    step = re.fullmatch(r"GRPO step (\d+)/(\d+) done", last or "")
    longer = (f"if it is only slow, give it longer: --timeout {max(2 * timeout, TIMEOUT_S):g} "
              "(capstone.check(..., timeout=SECONDS) in a notebook)")
    if step and int(step[2]) != steps:
        cause = (f"trainer.train() was set to {step[2]} steps, not the {steps} the checker asks for (--max-steps "
                 f"{steps}). Fix: GRPOConfig(max_steps=args.max_steps, ...).")
    elif step:
        cause = (f"Its steps ran, too slowly to finish in time. Fix: keep max_completion_length small on a CPU (64) "
                 f"and a few completions per question; {longer}.")
    else:
        where = {None: "before it built a GRPOTrainer", "trainer.train() started": "in its first GRPO step"}.get(
            last, "after trainer.train() returned" if last and last.startswith("trainer.train() returned")
            else "before trainer.train() started")
        cause = (f"It was stuck {where}. Likely causes: an infinite loop, a call waiting on input (input() gets "
                 "nothing here; a network call or a lock that never answers), a reward function that never returns "
                 f"(TRL calls it on each sampling step's completions). Fix: run it yourself, `python {name} "
                 f"--max-steps {steps}`, and press Ctrl-C when it stops moving: the traceback shows the line it waits "
                 f"on; {longer}.")
    seen = f" Its last progress: {last}." if last else ""
    tail = "\n".join(output.strip().splitlines()[-5:])
    return (f"the script was stopped after {timeout:g} s with no finish: it was still running when the checker's time "
            f"limit ran out (--timeout, {timeout:g} s).{seen} {cause}"
            + (f" Its last output:\n{tail}" if tail else ""))


def _run(script: Path, steps: int, out: Path, tmp: Path, timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp / REPORT
    code = (f"from helpers.capstone_watch import _bootstrap; _bootstrap({str(script)!r}, {str(tmp)!r}, "
            f"['--max-steps', {str(steps)!r}, '--output-dir', {str(out)!r}])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(KIT), os.environ.get("PYTHONPATH", "")] if p)}
    _say(f"running {script.name} --max-steps {steps} in a fresh Python (about a minute on a CPU) ...")
    say(f"capstone: {script.name} runs as you, with your rights: it can read, change and delete your files, and it "
        "sees your environment (an HF token in it too). Review a script before you check someone else's.")
    args = [sys.executable, "-c", code]
    (tmp / CASES).write_text(json.dumps(reward_cases()))
    with open(tmp / "stdout.txt", "w+") as stdout, open(tmp / "stderr.txt", "w+") as stderr:
        # its own session: killpg reaches every process it starts; no stdin: input() ends it, not waits on yours
        proc = subprocess.Popen(args, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                text=True, start_new_session=True)
        try:
            _wait(proc, report.with_suffix(".progress"), timeout)
        except subprocess.TimeoutExpired:
            progress = report.with_suffix(".progress")
            notes = progress.read_text().splitlines() if progress.is_file() else []
            stderr.seek(0)
            stdout.seek(0)
            raise CapstoneError(_hung(script.name, notes, steps, timeout, stderr.read() or stdout.read())) from None
        finally:
            _stop_group(proc)
        stdout.seek(0)
        stderr.seek(0)
        r = subprocess.CompletedProcess(args, proc.returncode, stdout.read(), stderr.read())
    _refuse_kit_use(tmp / KIT_USE)  # first: a forked child's use, or one just before the interpreter died
    if not report.is_file():
        raise CapstoneError(f"the script's interpreter stopped before it finished (exit {r.returncode}); its last "
                            f"output:\n{r.stderr[-2000:]}")
    return r, json.loads(report.read_text())


def _refuse_kit_use(notes: Path) -> None:
    """The first use of the kit's pipeline the bootstrap noted, as a refusal that names who and how."""
    if not notes.is_file():
        return
    use = json.loads(notes.read_text().splitlines()[0])
    who, module = Path(use["requester"]).name, use["module"]
    if use["kind"] == "a subprocess":
        raise CapstoneError(
            f"while running, {who} starts another Python (`{use['detail']}`): the check judges the training done in "
            "your script's own process, and the kit's pipeline run in another one is not your GRPO script. Fix: "
            "build GRPOConfig(...) and GRPOTrainer(...) in train_grpo.py and call trainer.train() there; no "
            f"subprocess. From the kit you may import only {_ALLOWED_TEXT}.")
    how = {"import": "imports", "reading": "reads the source of", "exec": "executes (runpy, exec)",
           "forging": "compiles code under the file name of"}[use["kind"]]
    raise CapstoneError(_refusal(module, f"while running, {who}", how))


def _chat_mistake(failure: dict, stderr: str, reward_names: list[str]) -> str | None:
    """The error of a reward that treats TRL's chat-format completions ([{"role", "content"}]) as strings, made
    into its fix; None for any other error."""
    text = f"{failure.get('traceback') or ''}\n{stderr}"
    name = next((n for n in reward_names if re.search(rf", in {re.escape(n)}\n", text)), None)
    if name is None or not re.search(r"\b(list|dict)\b", failure.get("message", "")):
        return None
    return (f"your reward {name} reads a completion as a string, and TRL gives it a chat-format one ({failure['type']}: "
            f"{failure['message']}). 04's hint: {CHAT}. Fix: in the capstone (helpers.rewards is the kit's) "
            "read the text yourself: text = completion[0][\"content\"], then score text.")


def _explain_failure(failure: dict, stderr: str, steps: int, reward_names: list[str] = ()) -> str:
    text = f"{failure.get('message', '')}\n{stderr}"
    if TRITON_ERROR in text:
        return ("GRPOTrainer failed in TRL's log-prob kernel (\"'NoneType' object has no attribute 'apply'\"): it "
                "needs Triton, which CPU PyTorch lacks. Fix: `from helpers.run.trl_patches import patch_trl_for_cpu` "
                "and call patch_trl_for_cpu() before GRPOTrainer(...).")
    if failure.get("type") == "SystemExit" and ("usage:" in stderr or "arguments" in stderr):
        return (f"the script refused the checker's arguments `--max-steps {steps} --output-dir DIR`. Fix: "
                "ap.add_argument(\"--max-steps\", type=int, default=40) and ap.add_argument(\"--output-dir\", "
                "default=\"runs/capstone\"), then use args.max_steps and args.output_dir. Its message: "
                + (stderr.strip().splitlines()[-1] if stderr.strip() else "(none)"))
    if failure.get("type") == "EOFError" and "input" in (failure.get("traceback") or ""):
        return ("the script asked for input (input() got EOFError): the checker runs it with no keyboard, and gives it "
                f"only --max-steps {steps} --output-dir DIR. Fix: take what it needs from argparse arguments with "
                "defaults, not input().")
    if failure.get("type") == "NotImplementedError":
        return (f"not answered yet: the script raised NotImplementedError ({failure.get('message')}). Fix: write that "
                "part of the script.")
    chat = _chat_mistake(failure, stderr, list(reward_names))
    if chat:
        return chat
    tail = failure.get("traceback") or stderr[-2000:]
    return (f"the script failed with {failure.get('type')}: {failure.get('message')}. Fix the line the traceback "
            f"ends in (its last lines below), then check again.\n{tail[-2000:]}")


def reward_problem(origin: dict) -> str | None:
    """Why a reward function GRPOTrainer was given is not one the student wrote (None: it is): the kit's, a
    library's (trl's own included), made by exec, or not a Python function."""
    name, file = origin["name"], origin.get("file")
    if not file:
        return f"{name} is not a Python function you wrote (a reward model or a built-in)"
    if file.startswith("<"):
        return f"{name} was made by exec or eval ({file}), not written in your files"
    module = kit_module(file)
    if module:
        return f"{name} is the kit's ({module}), not yours"
    if _library_file(file):
        return f"{name} comes from an installed library ({origin.get('module')}, {file}), not from your files"
    return None


def _judge_trainer(report: dict, steps: int) -> dict:
    """The GRPOTrainer whose train() ran, checked: built, trained the N steps by the checker's count, with the
    student's own rewards, each sampling step's reward logged."""
    grpo = [t for t in report["trainers"] if t["is_grpo"]]
    if not grpo:
        built = ", ".join(t["class"] for t in report["trainers"]) or "no trainer at all"
        raise CapstoneError(f"the script never built TRL's GRPOTrainer (it built {built}). Fix: trainer = "
                            "GRPOTrainer(model=..., processing_class=..., reward_funcs=[...], args=GRPOConfig(...), "
                            "train_dataset=...) from trl, at the script's top level or in a function it calls.")
    trained = [t for t in grpo if t["train_called"]]
    if not trained:
        raise CapstoneError("the script built a GRPOTrainer but never called trainer.train() (a step count or a log "
                            "written into trainer.state does not count: the checker counts the steps train() runs). "
                            "Fix: call trainer.train() before saving the adapter.")
    t = trained[-1]
    if t["steps"] != steps:
        raise CapstoneError(f"trainer.train() ran {t['steps']} steps, not the {steps} the checker asked for "
                            f"(--max-steps {steps}). Fix: GRPOConfig(max_steps=args.max_steps, ...).")
    problems = [p for p in map(reward_problem, t["reward_funcs"]) if p]
    if problems or not t["reward_funcs"]:
        raise CapstoneError(f"{'; '.join(problems) or 'GRPOTrainer got no reward function'}. Fix: write your reward "
                            "functions in train_grpo.py (or a file of yours next to it) with TRL's contract "
                            "`def my_reward(prompts, completions, answer, **kwargs) -> list[float]` (notebook 04), and "
                            "pass them as GRPOTrainer(reward_funcs=[...]).")
    return t


def _judge_rewards(t: dict) -> None:
    """TRL logs a reward on the steps that sample completions: every num_iterations-th step (helpers.data's count
    of TRL's own arithmetic), each logged when logging_steps=1."""
    c = {"gradient_accumulation_steps": 1, "num_iterations": 1, **{k: v for k, v in t["config"].items() if v}}
    expected = data.sampling_steps(SimpleNamespace(**c))
    if len(t["reward_logs"]) < expected:
        every = f" (num_iterations={c['num_iterations']}: a reward every {c['num_iterations']} steps)" \
            if c["num_iterations"] > 1 else ""
        raise CapstoneError(f"TRL logged a reward on {len(t['reward_logs'])} of the {_steps(expected)} that sampled "
                            f"completions{every}. Fix: GRPOConfig(logging_steps=1, ...), and pass your reward "
                            "functions as GRPOTrainer(reward_funcs=[...]).")


def _judge_adapter(t: dict, out: Path, tmp: Path) -> tuple[int, int]:
    """The LoRA B matrices changed through train()'s steps, and the saved adapter holds those trained weights."""
    if not t.get("lora_b"):
        raise CapstoneError("the model GRPOTrainer trained has no LoRA adapter (no lora_B matrices). Fix: give the "
                            "model one before GRPOTrainer: model = get_peft_model(model, LoraConfig(...)) on a CPU.")
    if not t["lora_b_changed"]:
        flat = t.get("reward_std") and not any(t["reward_std"])
        raise CapstoneError("train() ran but left every LoRA B matrix as it found it: no optimizer step changed the "
                            "adapter. " + ("Every group's completions scored the same (reward_std 0 on each step "
                            f"that sampled): no advantage, no gradient. A reward that reads a chat completion as a "
                            f"string scores everything 0; 04's hint: {CHAT}; here text = completion[0][\"content\"]. "
                            if flat else "") + "Fix: a learning rate above 0, and rewards that differ within a group "
                            "(partial credit, e.g. for each format tag): a group whose completions all score the same "
                            "teaches nothing.")
    adapter = out / "adapter"
    weights = adapter / "adapter_model.safetensors"
    if not (adapter / "adapter_config.json").is_file() or not weights.is_file():
        raise CapstoneError(f"training ran but no LoRA adapter was saved in --output-dir/adapter ({adapter}). Fix: "
                            "end with model.save_pretrained(f\"{args.output_dir}/adapter\") (peft writes "
                            "adapter_config.json and adapter_model.safetensors).")
    from safetensors.numpy import load_file as load_numpy
    from safetensors.torch import load_file

    trained = load_numpy(str(tmp / TRAINED))
    saved = {_lora_key(k): v.float().numpy() for k, v in load_file(str(weights)).items() if ".lora_B." in k}
    matching = sum(k in trained and trained[k].shape == v.shape and bool(abs(trained[k] - v).max() <= 1e-6 + 1e-3 * abs(
        trained[k]).max()) for k, v in saved.items())
    if not saved or matching < len(saved):
        raise CapstoneError(f"the saved adapter is not what train() trained: {len(saved) - matching} of its "
                            f"{len(saved)} LoRA B matrices differ from the model's when training ended (changed after "
                            "train(), or another model saved). Fix: save the model you gave GRPOTrainer right after "
                            "trainer.train(): model.save_pretrained(f\"{args.output_dir}/adapter\").")
    return t["lora_b_changed"], t["lora_b"], saved


# ------------------------------------------------------------------------------------- measured by the checker
# What the script's process reported is a trip-wire: the script can write it. The verdict rests on what this process
# measures after the script ended: the saved adapter on its base model, the rewards on 04's labelled completions.

AGREEMENT = 0.75  # the share of |advantage| that must move its way (direction_test): 0.5 is what chance gives
MAX_BATCHES = 4  # the scored batches measured (the first ones): 2 steps sample 1-2 of them
SHUFFLES, BEYOND = 4, 10.0  # S must exceed BEYOND x the largest |S| of SHUFFLES shuffles of the adapter's LoRA B


def _load_adapter(adapter: Path):
    """(peft model, tokenizer): the adapter on the base its config names, in float32."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    base_name = json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path")
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar in the student's notebook: the checker says it
    try:
        base = AutoModelForCausalLM.from_pretrained(base_name, dtype=torch.float32).to(
            "cuda" if torch.cuda.is_available() else "cpu")
    finally:
        hf_logging.enable_progress_bar() if bar else None
    tokenizer = AutoTokenizer.from_pretrained(adapter if (adapter / "tokenizer_config.json").is_file() else base_name)
    return PeftModel.from_pretrained(base, str(adapter)).to(base.dtype).eval(), tokenizer


def _logps(model, tokenizer, groups) -> list[list[float]]:
    """log p(completion | prompt) per group, one forward pass each: 08 §6's sequence log-prob (completion_logps)."""
    import torch

    from helpers.teaching.grpo_math import completion_logps

    found = []
    for prompt, completions, _ in groups:
        text = prompt if isinstance(prompt, str) else tokenizer.apply_chat_template(prompt, tokenize=False,
                                                                                     add_generation_prompt=True)
        width = max(map(len, completions))
        prompt_ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]] * len(completions))
        ids = torch.tensor([c + [tokenizer.pad_token_id or 0] * (width - len(c)) for c in completions])
        mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions])
        batch = {k: v.to(model.device) for k, v in {"prompt_ids": prompt_ids, "completion_ids": ids, "completion_mask":
                                                    mask, "prompt_mask": torch.ones_like(prompt_ids)}.items()}
        with torch.no_grad():
            found.append((completion_logps(model, batch) * batch["completion_mask"]).sum(dim=1).tolist())
    return found


def direction_test(groups: list[tuple[list[float], list[float]]]) -> tuple[float, float]:
    """(S, agreement) for groups of (advantages, log-prob changes): S = sum(advantage x change); agreement, the share
    of |advantage| whose change has its sign. A group's advantages sum to 0: one sign for all (what noise in the
    weights does to the base model's own samples) agrees on half, random signs on half on average."""
    pairs = [(a, d) for adv, change in groups for a, d in zip(adv, change) if a]
    agree = sum(abs(a) for a, d in pairs if a * d > 0)
    return sum(a * d for a, d in pairs), (agree / total if (total := sum(abs(a) for a, _ in pairs)) else 0.0)


def _judge_learning(t: dict, out: Path, weights: dict) -> dict:
    """Measured here, on the saved adapter: it is not its initialisation (peft starts every LoRA B at zero), it loads
    on its base model, and the completions the run scored moved the way their advantages say."""
    if not any(abs(w).max() > 0 for w in weights.values()):
        raise CapstoneError("the saved adapter is its initialisation: every LoRA B matrix is zero, as peft creates "
                            "it. Fix: save the model after trainer.train(): model.save_pretrained(...), README step 6.")
    import torch
    from helpers.teaching.grpo_math import group_advantages  # TRL's arithmetic, recomputed from the rewards

    groups, w = [], t.get("reward_weights") or []
    for batch in (t.get("batches") or [])[:MAX_BATCHES]:
        totals = [None if all(x != x for x in row) else sum(wi * x for wi, x in zip(w or [1.0] * len(row), row)
                                                               if x == x) for row in batch["rewards"]]
        n = int(t["config"].get("num_generations") or len(totals))
        n = n if len(totals) % n == 0 else len(totals)
        groups.append((group_advantages(totals, n), batch, n))
    if not any(any(a) for a, _, _ in groups):
        raise CapstoneError("no scored completion had an advantage: each group's completions scored the same (or none "
                            "was sampled), so there was nothing to learn. Fix: rewards that differ within a group "
                            "(partial credit), passed as GRPOTrainer(reward_funcs=[...]), and trainer.train().")
    try:
        model, tokenizer = _load_adapter(out / "adapter")
    except Exception as err:  # noqa: BLE001 - any failure to load is the adapter's: said with its fix
        raise CapstoneError(f"the saved adapter does not load with peft on its base model ({type(err).__name__}: "
                            f"{err}). Fix: save the peft model you trained: model.save_pretrained(...), README step 6.")
    groups = [(b["prompts"][j], [b["completion_ids"][i] for i in keep], [adv[i] for i in keep])  # TRL's groups:
              for adv, b, n in groups for j in range(0, len(adv), n)  # n completions of one prompt in a row
              if (keep := [i for i in range(j, j + n) if adv[i]])]
    with model.disable_adapter():
        base = _logps(model, tokenizer, groups)

    def direction() -> tuple[float, float, list]:
        changes = [[x - y for x, y in zip(lp, bl)] for lp, bl in zip(_logps(model, tokenizer, groups), base)]
        return (*direction_test(measured := [(g[2], c) for g, c in zip(groups, changes)]), measured)

    s, agreement, measured = direction()
    # Each LoRA B shuffled: a change of the same size, no direction. GRPO follows sum(advantage x log p)'s gradient.
    lora, rng, shuffled = [p for n, p in model.named_parameters() if ".lora_B." in n], torch.Generator(), []
    trained = [p.detach().clone() for p in lora]
    for seed in range(SHUFFLES):
        with torch.no_grad():
            for p, w in zip(lora, trained):
                p.copy_(w.flatten()[torch.randperm(w.numel(), generator=rng.manual_seed(seed))].view_as(w))
        shuffled.append(abs(direction()[0]))
    if s <= BEYOND * max(shuffled) or agreement < AGREEMENT:
        raise CapstoneError(
            "the saved adapter does not move the run's completions the way their advantages say: with it, the "
            "completions your rewards scored above their group's mean should gain log-probability over the base "
            "model and those below lose it. Measured on the run's "
            f"{sum(len(a) for a, _ in measured)} completions with an advantage: sum(advantage x change) = {s:.3g} "
            f"(needed: above {BEYOND:g} x {max(shuffled):.3g}, the most the same weights shuffled get), "
            f"{agreement:.0%} of the advantage moved its way (at least {AGREEMENT:.0%}; a change made at "
            "random gets about 50%). Fix: save the model GRPOTrainer trained, right after trainer.train() "
            "(model.save_pretrained(f\"{args.output_dir}/adapter\")), with a learning rate above 0.")
    return {"direction": s, "agreement": agreement, "shuffled": shuffled, "groups": measured}


def _verdict(r, report: dict, out: Path, steps: int, tmp: Path) -> dict:
    cases = json.loads((tmp / CASES).read_text())
    if (report["failure"] or {}).get("type") == StoppedEarly.__name__:  # the watch stopped train() before its steps:
        judge_before_training(next(t for t in report["trainers"][::-1] if t["train_called"]), cases)  # judged here
    if report["failure"]:
        names = [f["name"] for t in report["trainers"] for f in t.get("reward_funcs", [])]
        raise CapstoneError(_explain_failure(report["failure"], r.stderr, steps, names))
    t = _judge_trainer(report, steps)
    _judge_rewards(t)
    changed, total, saved = _judge_adapter(t, out, tmp)
    _judge_questions(t)  # again, here: the watch that judged the questions ran in the script's process
    _judge_gsm8k_questions(t)
    _judge_reward_cases(t, cases)
    _say("the script's run is over; measuring its saved adapter on the base model ...")
    measured = _judge_learning(t, out, saved)
    return {"steps": t["steps"], "rewards": t["reward_logs"], "reward_funcs": [f["name"] for f in t["reward_funcs"]],
            "lora_b_tensors": total, "lora_b_changed": changed, "adapter": str(out / "adapter"),
            "num_iterations": t["config"].get("num_iterations") or 1, **measured}


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def check(script="train_grpo.py", steps: int = STEPS, timeout: float = TIMEOUT_S) -> CapstoneResult:
    """Check a capstone script: read it, run it for `steps` GRPO steps in a temporary folder, judge what it did;
    stopped after `timeout` seconds.

    Never raises for a mistake in the script (a notebook keeps running): the result says what to fix. A timeout
    that is not a number above 0 raises ValueError before anything runs."""
    timeout = _timeout(timeout)
    script = Path(script).expanduser().resolve()
    try:
        read_script(script)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            r, report = _run(script, steps, out, Path(tmp), timeout)
            found = _verdict(r, report, out, steps, Path(tmp))
    except CapstoneError as err:
        return CapstoneResult(False, str(err))
    rewards = ", ".join(f"{x:.3f}" for x in found["rewards"])
    return CapstoneResult(True, f"TRL's GRPOTrainer trained {found['steps']} steps in your trainer.train() with your "
                                f"rewards ({', '.join(found['reward_funcs'])}; mean reward on the "
                                f"{_steps(len(found['rewards']))} that sampled: {rewards}), and the adapter you saved "
                                f"learned from them: measured on the base model, {found['agreement']:.0%} of the "
                                "advantage moved its way (completions above their group's mean gained log-probability, "
                                "those below lost it); your rewards score 04's right answers above its wrong ones.",
                          found)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m helpers.capstone", description=__doc__.split("\n\n")[0])
    ap.add_argument("script", help="the capstone script to check (a .py file; export a notebook first)")
    ap.add_argument("--timeout", default=TIMEOUT_S, metavar="SECONDS",
                    help=f"stop the script after this many seconds (default {TIMEOUT_S})")
    try:
        args = ap.parse_args(sys.argv[1:] if argv is None else argv)
        timeout = _timeout(args.timeout)
    except SystemExit as stop:  # argparse's usage error (exit 2) or --help (exit 0), already printed
        return stop.code
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result = check(args.script, timeout=timeout)
    print(result, file=sys.stdout if result.passed else sys.stderr)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
