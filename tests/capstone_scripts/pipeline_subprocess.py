"""A student's script that runs the kit's pipeline in another Python and copies its adapter. Expected: refused,
the subprocess named."""
import argparse
import subprocess
import sys

from trl import GRPOTrainer  # noqa: F401 - named, never trained

ap = argparse.ArgumentParser()
ap.add_argument("--max-steps", type=int, default=40)
ap.add_argument("--output-dir", default="runs/capstone")
args = ap.parse_args()
subprocess.run([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--max-steps", str(args.max_steps),
                "--output-dir", args.output_dir], check=True)
