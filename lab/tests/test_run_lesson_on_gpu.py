"""lab/run_lesson_on_gpu.py: a lesson run top to bottom with the recorder cell put first. Its purpose is the GPU
lab under T4 emulation; here, on CPU, a CPU lesson checks the runner and the recorder, and the kernel-side model
redirect is checked on its own."""

from __future__ import annotations

import json

import nbformat
import pytest

from helpers import config
from lab import gpu_emulation as ge
from lab import run_lesson_on_gpu as runner


@pytest.mark.slow
def test_a_lesson_runs_with_every_cell_recorded_and_the_notebook_untouched(tmp_path):
    committed = (runner.NOTEBOOKS / "01_setup.ipynb").read_bytes()
    assert runner.main(["01_setup", "--out", str(tmp_path), "-p", "RUN_DIR='runs/recorder-test'"]) == 0
    record = json.loads((tmp_path / "01_setup.json").read_text())
    assert record["status"] == "ok" and record["parameters"] == {"RUN_DIR": "runs/recorder-test"}
    lesson_code = [c for c in nbformat.read(runner.NOTEBOOKS / "01_setup.ipynb", as_version=4).cells
                   if c.cell_type == "code"]
    assert len(record["cells"]) == len(lesson_code) + 1, "each lesson cell and papermill's parameters cell"
    assert all(row["status"] == "completed" and row["seconds"] is not None and row["ok"] for row in record["cells"])
    assert record["cells"][0]["first_line"].startswith("# Parameters")
    assert not any("install_in_kernel" in row["first_line"] for row in record["cells"]), "the put-first cell is not the lesson's"
    recorded = [json.loads(line) for line in (tmp_path / "01_setup.cells.jsonl").read_text().splitlines()]
    assert len(recorded) == len(lesson_code) + 2 and all(r["seconds"] < 600 for r in recorded)
    assert (runner.NOTEBOOKS / "01_setup.ipynb").read_bytes() == committed


def test_parameters_are_python_literals_and_bad_ones_say_how_to_write_them():
    assert runner.parameters(["MAX_STEPS=2", "OVERWRITE=True", "RUN_DIR='runs/x'"]) == \
        {"MAX_STEPS": 2, "OVERWRITE": True, "RUN_DIR": "runs/x"}
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        runner.parameters(["MAX_STEPS"])
    with pytest.raises(SystemExit, match="quote strings"):
        runner.parameters(["RUN_DIR=runs/x"])


def test_an_unknown_lesson_names_the_ones_there_are(tmp_path):
    with pytest.raises(SystemExit, match="05_train"):
        runner.injected_copy("05_trian", tmp_path, None, None, tmp_path / "cells.jsonl")


def test_in_the_kernel_a_gpu_preset_loads_the_random_weight_model(tmp_path):
    try:
        ge.install_in_kernel(None, model_dir=str(tmp_path))
        assert config.get_preset("t4").model_name == str(tmp_path)
        assert config.get_preset("t4", max_steps=2).max_steps == 2
        assert config.get_preset("cpu").model_name != str(tmp_path), "the embedded model's presets are left alone"
    finally:
        ge._KERNEL.close()
    assert config.get_preset("t4").model_name != str(tmp_path)


def test_the_random_weight_model_is_never_written_under_out(tmp_path):
    """The model is 3 GB and --out holds what comes back from the GPU machine: a folder inside --out (or --out
    itself, or a link resolving there) is refused with the fix; the default lies outside."""
    out = (tmp_path / "out").resolve()
    for inside in (out / "random-model", out):
        with pytest.raises(SystemExit, match="inside --out.*Fix: a --random-model-dir outside"):
            runner.model_folder_outside(inside, "qwen2.5-1.5b", out)
    (tmp_path / "rm").mkdir()
    out.mkdir()
    (out / "random-model").symlink_to(tmp_path / "rm")
    assert runner.model_folder_outside(out / "random-model", "qwen2.5-1.5b", out) == (tmp_path / "rm").resolve()
    default = runner.model_folder_outside(None, "qwen2.5-1.5b", out)
    assert default == ge.default_random_model_dir("qwen2.5-1.5b").resolve() and out not in default.parents


def test_random_model_dir_reuses_the_benchmarks_model(monkeypatch, tmp_path):
    """--random-model-dir DIR: the kernel loads DIR's model (written by the benchmark, reused), and nothing of it is
    under --out; the record says which folder and the VLLM_*/UNSLOTH_* variables the kernel started with."""
    import papermill

    written = []

    def reuse(key, folder, tokenizer):
        written.append((key, folder))
        return folder

    def execute(source, executed, **kw):
        nbformat.write(nbformat.read(source, as_version=4), executed)

    monkeypatch.setattr(runner, "random_model_folder", reuse)
    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "0")
    out, model = tmp_path / "out", tmp_path / "rm"
    assert runner.main(["01_setup", "--random-weights", "--random-model-dir", str(model), "--out", str(out)]) == 0
    assert written == [("qwen2.5-1.5b", model.resolve())]
    record = json.loads((out / "01_setup.json").read_text())
    assert record["random_model_dir"] == str(model.resolve()) and record["environment"]["UNSLOTH_VLLM_STANDBY"] == "0"
    first = nbformat.read(out / "01_setup.in.ipynb", as_version=4).cells[0].source
    assert f"model_dir={str(model.resolve())!r}" in first
    assert sorted(p.name for p in out.iterdir()) == ["01_setup.in.ipynb", "01_setup.json", "01_setup.out.ipynb"]
    with pytest.raises(SystemExit, match="inside --out"):
        runner.main(["01_setup", "--random-weights", "--random-model-dir", str(out / "rm"), "--out", str(out)])
    assert written == [("qwen2.5-1.5b", model.resolve())], "refused before any model is written"
