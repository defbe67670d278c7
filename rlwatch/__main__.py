"""`python -m rlwatch`: everything the `rlwatch` command does, the dashboard included (Textual is imported only
when a dashboard command runs)."""

import sys

from rlwatch.tui.launch import main

sys.exit(main())
