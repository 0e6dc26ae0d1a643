"""`python -m helpers.memory --preset t4`: the memory prediction's command line (helpers.memory.main)."""

import sys

from helpers.memory import main

sys.exit(main())
