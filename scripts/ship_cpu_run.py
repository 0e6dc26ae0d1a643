"""Ship a finished CPU run as lesson data: RUN_DIR/metrics.jsonl and a run.json into results/cpu-runs/NAME/.

    .venv/bin/python scripts/ship_cpu_run.py runs/lr-1e-3 lr-1e-3 --what "learning rate 1e-3" \
        --command "python -m helpers.train --preset cpu --seed 0 --learning-rate 1e-3" --commit 494355b

helpers.teaching.measured_runs reads them. An existing NAME is not replaced unless --overwrite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))

from helpers.teaching.measured_runs import RUNS_DIR  # noqa: E402


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("name")
    ap.add_argument("--what", required=True, help="one line: what this run changes from the cpu preset")
    ap.add_argument("--command", required=True, help="the command that produced it")
    ap.add_argument("--commit", required=True, help="the kit's commit the run started from")
    ap.add_argument("--started", default=None, help="UTC start time, e.g. 2026-11-25T00:40:18Z")
    ap.add_argument("--note", default="", help="how it ran (threads, other jobs on the machine)")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    summary = json.loads((args.run_dir / "summary.json").read_text())
    target = RUNS_DIR / args.name
    if target.exists() and not args.overwrite:
        print(f"{target} exists; pass --overwrite to replace it", file=sys.stderr)
        return 1
    target.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.jsonl", "samples.jsonl"):  # the curves; the held-out answers before and after
        shutil.copy2(args.run_dir / name, target / name)
    meta = {"name": args.name, "what": args.what, "command": args.command, "commit": args.commit,
            "started": args.started, "machine": f"{cpu_name()}, {len(os.sched_getaffinity(0))} cores",
            "note": args.note, "steps": summary["steps"], "wall_seconds": summary["wall_seconds"],
            "before": summary["before"], "after": summary["after"], "reward_funcs": summary["reward_funcs"]}
    (target / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"shipped {args.run_dir} as {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
