# The C types Cython compiles rlwatch/logs/torchrun_report.py with (setup.py builds it as an extension where a C
# compiler and Cython are found; elsewhere the same .py runs as it is). The compiled event path
# (_eventpath.pyx) cimports report_line from here and calls it at C speed for each line after a ChildFailedError:
# the rule is written once, in the .py, and read by both paths.
cimport cython


@cython.locals(text=str, stripped=str)
cpdef bint report_line(object report, str body) except -1
