"""From a log file to counted events: the tailer and its waker, line prefixes, event kinds and their matcher,
timestamps, the event counter, incidents (tracebacks, storms, torchrun failures) and the training tracker."""
