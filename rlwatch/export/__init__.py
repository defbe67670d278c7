"""Views of snapshots that leave the process: the report, the ``watch --json`` stream, the Prometheus
exporter, the fleet view, notifications."""
