"""The capstone's checker: run a student's train_grpo.py for 2 GRPO steps and say "Passed" or what to fix.

    python -m helpers.capstone train_grpo.py                       # a terminal, or `!python ...` in Colab
    from helpers import capstone; capstone.check("train_grpo.py")    # a notebook cell: a result, never a raise

The contract (capstone/README.md): the script accepts --max-steps N and --output-dir DIR, trains with TRL's
GRPOTrainer, and saves the LoRA adapter to DIR/adapter. It passes when TRL's GRPOTrainer really trained: the script
built a GRPOTrainer and called train(), the trainer logged a reward on each of the N steps, and the adapter's LoRA
B matrices (zero at initialisation) changed. The kit's own pipeline does not count: the script may use only the
dataset helpers, the embedded model's folder and the CPU patch (ALLOWED); anything else from helpers/ is refused,
before running (its imports, read with ast) and while running (what its code imported).

How the run is watched: the script runs in a fresh interpreter under a small bootstrap (`_bootstrap`, the
`python -c` line in `check`), which wraps transformers' Trainer (GRPOTrainer's base, also under Unsloth's generated
trainer) as TRL is imported, records which helpers modules the student's code imports, and writes a JSON report
(trainers built, train() called, their log history and reward names) when the script ends, however it ends.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import importlib.abc
import importlib.util
import io
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
import tokenize
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from helpers.messages import say

KIT = Path(__file__).resolve().parents[1]
HELPERS = KIT / "helpers"
STEPS = 2
REPORT = "capstone_report.json"

# What a capstone script may import from the kit: the data, the answer format, the embedded model's folder, the
# CPU stand-in for TRL's Triton kernel. The rest is the pipeline the student is asked to write.
ALLOWED = ("helpers", "helpers.data", "helpers.prompts", "helpers.model", "helpers.run.trl_patches",
           "helpers.cpu_compat")
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


class CapstoneError(Exception):
    """What is wrong with the script's run, and what to do (check() turns it into a "Not yet" result)."""


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


def _is_module(name: str) -> bool:
    parts = name.split(".")
    return (KIT.joinpath(*parts).with_suffix(".py").is_file()
            or (KIT.joinpath(*parts) / "__init__.py").is_file())


def _named_modules(module: str, names) -> list[str]:
    """The kit modules `from module import names` reaches: `from helpers import train` names helpers.train, a
    submodule; `from helpers.data import gsm8k_rows` names helpers.data itself."""
    return [f"{module}.{name}" for name in names or () if _is_module(f"{module}.{name}")] or [module]


def _allowed(module: str) -> bool:
    """An allowed module, or a package above one (helpers.run imports none of its modules): `from helpers.run import
    pipeline` is judged by the module it names, helpers.run.pipeline."""
    return module in ALLOWED or any(allowed.startswith(module + ".") for allowed in ALLOWED)


def _refusal(module: str, where: str) -> str:
    advice = next((text for prefix, text in _WRITE_IT.items() if module == prefix or module.startswith(prefix + ".")),
                  "write that part yourself")
    return (f"{where} imports {module}, part of the kit's own pipeline: the capstone is your own GRPO script. "
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


def _source(script: Path) -> str:
    """The script's text, decoded as Python will run it (UTF-8 unless a `# -*- coding: ... -*-` line says
    otherwise); CapstoneError naming the path and the fix for a folder, a missing file or a byte that is not UTF-8."""
    if script.is_dir():
        raise CapstoneError(f"{script} is a folder, not a script. Fix: pass the path of the .py file inside it, e.g. "
                            f"{script / 'train_grpo.py'}")
    if not script.is_file():
        raise CapstoneError(f"{script} does not exist. Fix: write train_grpo.py (capstone/README.md), then check it.")
    data = script.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise CapstoneError(
            f"{script.name} is not UTF-8: byte 0x{data[err.start]:02x} on line {line} (a character such as 'é' saved "
            "as Latin-1 or Windows-1252), and Python reads scripts as UTF-8. Fix: save the file as UTF-8 (your "
            "editor's 'Save with encoding', or `iconv -f latin1 -t utf-8`), then check again.") from None
    except SyntaxError as err:  # detect_encoding: a coding line that names no known encoding
        raise CapstoneError(f"{script.name}: {err.msg}. Fix: remove the coding line, or name utf-8 in it.") from None


def read_script(script: Path) -> None:
    """The checks that need no run: the file exists and parses, it is written (no TODO left in place of the
    trainer), it imports none of the kit's pipeline, and it names GRPOTrainer. Raises CapstoneError."""
    source = _source(script)
    try:
        tree = ast.parse(source, str(script))
    except SyntaxError as err:
        raise CapstoneError(f"{script.name} line {err.lineno}: {err.msg}. Fix that line, then check again.") from None
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


# ------------------------------------------------------------------------------------- the bootstrap


class _Recorder:
    """Lives in the student's interpreter: what the script built, trained and imported."""

    def __init__(self, report: Path):
        self.report = report
        self.trainers, self.imports = [], []

    def note(self, text: str) -> None:
        """One line of what the script is doing, for the checker to show as it happens (progress)."""
        with open(self.report.with_suffix(".progress"), "a") as f:
            f.write(text + "\n")

    def watch_steps(self, trainer) -> None:
        """A callback that notes each finished step (a transformers trainer; anything else: start and end only)."""
        try:
            from transformers import TrainerCallback
        except ImportError:
            return
        if not hasattr(trainer, "add_callback"):
            return
        recorder = self

        class StepNotes(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                recorder.note(f"GRPO step {state.global_step}/{state.max_steps} done")

        trainer.add_callback(StepNotes())

    # -- imports made by code outside helpers/ (the script, or a module of the student's), noted before importing:
    # an import that fails is still the student's
    def note_import(self, name: str, fromlist, requester: str | None) -> None:
        if not name.startswith("helpers") or not requester or Path(requester).resolve().is_relative_to(HELPERS):
            return
        for module in _named_modules(name, fromlist):
            if (module == "helpers" or module.startswith("helpers.")) and module not in [m for m, _ in self.imports]:
                self.imports.append((module, requester))

    def install_import_watch(self) -> None:
        real_import, real_import_module = builtins.__import__, importlib.import_module

        def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0:
                self.note_import(name, fromlist, (globals or {}).get("__file__"))
            return real_import(name, globals, locals, fromlist, level)

        def watched_import_module(name, package=None):
            self.note_import(name, (), sys._getframe(1).f_globals.get("__file__"))
            return real_import_module(name, package)

        builtins.__import__, importlib.import_module = watched_import, watched_import_module

    # -- transformers.Trainer, wrapped when transformers.trainer is first imported (after Unsloth, if any)
    def instrument(self, trainer_cls) -> None:
        init, train = trainer_cls.__init__, trainer_cls.train

        @functools.wraps(init)
        def recorded_init(trainer, *args, **kwargs):
            self.trainers.append({"trainer": trainer, "train_called": False})
            self.note(f"built {type(trainer).__name__}")
            return init(trainer, *args, **kwargs)

        @functools.wraps(train)
        def recorded_train(trainer, *args, **kwargs):
            for t in self.trainers:
                t["train_called"] |= t["trainer"] is trainer
            self.watch_steps(trainer)
            self.note("trainer.train() started")
            result = train(trainer, *args, **kwargs)
            self.note(f"trainer.train() returned at step {getattr(getattr(trainer, 'state', None), 'global_step', 0)}")
            return result

        trainer_cls.__init__, trainer_cls.train = recorded_init, recorded_train

    def install_trainer_watch(self) -> None:
        if "transformers.trainer" in sys.modules:
            self.instrument(sys.modules["transformers.trainer"].Trainer)
            return
        recorder = self

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, fullname, path, target=None):
                if fullname != "transformers.trainer":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(fullname)
                if spec is None or spec.loader is None:
                    return spec
                execute = spec.loader.exec_module

                def exec_module(module):
                    execute(module)
                    recorder.instrument(module.Trainer)

                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, Finder())

    # -- the report
    def write(self, error: BaseException | None) -> None:
        trainers = []
        for t in self.trainers:
            trainer, mro = t["trainer"], type(t["trainer"]).__mro__
            state = getattr(trainer, "state", None)
            trainers.append({
                "class": f"{type(trainer).__module__}.{type(trainer).__qualname__}",
                "is_grpo": any(c.__name__.endswith("GRPOTrainer") and c.__module__.split(".")[0].startswith(
                    ("trl", "unsloth")) for c in mro),
                "train_called": t["train_called"],
                "global_step": getattr(state, "global_step", 0),
                "log_history": json.loads(json.dumps(getattr(state, "log_history", []), default=str)),
                "reward_funcs": [str(n) for n in getattr(trainer, "reward_func_names", []) or []],
            })
        if isinstance(error, SystemExit):
            code = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
            failure = None if code == 0 else {"type": "SystemExit", "message": str(error.code), "exit": code}
        elif error is not None:
            failure = {"type": type(error).__name__, "message": str(error), "exit": 1,
                       "traceback": "".join(traceback.format_exception(error))[-3000:]}
        else:
            failure = None
        self.report.write_text(json.dumps({"trainers": trainers, "imports": self.imports, "failure": failure}))


def _bootstrap(script: str, report: str, argv: list[str]) -> None:
    """Run the script as `python script.py ARGV` would, watched by a _Recorder; the report is written at the end."""
    script_path = Path(script).resolve()
    recorder = _Recorder(Path(report))
    recorder.install_import_watch()
    recorder.install_trainer_watch()
    sys.argv = [str(script_path), *argv]
    sys.path.insert(0, str(script_path.parent))
    try:
        runpy.run_path(str(script_path), run_name="__main__")
    except BaseException as err:
        recorder.write(err)
        raise
    recorder.write(None)


# ------------------------------------------------------------------------------------- after running: the verdict


SHOW_PROGRESS = True  # say what the script is doing while it runs (about a minute); tests switch it off
HEARTBEAT_S = 15  # a "still running" line after this many quiet seconds


def _say(text: str) -> None:
    if SHOW_PROGRESS:
        say(f"capstone: {text}")


def _wait(proc: subprocess.Popen, progress: Path, timeout: int) -> None:
    """Wait for the script, printing each step the bootstrap notes (and a heartbeat when quiet) with the elapsed
    time; subprocess.TimeoutExpired past timeout (the script is killed)."""
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
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(proc.args, timeout)
        if now - last_said >= HEARTBEAT_S:
            doing = f"since: {notes[-1]}" if notes else "importing TRL and loading the model come first"
            _say(f"still running ({now - started:.0f} s; {doing})")
            last_said = now


def _run(script: Path, steps: int, out: Path, tmp: Path, timeout: int) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp / REPORT
    code = (f"from helpers.capstone import _bootstrap; _bootstrap({str(script)!r}, {str(report)!r}, "
            f"['--max-steps', {str(steps)!r}, '--output-dir', {str(out)!r}])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(KIT), os.environ.get("PYTHONPATH", "")] if p)}
    _say(f"running {script.name} --max-steps {steps} in a fresh Python (about a minute on a CPU) ...")
    args = [sys.executable, "-c", code]
    with open(tmp / "stdout.txt", "w+") as stdout, open(tmp / "stderr.txt", "w+") as stderr:
        proc = subprocess.Popen(args, cwd=tmp, env=env, stdout=stdout, stderr=stderr, text=True)
        try:
            _wait(proc, report.with_suffix(".progress"), timeout)
        except subprocess.TimeoutExpired:
            raise CapstoneError(f"the script ran past {timeout} s for {steps} steps. Fix: pass "
                                "max_steps=args.max_steps to GRPOConfig, and keep max_completion_length small on a "
                                "CPU (64).") from None
        stdout.seek(0)
        stderr.seek(0)
        r = subprocess.CompletedProcess(args, proc.returncode, stdout.read(), stderr.read())
    if not report.is_file():
        raise CapstoneError(f"the script's interpreter stopped before it finished (exit {r.returncode}); its last "
                            f"output:\n{r.stderr[-2000:]}")
    return r, json.loads(report.read_text())


def _explain_failure(failure: dict, stderr: str, steps: int) -> str:
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
    if failure.get("type") == "NotImplementedError":
        return (f"not answered yet: the script raised NotImplementedError ({failure.get('message')}). Fix: write that "
                "part of the script.")
    tail = failure.get("traceback") or stderr[-2000:]
    return (f"the script failed with {failure.get('type')}: {failure.get('message')}. Fix the line the traceback "
            f"ends in (its last lines below), then check again.\n{tail[-2000:]}")


def _verdict(r, report: dict, out: Path, steps: int) -> dict:
    refused = [(m, f) for m, f in report["imports"] if not _allowed(m)]
    if refused:
        module, requester = refused[0]
        raise CapstoneError(_refusal(module, f"while running, {Path(requester).name}"))
    if report["failure"]:
        raise CapstoneError(_explain_failure(report["failure"], r.stderr, steps))
    grpo = [t for t in report["trainers"] if t["is_grpo"]]
    if not grpo:
        built = ", ".join(t["class"] for t in report["trainers"]) or "no trainer at all"
        raise CapstoneError(f"the script never built TRL's GRPOTrainer (it built {built}). Fix: trainer = "
                            "GRPOTrainer(model=..., processing_class=..., reward_funcs=[...], args=GRPOConfig(...), "
                            "train_dataset=...) from trl, at the script's top level or in a function it calls.")
    trained = [t for t in grpo if t["train_called"] or t["global_step"] > 0]
    if not trained:
        raise CapstoneError("the script built a GRPOTrainer but never called trainer.train(). Fix: call "
                            "trainer.train() before saving the adapter.")
    t = trained[-1]
    if t["global_step"] != steps:
        raise CapstoneError(f"the trainer ran {t['global_step']} steps, not the {steps} the checker asked for "
                            f"(--max-steps {steps}). Fix: GRPOConfig(max_steps=args.max_steps, ...).")
    rewards = {row["step"]: row["reward"] for row in t["log_history"] if "reward" in row and "step" in row}
    if len(rewards) < steps:
        raise CapstoneError(f"TRL logged a reward on {len(rewards)} of the {steps} steps. Fix: GRPOConfig("
                            "logging_steps=1, ...), and pass your reward functions as GRPOTrainer(reward_funcs=[...]).")
    adapter = out / "adapter"
    weights = adapter / "adapter_model.safetensors"
    if not (adapter / "adapter_config.json").is_file() or not weights.is_file():
        raise CapstoneError(f"training ran but no LoRA adapter was saved in --output-dir/adapter ({adapter}). Fix: "
                            "end with model.save_pretrained(f\"{args.output_dir}/adapter\") (peft writes "
                            "adapter_config.json and adapter_model.safetensors).")
    from safetensors.torch import load_file

    b = [w for name, w in load_file(str(weights)).items() if "lora_B" in name]
    if not b or not any(float(w.abs().sum()) > 0 for w in b):
        raise CapstoneError("the saved adapter's LoRA B matrices are all zero: no optimizer step changed them. Fix: "
                            "give the model a LoRA adapter before GRPOTrainer (get_peft_model), save that model, and "
                            "use rewards that differ within a group (partial credit, e.g. for each format tag): a "
                            "group whose completions all score the same teaches nothing.")
    return {"steps": t["global_step"], "rewards": [rewards[s] for s in sorted(rewards)],
            "reward_funcs": t["reward_funcs"], "lora_b_tensors": len(b),
            "lora_b_nonzero": sum(float(w.abs().sum()) > 0 for w in b), "adapter": str(adapter)}


def check(script="train_grpo.py", steps: int = STEPS, timeout: int = 900) -> CapstoneResult:
    """Check a capstone script: read it, run it for `steps` GRPO steps in a temporary folder, judge what it did.

    Never raises for a mistake in the script (a notebook keeps running): the result says what to fix."""
    script = Path(script).expanduser().resolve()
    try:
        read_script(script)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            r, report = _run(script, steps, out, Path(tmp), timeout)
            found = _verdict(r, report, out, steps)
    except CapstoneError as err:
        return CapstoneResult(False, str(err))
    rewards = ", ".join(f"{x:.3f}" for x in found["rewards"])
    return CapstoneResult(True, f"TRL's GRPOTrainer trained {found['steps']} steps with your rewards "
                                f"({', '.join(found['reward_funcs'])}; mean reward per step {rewards}), and "
                                f"{found['lora_b_nonzero']} of the adapter's {found['lora_b_tensors']} LoRA B "
                                "matrices changed.", found)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m helpers.capstone path/to/train_grpo.py", file=sys.stderr)
        return 2
    result = check(argv[0])
    print(result, file=sys.stdout if result.passed else sys.stderr)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
