"""The run's wing: everything between the setup cell (or `python -m helpers.train`) and the results. pipeline.py is
the named steps; guard.py, folder.py and options.py are what the first step decides; trl_patches.py, step_timing.py,
metrics.py, dashboard.py, checkpoints.py and distributed.py are attached to TRL's trainer. Importing this package
imports none of them."""
