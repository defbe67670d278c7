"""`python -m rlwatch`: the headless commands."""

import sys

from rlwatch.cli import main

sys.exit(main())
