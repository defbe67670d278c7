# The C types Cython compiles rlwatch/logs/prefixes.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The compiled event path (_eventpath.pyx) cimports
# split_at and Split from here and calls it at C speed on every line it decodes: the rule is written once, in the
# .py, and read by both paths. A character is a Py_UCS4 (a C integer compared with one-character literals), an
# index a Py_ssize_t; positions are returned as C integers, -1 for no match (-2, never returned, marks an error).
cimport cython
# str's bounded searches with C bounds (the .py imports the same module)
from rlwatch.logs cimport textscan

cdef str _RANK, _RAYLET, _AUTOSCALER
cdef tuple _STREAMS, _LEVELS
cdef Py_ssize_t _ROLE_WIDTH, _MAX_PREFIXES, _COMPOSE_NAME_MAX


cdef class Split:
    cdef public str tag


cdef bint _digit(Py_UCS4 c) noexcept
cdef bint _alpha(Py_UCS4 c) noexcept
cdef bint _word(Py_UCS4 c) noexcept
cdef bint _space(Py_UCS4 c) noexcept
cdef bint _value(Py_UCS4 c) noexcept

@cython.locals(k=Py_ssize_t)
cdef Py_ssize_t _digits(str text, Py_ssize_t n, Py_ssize_t i, Py_ssize_t count) except -2

@cython.locals(i=Py_ssize_t)
cdef Py_ssize_t _rank_writer(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(i=Py_ssize_t, c=Py_UCS4)
cdef Py_ssize_t _role_writer(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(i=Py_ssize_t, close=Py_ssize_t, c=Py_UCS4, s=cython.uint, t=cython.uint)
cdef Py_ssize_t _kv_writer(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(i=Py_ssize_t)
cdef Py_ssize_t _ray_writer(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(e=Py_ssize_t)
cdef Py_ssize_t _writer(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(sep=Py_UCS4)
cdef Py_ssize_t _pairs(str text, Py_ssize_t n, Py_ssize_t i, str seps) except -2

@cython.locals(i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t, c=Py_UCS4, stream=str)
cdef Py_ssize_t _stamp(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(i=Py_ssize_t, j=Py_ssize_t, c=Py_UCS4, level=str)
cdef Py_ssize_t _record(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(i=Py_ssize_t, c=Py_UCS4)
cdef Py_ssize_t _compose(str text, Py_ssize_t n, Py_ssize_t pos) except -2

@cython.locals(first=Py_UCS4)
cdef inline bint _may_have_prefix(str text, Py_ssize_t n) except -1

@cython.locals(pos=Py_ssize_t, m=Py_ssize_t, stop=Py_ssize_t, _hop=Py_ssize_t, c=Py_UCS4, tag=str)
cdef Py_ssize_t _split(str text, Py_ssize_t n, Split out) except -1

@cython.locals(n=Py_ssize_t)
cpdef Py_ssize_t split_at(str text, Split out) except -1

@cython.locals(n=Py_ssize_t, pos=Py_ssize_t)
cpdef tuple split_prefix(str text)
