"""Finding the run: zero-config discovery, loading ``rlwatch.yaml``, whether a server is expected, and the
training knobs worth showing."""
