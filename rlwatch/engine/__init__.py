"""The engine: sources and logs in, an immutable :class:`~rlwatch.common.state.Snapshot` out, with its
diagnosis and forecasts; the small feed interface the dashboard reads."""
