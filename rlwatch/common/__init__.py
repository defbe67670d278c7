"""Small pieces every layer uses: the clock, numbers, terminal-safe text, heap release, rlwatch's own state
files, and the snapshot records (``state``) that flow from the sources to every view."""
