"""Reusable Textual widgets of the rlwatch dashboard: graphs, panels and the log view."""
