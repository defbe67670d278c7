# The C types Cython compiles rlwatch/logs/signatures.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The compiled event path (_eventpath.pyx) cimports the
# line rules from here and calls them at C speed: a header on every line that can be an event, frames and chain
# messages on every line of an open traceback. Characters are Py_UCS4, so the .py's one-character comparisons
# compile to integer ones, and indices are C integers over the str.
cimport cython
# str's bounded searches with C bounds (the .py imports the same module)
from rlwatch.logs cimport textscan

cdef str _TB_HEADER, _FRAME_FILE, _FRAME_LINE, _CHAIN_CONTEXT, _CHAIN_CAUSE
cdef tuple _EXCEPTION_ENDINGS
cdef Py_UCS4 _TB_END, _FRAME_FIRST, _CONTEXT_FIRST, _CAUSE_FIRST
cdef Py_ssize_t _TB_HEADER_N, _FRAME_FILE_N, _FRAME_LINE_N, _CHAIN_CONTEXT_N, _CHAIN_CAUSE_N


@cython.locals(n=Py_ssize_t)
cdef inline bint _space_end(str text, Py_ssize_t i) except -1


@cython.locals(n=Py_ssize_t)
cdef inline Py_ssize_t _skip_space(str text, Py_ssize_t i) except -1


@cython.locals(e=Py_ssize_t, n=Py_ssize_t)
cpdef bint header(str body) except -1


@cython.locals(i=Py_ssize_t, c=Py_UCS4)
cpdef bint chain(str body) except -1


@cython.locals(i=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, c=Py_ssize_t, n=Py_ssize_t)
cpdef tuple frame(str body)


@cython.locals(base=str, n=Py_ssize_t)
cpdef str location(str file, str line)


cdef inline bint _ident_start(Py_UCS4 c) noexcept


cdef inline bint _word(Py_UCS4 c) noexcept


@cython.locals(n=Py_ssize_t, i=Py_ssize_t, last_start=Py_ssize_t, name_end=Py_ssize_t, k=Py_ssize_t, last=str,
               message=str)
cpdef tuple exception(str line)
