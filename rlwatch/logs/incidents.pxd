# The C types Cython compiles rlwatch/logs/incidents.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The compiled event path (_eventpath.pyx) cimports
# _Record from here: its records are this class, their fields C ones it sets and reads directly, stretch and freeze
# called at C speed. The rest of the module (the tracker the Python event path feeds) is compiled as Python.
cimport cython
from libc.stdint cimport int64_t


@cython.final
cdef class _Record:
    cdef public str kind
    cdef public str path
    cdef public int64_t lineno
    cdef public double first
    cdef public double last
    cdef public int64_t count
    cdef public str title
    cdef public object location
    cdef public str signature
    cdef public double hi
    cdef public bint approximate
    cdef public object position
    cdef public bint first_exact
    cdef public object rank
    cdef public int64_t last_line
    cdef public object root_cause
    cdef public tuple victims
    cdef public object cause
    cdef public object collective
    cdef public str storm_label

    cpdef void stretch(self, double t, double by, bint has_by, int64_t lineno) noexcept
    cpdef object freeze(self)
