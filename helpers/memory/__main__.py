"""`python -m helpers.memory --preset t4`: the memory prediction's command line (helpers/memory/cli.py)."""

import sys

from helpers.memory.cli import main

sys.exit(main())
