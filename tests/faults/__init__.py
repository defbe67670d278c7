"""The fault-injection suite: every fault rlwatch must survive, injected for real, one table row each."""
