"""Actions that fix the host: stopping process trees, starting commands again, and recording every step.

Everything here can kill processes on machines that cost thousands an hour, so each module errs towards leaving a
process alone: a process is named by (pid, start time) and re-checked right before each signal (``identity``,
``signals``), some processes are never touched at all (``guard``), a stop escalates TERM → grace → KILL and then
reports what is left instead of retrying forever (``stopper``), starts are argv lists that never reach a shell
(``spawn``), and every step is appended to a JSON-lines audit log (``audit``).
"""
