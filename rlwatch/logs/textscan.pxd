# The C meaning of textscan.py's names, for the rule modules Cython compiles from their .py text: each cimports this
# module (``from rlwatch.logs cimport textscan``) where its .py imports it, and calls ``textscan.find_char(...)``:
# str's methods where nothing is compiled, these where it is. Inline C functions over CPython's own search and
# substring, or a loop over the characters where that is shorter than the call: the bounds are C integers, no Python
# int is made per call. The .py is never compiled; only this file is read, by the modules that cimport it.
from cpython.unicode cimport (
    Py_UNICODE_ISDECIMAL, Py_UNICODE_ISPRINTABLE, PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ
)

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_Find(object text, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_FindChar(object text, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_Tailmatch(object text, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -1
    str PyUnicode_Substring(object text, Py_ssize_t start, Py_ssize_t end)
    const Py_ssize_t PY_SSIZE_T_MAX
    bint PyUnicode_IS_ASCII(object o)


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


cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Every byte of ASCII text in 0x20..0x7e, eight at a time: a byte below 0x20, or one equal to 0x7f (the only
       one above 0x7e in ASCII), sets its high bit in lt or eq (exact as an answer for bytes below 0x80). */
    static int rlw_ascii_printable(const unsigned char *p, Py_ssize_t n) {
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        Py_ssize_t i = 0;
        uint64_t x, y;
        for (; i + 8 <= n; i += 8) {
            memcpy(&x, p + i, 8);
            y = x ^ (ones * 0x7f);
            if ((((x - ones * 0x20) & ~x) | ((y - ones) & ~y)) & highs)
                return 0;
        }
        for (; i < n; i++)
            if (p[i] < 32 || p[i] > 126)
                return 0;
        return 1;
    }
    """
    bint rlw_ascii_printable(const unsigned char *p, Py_ssize_t n) noexcept nogil


cdef inline bint isprintable(str t) except -1:
    # str.isprintable without a call: ASCII text eight bytes at a time (printable: 0x20 to 0x7e), any other text a
    # character at a time, ASCII and box drawing (AReaL's stats tables) before CPython's table is asked
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(t)
    cdef int kind
    cdef void *data = PyUnicode_DATA(t)
    cdef Py_UCS4 c
    if PyUnicode_IS_ASCII(t):
        return rlw_ascii_printable(<const unsigned char *>data, n)
    kind = PyUnicode_KIND(t)
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if 32 <= c <= 126 or 0x2500 <= c <= 0x257F:
            continue
        if not Py_UNICODE_ISPRINTABLE(c):
            return False
    return True
