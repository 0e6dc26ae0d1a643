"""Helpers for the GRPO course kit: every notebook calls into this package.

One module per job: runtime (what machine is this), prompts (the answer format), data (questions),
rewards (scoring completions), model (load + generate), training (presets -> GRPOConfig),
evaluation (accuracy before/after), train (the command-line job).
"""

__version__ = "0.1.0"
