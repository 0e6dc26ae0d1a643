import os

# Same as helpers/__init__.py, for test modules that import torch before helpers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
