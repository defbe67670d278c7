# The C meaning of textscan.py's names, for the rule modules Cython compiles from their .py text: each cimports this
# module (``from rlwatch.logs cimport textscan``) where its .py imports it, and calls ``textscan.find_char(...)``:
# str's methods where nothing is compiled, these where it is. Inline C functions over CPython's own search and
# substring, or a loop over the characters where that is shorter than the call: the bounds are C integers, no Python
# int is made per call. The .py is never compiled; only this file is read, by the modules that cimport it.
from cpython.unicode cimport Py_UNICODE_ISDECIMAL, PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_Find(object text, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_FindChar(object text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_Tailmatch(object text, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -1
    str PyUnicode_Substring(object text, Py_ssize_t start, Py_ssize_t end)
    const Py_ssize_t PY_SSIZE_T_MAX


cdef inline Py_ssize_t find(str text, str sub, Py_ssize_t start, Py_ssize_t end) except -2:
    return PyUnicode_Find(text, sub, start, end, 1)


cdef inline Py_ssize_t find_char(str text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end) except -2:
    return PyUnicode_FindChar(text, ch, start, end, 1)


cdef inline Py_ssize_t rfind_char(str text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end) except -2:
    return PyUnicode_FindChar(text, ch, start, end, -1)


cdef inline bint startswith(str text, str prefix, Py_ssize_t start) except -1:
    # The prefixes are a few ASCII words: compared in place, one character at a time (PyUnicode_Tailmatch's checks
    # and memcmp cost more than the comparison); str.startswith's own answer where the prefix does not fit.
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(prefix), k
    if start < 0 or start + n > PyUnicode_GET_LENGTH(text):
        return PyUnicode_Tailmatch(text, prefix, start, PY_SSIZE_T_MAX, -1)
    cdef int tk = PyUnicode_KIND(text), pk = PyUnicode_KIND(prefix)
    cdef void *td = PyUnicode_DATA(text)
    cdef void *pd = PyUnicode_DATA(prefix)
    for k in range(n):
        if PyUnicode_READ(tk, td, start + k) != PyUnicode_READ(pk, pd, k):
            return False
    return True


cdef inline str cut(str text, Py_ssize_t start, Py_ssize_t end):
    # CPython's own substring: an ASCII text's part is made without looking for its widest character again (Cython's
    # slice goes through PyUnicode_FromKindAndData, which does), and the whole text is the text itself.
    return PyUnicode_Substring(text, start, end)


cdef inline bint isdecimal(Py_UCS4 c) noexcept:
    # re's \d: an ASCII digit compared, any other character asked (the call is in CPython's tables)
    if c < 128:
        return 48 <= c <= 57
    return Py_UNICODE_ISDECIMAL(c)
