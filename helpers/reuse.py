"""Results computed once on this machine and read back when what decides them is unchanged, instead of computed
again: the base model's evaluation before training (helpers.evaluation) and lesson 05's rerun exercise
(helpers.teaching.exercises.nb05). Each caller builds a key of everything that decides its result, says so when it
reuses one, and has a switch to compute it again. The files live under helpers.model.cache_dir().
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parent  # the helpers package: its Python sources decide what the kit computes


def digest(key) -> str:
    """A short name for a key (any JSON value): the cache file's name."""
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]


def write_atomically(path: Path, text: str) -> None:
    """Written beside its place and renamed, so a reader never sees half a file (two runs at once, a kill)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}-", delete=False) as f:
        try:
            f.write(text)
            f.flush()
        except BaseException:  # a full disk, a kill: no half-written file left beside it either
            f.close()
            os.unlink(f.name)
            raise
    os.replace(f.name, path)


def model_files(folder: Path) -> list:
    """(name, size, modification time) of a model folder's files: a re-converted or replaced model is another key."""
    return sorted([f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in Path(folder).iterdir() if f.is_file())


def kit_sources() -> str:
    """A digest of the kit's own Python sources (helpers/): a result the kit's code computed is stale once it changes."""
    h = hashlib.sha256()
    for path in sorted(KIT.rglob("*.py")):
        h.update(str(path.relative_to(KIT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:24]


def libraries() -> dict:
    """The versions of the libraries the CPU path computes with, and what decides their kernels' arithmetic here
    (the CPU's vector instructions, torch's thread count)."""
    import peft
    import torch
    import transformers
    import trl

    return {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "peft": peft.__version__, "cpu": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads()}


def read(path: Path, key):
    """The value saved at path under exactly this key, or None (missing, unreadable, another key)."""
    try:
        saved = json.loads(Path(path).read_text())
        if saved["key"] == json.loads(json.dumps(key, default=str)):
            return saved["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def write(path: Path, key, value) -> None:
    write_atomically(Path(path), json.dumps({"key": key, "value": value}, default=str))
