"""The capstone checker: the reference train_grpo.py passes 2 CPU GRPO steps; a script that saves nothing fails."""

from pathlib import Path

import pytest

from helpers import capstone

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "capstone" / "solution" / "train_grpo.py"


def test_reference_solution_is_about_forty_lines_of_real_calls():
    """The calls a student writes are called in the code (not in a comment or a string), and none of the kit's
    pipeline (helpers.train, helpers.run) is imported, except the CPU patch of TRL's Triton kernel (no lesson teaches
    it): the task is to write the pipeline from scratch."""
    import ast

    code = [line for line in REFERENCE.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]
    assert len(code) <= 60
    tree = ast.parse(REFERENCE.read_text())
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert {"GRPOConfig", "GRPOTrainer", "trainer.train", "get_peft_model", "model.save_pretrained"} <= called
    imported = {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    pipeline = [m for m in imported if m.split(".")[:2] in (["helpers", "train"], ["helpers", "run"])
                and m != "helpers.run.trl_patches.patch_trl_for_cpu"]
    assert not pipeline, f"the reference solution goes through the kit's pipeline: {pipeline}"


def test_missing_script_says_what_to_do(tmp_path):
    with pytest.raises(capstone.CapstoneError, match="does not exist"):
        capstone.check(tmp_path / "train_grpo.py")
    assert capstone.main([str(tmp_path / "train_grpo.py")]) == 1


def test_a_script_that_saves_no_adapter_fails_with_the_fix(tmp_path):
    script = tmp_path / "train_grpo.py"
    script.write_text("import argparse\nap = argparse.ArgumentParser()\nap.add_argument('--max-steps')\n"
                      "ap.add_argument('--output-dir')\nap.parse_args()\n")
    with pytest.raises(capstone.CapstoneError, match="no LoRA adapter"):
        capstone.check(script)


@pytest.mark.slow
def test_reference_solution_passes_two_cpu_grpo_steps():
    result = capstone.check(REFERENCE)
    assert result["lora_b_tensors"] > 0
