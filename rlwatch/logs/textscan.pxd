# The C meaning of textscan.py's names, for the rule modules Cython compiles from their .py text: each cimports this
# module (``from rlwatch.logs cimport textscan``) where its .py imports it, and calls ``textscan.find_char(...)``:
# str's methods where nothing is compiled, these where it is.
# Inline C functions over CPython's own search, the bounds C integers: no Python int made per call. The .py is never
# compiled; only this file is read, by the modules that cimport it.

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_Find(object text, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_FindChar(object text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_Tailmatch(object text, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -1
    const Py_ssize_t PY_SSIZE_T_MAX


cdef inline Py_ssize_t find(str text, str sub, Py_ssize_t start, Py_ssize_t end) except -2:
    return PyUnicode_Find(text, sub, start, end, 1)


cdef inline Py_ssize_t find_char(str text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end) except -2:
    return PyUnicode_FindChar(text, ch, start, end, 1)


cdef inline Py_ssize_t rfind_char(str text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end) except -2:
    return PyUnicode_FindChar(text, ch, start, end, -1)


cdef inline bint startswith(str text, str prefix, Py_ssize_t start) except -1:
    return PyUnicode_Tailmatch(text, prefix, start, PY_SSIZE_T_MAX, -1)
