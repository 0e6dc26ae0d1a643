"""The run's wing: everything between the setup cell (or `python -m helpers.train`) and the results. pipeline.py is
the named steps; guard.py, folder.py and options.py are what the first step decides; trl_patches.py, metrics.py,
dashboard.py and checkpoints.py are attached to TRL's trainer; extensions.py is where the lab (lab/: each step's
phases, several processes) plugs in. Importing this package imports none of them."""
