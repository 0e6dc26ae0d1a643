"""Fast tests of the helpers the notebooks call (helpers.notebook_setup and helpers.colab, helpers.teaching.course,
helpers.teaching.reward_lab, the adapter finder in helpers.sharing)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import colab, notebook_setup, sharing
from helpers.run import pipeline
from helpers.teaching import course, reward_lab
from helpers.runtime import RuntimeProblem, fake_runtime, on_colab
from helpers.config import PresetError
from helpers.run.dashboard import plot_dashboard

ROOT = Path(__file__).resolve().parents[1]


def test_kit_root_is_found_from_the_notebooks_folder():
    assert colab.kit_root(ROOT / "notebooks") == ROOT
    assert colab.kit_root(ROOT) == ROOT


def test_kit_root_outside_the_kit_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(colab, "COLAB_DIR", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="notebooks/ folder"):
        colab.kit_root(tmp_path)


def test_on_colab_needs_a_colab_variable():
    assert on_colab({"COLAB_RELEASE_TAG": "x"})
    assert not on_colab({"HOME": "/root"})


def test_install_if_colab_does_nothing_off_colab(monkeypatch, tmp_path):
    monkeypatch.setattr(colab, "on_colab", lambda environ=None: False)
    monkeypatch.setattr(colab, "_pip", lambda *a: pytest.fail("pip must not run off Colab"))
    assert notebook_setup.install_if_colab(tmp_path) is False  # the name the setup cell calls
    assert not list(tmp_path.iterdir()), "nothing written off Colab"


IMPORT_CHECK = """
import sys
before = set(sys.modules)
from helpers import notebook_setup as setup
new = set(sys.modules) - before
print(sorted({m.split(".")[0] for m in new} - set(sys.stdlib_module_names) - {"helpers"}))
print(sorted(m for m in new if m.startswith("helpers")))
"""


def test_the_setup_cells_modules_import_only_the_standard_library():
    """The setup cell imports notebook_setup (and with it helpers.colab) before the Colab install replaces torch:
    nothing else may load then, or the install would need a restart it cannot see coming."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=ROOT, capture_output=True, text=True, check=True)
    third_party, kit_modules = out.stdout.splitlines()
    assert third_party == "[]", f"imported at import time: {third_party}"
    assert kit_modules == ("['helpers', 'helpers.backend', 'helpers.colab', 'helpers.messages', "
                           "'helpers.notebook_setup', 'helpers.runtime']")


def test_the_setup_module_is_the_front_door_only():
    """The setup cell calls install_if_colab on `setup`; the adapter finder lives in helpers.sharing (no re-exports
    for notebook copies that never existed: a name it does not define raises AttributeError)."""
    assert notebook_setup.install_if_colab is colab.install_if_colab
    for name in ("locate_adapter", "is_adapter", "AdapterMissing", "no_such_name"):
        with pytest.raises(AttributeError):
            getattr(notebook_setup, name)
    assert len((ROOT / "helpers" / "notebook_setup.py").read_text().splitlines()) <= 250, "the front door only"


def test_preset_is_chosen_from_the_runtime():
    assert notebook_setup.resolve_preset_name(None, fake_runtime("cpu")) == "cpu"
    assert notebook_setup.resolve_preset_name(None, fake_runtime("t4")) == "t4"
    assert notebook_setup.resolve_preset_name("cpu", fake_runtime("t4")) == "cpu"


def test_prepare_on_this_machine_drops_none_overrides(tmp_path):
    kit = notebook_setup.prepare("cpu", run_dir="runs/x", root=ROOT, quiet=True, max_steps=None, eval_size=3)
    assert kit.preset.name == "cpu" and kit.preset.eval_size == 3
    assert kit.overrides == {"eval_size": 3}
    assert kit.run_dir == ROOT / "runs" / "x"
    absolute = notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True)
    assert absolute.run_dir == tmp_path


def test_prepare_rejects_bad_settings_before_loading():
    with pytest.raises(PresetError, match="num_generations"):
        notebook_setup.prepare("cpu", root=ROOT, quiet=True, num_generations=1)


def test_prepare_with_the_gpu_preset_on_cpu_says_the_fix(monkeypatch):
    from helpers import runtime

    monkeypatch.setattr(runtime, "detect", lambda: fake_runtime("cpu", on_colab=True))
    with pytest.raises(RuntimeProblem, match=r"^No GPU is attached to this Colab session, and this lesson .*"
                                             r"Runtime > Change runtime type > T4 GPU"):
        notebook_setup.prepare(None, root=ROOT, quiet=True)
    with pytest.raises(RuntimeProblem, match=r"^No GPU is attached to this Colab session, and preset 't4' "):
        notebook_setup.prepare("t4", root=ROOT, quiet=True)  # the same text from the preset's validation


def test_prepare_stops_a_t4_with_too_little_free_memory(monkeypatch):
    from helpers import runtime

    monkeypatch.setattr(runtime, "detect", lambda: fake_runtime("t4", on_colab=True, free_gpu_gb=3.0))
    with pytest.raises(RuntimeProblem, match="Only 3.00 GiB of GPU memory is free"):
        notebook_setup.prepare(None, root=ROOT, quiet=True)


def test_05s_training_curves_show_rss_only_without_memory_logs(tmp_path):
    rows = [{"step": 1, "reward": 0.5, "reward_std": 0.1, "frac_reward_zero_std": 0.5,
             "rewards/correctness_reward/mean": 0.0, "completions/mean_length": 30.0},
            {"step": 2, "reward": 0.7, "reward_std": 0.2, "frac_reward_zero_std": 0.0,
             "rewards/correctness_reward/mean": 0.5, "completions/mean_length": 28.0}]
    sampled = plot_dashboard(rows, rss_samples=[(0.0, 1.0), (1.0, 1.5)])  # as 05 calls it: the figure stays open
    logged = plot_dashboard([{**r, "memory/rss_gb": 1.2} for r in rows])
    titles = [{ax.get_title() for ax in fig.axes} for fig in (sampled, logged)]
    assert "process RSS (no memory/* logs); peak 1.50 GB" in titles[0]  # the samples, when nothing was logged
    assert "process memory, RAM (GB)" in titles[1]  # the run's own memory/* logs win


def test_rss_sampler_records_something():
    import time

    with course.RssSampler(interval=0.01) as rss:
        time.sleep(0.05)
    assert rss.samples and rss.peak_gb > 0


def test_memory_snapshot_on_cpu_has_rss_only():
    snap = course.memory_snapshot("now")
    assert snap["rss_gb"] > 0 and "cuda_allocated_gb" not in snap


def test_hand_written_table_ranks_the_perfect_completion_first():
    table = reward_lab.score_table(reward_lab.HAND_WRITTEN)
    assert table["perfect"]["total"] == 4.0
    assert max(row["total"] for row in table.values()) == 4.0
    assert table["empty"]["total"] == 0.0


def test_hacking_demo_naive_rewards_are_gamed_and_the_kits_are_not():
    demo = reward_lab.hacking_demo()
    naive, kit = demo["naive"], demo["kit"]
    assert max(naive[h]["total"] for h in reward_lab.HACKS) > naive["honest, formatted"]["total"]
    assert all(kit[h]["total"] < kit["honest, formatted"]["total"] for h in reward_lab.HACKS)
    assert kit["repeated tags"]["tag_count_reward"] == 0.0
    assert kit["hedged answer"]["correctness_reward"] == 0.0
    assert kit["number dump"]["correctness_reward"] == 0.0


def test_playground_rescores_on_every_edit():
    pg = reward_lab.playground()
    assert pg.scores["total"] == 4.0
    pg.textarea.value = "<answer>12</answer>"
    assert pg.scores["strict_format_reward"] == 0.0 and pg.scores["correctness_reward"] == 2.0
    pg.gold.value = "13"
    assert pg.scores["correctness_reward"] == 0.0


def _tiny_kit(tmp_path):
    return notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True, max_steps=2)


def test_tiny_adapter_is_trained_into_the_run_folder(tmp_path, monkeypatch):
    def fake_run(preset, options, reward_funcs=None):
        seen.append((preset, options))
        (options.run_dir / "adapter").mkdir(parents=True)
        for name in sharing.ADAPTER_FILES:
            (options.run_dir / "adapter" / name).write_text("{}")
        return SimpleNamespace(model="the trained model", tokenizer="its tokenizer", summary={"steps": 2})

    seen = []
    monkeypatch.setattr(pipeline, "run", fake_run)
    kit = notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True)
    # the model the run trained comes back with the adapter (06 evaluates with it: tests/test_gpu_faults.py)
    assert course.train_tiny_adapter(kit) == (tmp_path / "adapter", "the trained model", "its tokenizer")
    preset, options = seen[0]
    assert preset.max_steps == 1 and not options.evaluate, "06 evaluates the adapter itself: the tiny run does not"


def test_tiny_run_without_an_adapter_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: SimpleNamespace(model=None, tokenizer=None, summary={}))
    with pytest.raises(FileNotFoundError, match="wrote no adapter"):
        course.train_tiny_adapter(_tiny_kit(tmp_path))


def test_prepare_with_drive_off_colab_says_it_needs_colab(monkeypatch):
    monkeypatch.setattr(colab, "on_colab", lambda environ=None: False)
    with pytest.raises(ValueError, match="USE_DRIVE = True needs Google Colab"):
        notebook_setup.prepare("cpu", root=ROOT, quiet=True, drive=True)


# ------------------------------------------------------------- 06: which adapter a runtime evaluates, and where


def _adapter(folder: Path, base: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(f'{{"base_model_name_or_path": "{base}"}}')
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return folder


CPU_BASE = "/root/.cache/grpo-kit/SmolLM2-135M-Instruct"
T4_BASE = "unsloth/qwen2.5-1.5b-instruct-unsloth-bnb-4bit"


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def tiny_runs(monkeypatch):
    """pipeline.run replaced by a 'training' that writes a CPU adapter into the run folder it is given."""
    runs = []

    def fake_run(preset, options, reward_funcs=None):
        runs.append(options.run_dir)
        _adapter(options.run_dir / "adapter", CPU_BASE)
        return SimpleNamespace(model="tiny model", tokenizer="tiny tokenizer", summary={"steps": 2})

    monkeypatch.setattr(pipeline, "run", fake_run)
    return runs


def test_06_evaluates_05s_run_when_this_runtime_loads_its_model(tmp_path, tiny_runs):
    run_dir = tmp_path / "course"
    adapter = _adapter(run_dir / "adapter", CPU_BASE)  # 05 on the cpu preset
    kit = _tiny_kit(run_dir)
    assert course.adapter_for_this_runtime(kit) == (adapter, run_dir, None, None)
    assert not tiny_runs


def test_06_with_the_t4_run_trains_a_cpu_run_of_its_own_and_never_writes_run_dir(tmp_path, tiny_runs, capsys):
    run_dir = tmp_path / "course"
    _adapter(run_dir / "adapter", T4_BASE)  # the T4 lab's run, as on Drive
    before = _snapshot(run_dir)
    kit = _tiny_kit(run_dir)
    local = tmp_path / "course-cpu"
    assert course.adapter_for_this_runtime(kit) == (local / "adapter", local, "tiny model", "tiny tokenizer")
    assert tiny_runs == [local]
    assert f"holds an adapter for {T4_BASE}, which this preset (cpu" in capsys.readouterr().out
    # run again (the notebook rerun): the tiny run there is reused, not trained again
    assert course.adapter_for_this_runtime(kit) == (local / "adapter", local, None, None)
    assert tiny_runs == [local] and _snapshot(run_dir) == before


def test_06_without_train_if_missing_names_the_t4_run_and_the_fixes(tmp_path, tiny_runs):
    run_dir = tmp_path / "course"
    _adapter(run_dir / "adapter", T4_BASE)
    with pytest.raises(sharing.AdapterMissing) as err:
        course.adapter_for_this_runtime(_tiny_kit(run_dir), train_if_missing=False)
    message = str(err.value)
    assert T4_BASE in message and str(tmp_path / "course-cpu" / "adapter") in message  # what is there, where it looked
    assert "TRAIN_IF_MISSING = True" in message and "STAGED_ADAPTER" in message  # the fixes
    assert not tiny_runs and not (tmp_path / "course-cpu").exists()


def test_06_uses_a_staged_adapter_for_its_preset_before_training(tmp_path, tiny_runs):
    run_dir = tmp_path / "course"
    _adapter(run_dir / "adapter", T4_BASE)
    staged = _adapter(tmp_path / "instructor" / "adapter", CPU_BASE)
    adapter, work_dir, model, _ = course.adapter_for_this_runtime(_tiny_kit(run_dir), staged=str(staged))
    assert (adapter, work_dir, model) == (staged, tmp_path / "course-cpu", None) and not tiny_runs


def test_06_with_a_run_folder_on_drive_keeps_its_own_run_on_the_runtimes_disk(tmp_path, tiny_runs, monkeypatch):
    from helpers import sharing

    monkeypatch.setattr(sharing, "COLAB_CONTENT", tmp_path / "content")
    run_dir = tmp_path / "content" / "drive" / "MyDrive" / "grpo-kit" / "runs" / "course"
    run_dir.mkdir(parents=True)  # USE_DRIVE, and nothing trained yet
    assert course.local_run_dir(run_dir, "cpu") == tmp_path / "content" / "runs" / "course-cpu"
    adapter, work_dir, _, _ = course.adapter_for_this_runtime(_tiny_kit(run_dir))
    assert work_dir == tmp_path / "content" / "runs" / "course-cpu" and not sharing.on_drive(adapter)
    assert not any(run_dir.iterdir()), "the Drive run folder stays empty: 05 starts there fresh"
