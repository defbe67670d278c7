"""rlwatch: the headless core. Sources -> events/state -> diagnosis, report, exporter, watchdog.

This package never imports Textual; the dashboard lives in the ``tui`` and ``widgets`` packages.
"""

__version__ = "0.1.0"
