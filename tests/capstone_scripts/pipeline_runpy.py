"""A student's script that runs the kit's pipeline (helpers.train) through runpy, after building a GRPOTrainer
to look the part. Expected: refused, helpers.train named."""
import runpy
import sys

from trl import GRPOTrainer  # noqa: F401 - named, never trained

sys.argv = ["train", *sys.argv[1:]]
runpy.run_module("helpers." + "train", run_name="__main__")
