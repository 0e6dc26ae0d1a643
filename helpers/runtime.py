"""What machine are we on, and what should we run there?

Every notebook calls `detect()` first and `check()` before loading a model, so a student hears
"Runtime > Change runtime type > T4 GPU" instead of a CUDA traceback.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from helpers.backend import Backend


# Every GPU figure in the kit is in GiB (2**30 bytes), what PyTorch's allocator and helpers.memory count in;
# "GB" in messages means GiB. (Decimal GB would show a T4's 14.56 GiB as 15.63 "GB".)
GIB = 1024**3


class RuntimeProblem(RuntimeError):
    """The machine cannot run what was asked; the message says what to do."""


def no_gpu(preset=None, *, on_colab: bool) -> RuntimeProblem:
    """The one refusal of GPU work on a machine with no GPU, raised by the setup cell (a T4 lesson on a Colab CPU
    runtime), check(), the preset's validation and the model loader, so a student reads one text wherever it stops.

    preset: the Preset asked for (its name, and a multi-GPU backend's own fix); None: the lesson asked for the T4.
    on_colab: the fix is Colab's menu path (and PRESET = "cpu"), else the cpu preset on this machine."""
    name = getattr(preset, "name", None)
    what = f"preset {name!r}" if name else "this lesson" if on_colab else "the GPU path"
    where = "No GPU is attached to this Colab session" if on_colab else "No GPU is visible to PyTorch on this machine"
    backend = getattr(preset, "backend", None)
    if backend is not None and Backend(backend).uses_trl_vllm:
        return RuntimeProblem(f"{where}, and {what} needs NVIDIA GPUs (several: TRL + vLLM, bf16). Fix: run it on a "
                              "multi-GPU machine with accelerate launch (lab/docs/scale-out.md), or use the cpu preset.")
    if on_colab:
        fix = ("Runtime > Change runtime type > T4 GPU, then run the notebook again from the top. (To run it on this "
               "CPU runtime with the small embedded model instead, set PRESET = \"cpu\" in the first cell; "
               "docs/colab.md says which lessons need the T4.)")
    else:
        fix = ("on Colab choose Runtime > Change runtime type > T4 GPU; on this machine use the cpu preset, the "
               "embedded model (--preset cpu, or PRESET = \"cpu\" in a notebook).")
    return RuntimeProblem(f"{where}, and {what} needs an NVIDIA GPU (the T4 path: Unsloth + vLLM). Fix: {fix}")


@dataclass(frozen=True)
class Runtime:
    on_colab: bool
    gpu_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    total_gpu_gb: float | None = None
    free_gpu_gb: float | None = None
    has_unsloth: bool = False
    has_vllm: bool = False
    vllm_unavailable: str | None = None  # vLLM installed but not importable here: why (Unsloth's reason, if it said)
    warnings: tuple[str, ...] = field(default=())

    @property
    def has_gpu(self) -> bool:
        return self.gpu_name is not None

    @property
    def bf16_supported(self) -> bool:
        """bf16 needs Ampere (compute capability 8.0) or newer; a T4 is 7.5."""
        return self.compute_capability is not None and self.compute_capability >= (8, 0)

    @property
    def backend(self) -> Backend:
        """Backend.UNSLOTH (GPU, Unsloth + vLLM installed) or Backend.CPU (transformers + peft, embedded model)."""
        if self.has_gpu and self.has_unsloth and self.has_vllm:
            return Backend.UNSLOTH
        return Backend.CPU

    @property
    def precision(self) -> str:
        """The training precision this runtime should use: bf16, fp16 or fp32 (CPU)."""
        if not self.has_gpu:
            return "fp32"
        return "bf16" if self.bf16_supported else "fp16"

    def describe(self) -> str:
        where = "Colab" if self.on_colab else "local machine"
        if not self.has_gpu:
            return f"{where}, no GPU: CPU path with the embedded model (backend={self.backend})"
        cc = ".".join(map(str, self.compute_capability or ()))
        return (
            f"{where}, {self.gpu_name} (compute capability {cc}), {self.free_gpu_gb:.2f} of "
            f"{self.total_gpu_gb:.2f} GiB free, precision {self.precision}, unsloth={'yes' if self.has_unsloth else 'no'}, "
            f"vllm={'yes' if self.has_vllm else 'disabled' if self.vllm_unavailable else 'no'}, backend={self.backend}"
        )


def on_colab(environ=None) -> bool:
    """Colab sets several COLAB_* variables (the same test Unsloth's install cell uses)."""
    environ = os.environ if environ is None else environ
    return any(key.startswith("COLAB_") for key in environ)


COLAB_CONTENT = Path("/content")  # Colab's working directory, the runtime's own disk; Drive mounts at <it>/drive
DRIVE_KIT_FOLDER = "grpo-kit"  # MyDrive/grpo-kit/: run folders, checkpoints, staged adapters and exports asked there


def in_notebook() -> bool:
    """True inside a Jupyter/Colab kernel (not in a terminal IPython or a plain python process): the dashboard and
    the evaluation's side-by-side table show HTML there, text elsewhere. Imports nothing."""
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip is not None and hasattr(ip, "get_ipython") else None
    return shell is not None and (type(shell).__name__ == "ZMQInteractiveShell" or "google.colab" in sys.modules)


def mount_drive(content, mount=None):
    """Colab's Google Drive, mounted at <content>/drive if it is not yet (Drive asks for permission once); returns
    <content>/drive/MyDrive. `mount` replaces google.colab.drive.mount (tests). The one place the kit mounts Drive:
    the run folder (helpers.colab.drive_root), checkpoints (helpers.run.checkpoints.checkpoint_root) and
    exports asked onto Drive (helpers.sharing.export_dir)."""
    mount_point = Path(content) / "drive"
    if not (mount_point / "MyDrive").is_dir():
        if mount is None:
            from google.colab import drive  # only exists on Colab: imported where used

            mount = drive.mount
        mount(str(mount_point))
    return mount_point / "MyDrive"


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# The fix when vLLM is installed but this process cannot use it (helpers.runtime.check says it too).
VLLM_REINSTALL_FIX = (
    "Runtime > Disconnect and delete runtime, then run the notebook from the top so the setup cell installs "
    "requirements.txt (vLLM included) into a fresh runtime; locally, `pip install -r requirements.txt` and restart "
    "the kernel. See docs/troubleshooting.md."
)


def vllm_disabled_reason() -> str | None:
    """The warning Unsloth logged when it disabled vLLM at import (unsloth.import_fixes), if any."""
    fixes = sys.modules.get("unsloth.import_fixes")
    reason = getattr(fixes, "VLLM_DISABLED_REASON", None) if fixes is not None else None
    return reason.strip() if reason else None


# When vLLM is installed but cannot load (a broken compiled library, a torch/CUDA or transformers it does not match),
# Unsloth disables it at import, records why (vllm_disabled_reason reads it) and hides it from
# importlib.util.find_spec, so it looks "not installed". The fix is a fresh install into a fresh runtime.
def vllm_unavailable_reason() -> str | None:
    """Why vLLM, installed (its distribution is there), cannot be imported in this process: Unsloth's reason when
    it disabled vLLM, else a plain statement. None when vLLM is simply not installed."""
    reason = vllm_disabled_reason()
    if reason:
        return reason
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None
    return f"vLLM {version} is installed but cannot be imported in this process."


def vllm_disabled_message(reason: str) -> str:
    """The RuntimeProblem text for an installed vLLM this process cannot use (not "not installed")."""
    return (f"vLLM is installed but disabled in this process, and the GPU path generates with it "
            f"(fast_inference=True). Reason: {reason} Fix: {VLLM_REINSTALL_FIX}")


# PyTorch reads its allocator settings once, when CUDA starts in the process; set later they never apply.
# Unsloth's own choice (unsloth_zoo/__init__.py, torch >= 2.10): expandable segments against fragmentation,
# except in vLLM standby mode, which refuses them (the kit keeps standby off: UNSLOTH_ENV below).
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
ALLOC_CONF = "expandable_segments:True"


def cuda_started() -> bool:
    """Whether this process has already initialised CUDA (then allocator settings can no longer change)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a half-imported or CPU-only torch: CUDA did not start
        return False


def configure_cuda_allocator(environ=None) -> bool:
    """Set PYTORCH_ALLOC_CONF=expandable_segments:True before CUDA starts, unless the user set an allocator
    config or vLLM standby is on. Returns True when the setting is (now) in place for this process."""
    environ = os.environ if environ is None else environ
    if environ.get("UNSLOTH_VLLM_STANDBY", "0") == "1":
        return False
    if any(environ.get(k) for k in ALLOC_CONF_VARS):
        return not cuda_started()
    if cuda_started():
        return False
    environ["PYTORCH_ALLOC_CONF"] = ALLOC_CONF
    return True


# Set before unsloth/vllm are imported: standby mode hit intermittent illegal memory access on T4 (sm_75) in
# Unsloth's own T4 CI, and FlashInfer's JIT link fails on images without libcuda.so (both in unslothai/unsloth
# .github/scripts/kaggle_t4_ci/legs.py: the grpo leg and UNWIRED["grpo"]).
UNSLOTH_ENV = {"UNSLOTH_VLLM_STANDBY": "0", "UNSLOTH_VLLM_NO_FLASHINFER": "1"}


def import_unsloth():
    """Import Unsloth with the kit's environment; it must come before TRL/transformers so its patches apply."""
    for key, value in UNSLOTH_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import unsloth
    except ImportError as err:
        raise RuntimeProblem(
            f"Unsloth could not be imported ({err}). Fix: run the setup cell again (on Colab it installs "
            "requirements.txt and restarts), or `pip install -r requirements.txt` and restart the kernel. "
            "After a Colab image update, see docs/troubleshooting.md."
        ) from err
    return unsloth


def start_gpu_process(backend: Backend | str | None) -> None:
    """The first call of every GPU entry point (python -m helpers.train, the guard before any model loads):
    allocator settings before CUDA starts, then Unsloth before transformers/TRL are imported, so its patches apply.

    backend: the preset's (helpers.config.Preset.backend). Does nothing for the cpu backend, and imports nothing when
    Unsloth is not installed (the runtime check says so).
    """
    if backend is None or not Backend(backend).needs_gpu:
        return
    configure_cuda_allocator()
    if Backend(backend).uses_unsloth and _installed("unsloth"):
        import_unsloth()


def detect() -> Runtime:
    """Read the machine without loading any model. Imports torch but never unsloth or vllm.

    Starts CUDA (to read free memory), so the allocator settings are put in place first. Memory is in GiB.
    """
    configure_cuda_allocator()
    import torch

    colab = on_colab()
    has_unsloth, has_vllm = _installed("unsloth"), _installed("vllm")
    vllm_unavailable = None if has_vllm else vllm_unavailable_reason()
    if not torch.cuda.is_available():
        return Runtime(on_colab=colab, has_unsloth=has_unsloth, has_vllm=has_vllm, vllm_unavailable=vllm_unavailable)
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return Runtime(
        on_colab=colab,
        gpu_name=props.name,
        compute_capability=(props.major, props.minor),
        total_gpu_gb=total / GIB,
        free_gpu_gb=free / GIB,
        has_unsloth=has_unsloth,
        has_vllm=has_vllm,
        vllm_unavailable=vllm_unavailable,
    )


# Known GPUs for tests and for planning without the card in hand. total_gpu_gb is what PyTorch reports, in GiB
# (a T4 shows 14.56, not 16: unslothai/unsloth .github/scripts/kaggle_t4_ci/legs.py; helpers.memory.GPUS agrees).
_FAKE_GPUS = {
    "t4": ("Tesla T4", (7, 5), 14.56),
    "l4": ("NVIDIA L4", (8, 9), 22.3),
    "a100": ("NVIDIA A100-SXM4-40GB", (8, 0), 42.4),
    "h100": ("NVIDIA H100 80GB HBM3", (9, 0), 84.9),
}


def fake_runtime(kind: str = "cpu", *, on_colab: bool = False, free_gpu_gb: float | None = None, **overrides) -> Runtime:
    """A Runtime for a machine we are not on (tests, planning). kind: cpu, t4, l4, a100, h100."""
    if kind == "cpu":
        return replace(Runtime(on_colab=on_colab), **overrides)
    try:
        name, cc, total = _FAKE_GPUS[kind]
    except KeyError:
        raise ValueError(f"unknown runtime kind {kind!r}; choose one of cpu, {', '.join(_FAKE_GPUS)}") from None
    rt = Runtime(
        on_colab=on_colab,
        gpu_name=name,
        compute_capability=cc,
        total_gpu_gb=total,
        free_gpu_gb=total if free_gpu_gb is None else free_gpu_gb,
        has_unsloth=True,
        has_vllm=True,
    )
    return replace(rt, **overrides)


def check(rt: Runtime, *, want_gpu: bool | None = None, precision: str | None = None,
          need_free_gb: float | None = None) -> list[str]:
    """Raise RuntimeProblem with the fix when the runtime cannot do what is asked; return soft warnings.

    want_gpu: True - the caller needs the GPU path (the t4 preset); False - the CPU path was chosen (the embedded
    model, which also runs on a Colab CPU runtime); None (not said) - a Colab runtime without a GPU is refused,
    since on Colab the course expects the T4 unless a lesson says otherwise (docs/colab.md). precision: 'bf16'/'fp16' if the user forced one.
    need_free_gb: free GPU memory needed before loading, checked now rather than discovered as an OOM later.
    """
    warnings = []
    if not rt.has_gpu:
        if want_gpu or (want_gpu is None and rt.on_colab):
            raise no_gpu(on_colab=rt.on_colab)
        return warnings
    if precision == "bf16" and not rt.bf16_supported:
        cc = ".".join(map(str, rt.compute_capability))
        raise RuntimeProblem(
            f"bf16 was requested but the {rt.gpu_name} (compute capability {cc}) has no bf16 support; "
            "it needs 8.0 (Ampere) or newer. Fix: use fp16 (the t4 preset does this by default) - remove bf16=True."
        )
    if want_gpu and not rt.has_unsloth:
        raise RuntimeProblem(
            "Unsloth is not installed, and the GPU path loads the model through it. Fix: run the setup cell "
            "(it installs requirements.txt), or `pip install -r requirements.txt`, then restart the runtime."
        )
    if want_gpu and not rt.has_vllm and rt.vllm_unavailable:
        raise RuntimeProblem(vllm_disabled_message(rt.vllm_unavailable))
    if want_gpu and not rt.has_vllm:
        raise RuntimeProblem(
            "vLLM is not installed, and the GPU path generates with it (fast_inference=True). Fix: run the setup "
            "cell (it installs the vLLM pinned in requirements.txt for this GPU), then restart the runtime."
        )
    if need_free_gb is not None and rt.free_gpu_gb is not None and rt.free_gpu_gb < need_free_gb:
        raise RuntimeProblem(
            f"Only {rt.free_gpu_gb:.2f} GiB of GPU memory is free and this step needs about {need_free_gb:.2f} GiB. "
            "Fix: Runtime > Restart session (frees memory held by an earlier model), or lower "
            "gpu_memory_utilization / num_generations / max_completion_length in the preset."
        )
    return warnings
