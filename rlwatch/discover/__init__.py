"""Finding the run: zero-config discovery, loading ``rlwatch.yaml`` (and describing and writing one), whether a
server is expected, and the training knobs worth showing."""
