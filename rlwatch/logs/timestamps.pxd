# The C types Cython compiles rlwatch/logs/timestamps.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The compiled event path (_eventpath.pyx) cimports
# time_or_nan from here and calls it for every line it counts: the rule is written once, in the .py, and read by both
# paths. Its directives (no bounds or negative-index checks, C division) are in the .py's first line.
cimport cython
from libc.stdint cimport int64_t
# str.find with C bounds (the .py imports the same module: its calls are str's own methods interpreted)
from rlwatch.logs cimport textscan

cdef double _NAN
cdef tuple _LEVELS
cdef dict _minutes
cdef int64_t _last_key
cdef double _last_start
cdef Py_ssize_t _MINUTES_KEPT
cdef Py_ssize_t _SEARCH_CHARS
cdef double _FUTURE_SLACK_S
cdef double _year_for
cdef int64_t _year_value
cdef bint _year_ok


@cython.locals(key=int64_t, got=object, start=object)
cdef double _local_minute(int64_t year, int64_t month, int64_t day, int64_t hour, int64_t minute) except? -1.5

cdef bint _leap(int64_t year) noexcept
cdef int64_t _days_in_month(int64_t year, int64_t month) noexcept
cdef bint _valid(int64_t year, int64_t month, int64_t day, int64_t hour, int64_t minute) noexcept

@cython.locals(before=int64_t, days=int64_t, m=int64_t)
cdef int64_t _ordinal(int64_t year, int64_t month, int64_t day) noexcept

@cython.locals(stamp=double, scale=double)
cdef double _in_minute(double start, int64_t second, int64_t frac, int frac_len) noexcept

@cython.locals(month=int64_t, day=int64_t, hour=int64_t, minute=int64_t, second=int64_t, frac=int64_t, stamp=double)
cdef double _yearless(str text, Py_ssize_t h, Py_ssize_t month_at, int frac_len, double now) except? -1.5

@cython.locals(start=double)
cdef double _dated(str text, Py_ssize_t year_at, Py_ssize_t month_at, Py_ssize_t h, int frac_len) except? -1.5

cdef inline bint _is_nan(double x) noexcept
cdef inline bint _digit(Py_UCS4 c) noexcept
cdef inline bint _space(Py_UCS4 c) noexcept
cdef inline bint _word(Py_UCS4 c) noexcept

@cython.locals(k=Py_ssize_t)
cdef inline bint _digits(str text, Py_ssize_t i, Py_ssize_t n, Py_ssize_t end) noexcept

@cython.locals(k=Py_ssize_t, value=int64_t)
cdef inline int64_t _num(str text, Py_ssize_t i, Py_ssize_t n) noexcept
cdef inline int64_t _two(str text, Py_ssize_t i) noexcept

cdef inline bint _digit_after(str text, Py_ssize_t i, Py_ssize_t end) noexcept

@cython.locals(c=Py_UCS4, run=Py_ssize_t)
cdef inline int _fraction(str text, Py_ssize_t p, Py_ssize_t end, bint comma, int most) noexcept

@cython.locals(colon=Py_ssize_t)
cpdef Py_ssize_t find_hms(str text, Py_ssize_t lo, Py_ssize_t hi) except? -2

@cython.locals(s=Py_ssize_t, i=Py_ssize_t, run=Py_ssize_t, zone=Py_ssize_t, c=Py_UCS4)
cdef Py_ssize_t _rfc3339_zone(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) noexcept

@cython.locals(s=Py_ssize_t, year=int64_t, month=int64_t, day=int64_t, hour=int64_t, minute=int64_t,
               offset=int64_t, minutes_at=Py_ssize_t, start=int64_t, frac_len=int)
cdef double _rfc3339(str text, Py_ssize_t h, Py_ssize_t zone) noexcept

@cython.locals(s=Py_ssize_t)
cdef int _areal(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) noexcept

@cython.locals(s=Py_ssize_t)
cdef int _iso(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) noexcept

@cython.locals(s=Py_ssize_t)
cdef bint _ymd_slash(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) noexcept

@cython.locals(i=Py_ssize_t, spaces=Py_ssize_t, s=Py_ssize_t, level=str)
cdef int _vllm(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) except? -2

@cython.locals(s=Py_ssize_t, c=Py_UCS4)
cdef int _glog(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) noexcept

@cython.locals(s=Py_ssize_t)
cdef bint _md_slash(str text, Py_ssize_t h, Py_ssize_t lo, Py_ssize_t end) noexcept

cdef inline Py_ssize_t _next_clock(str text, Py_ssize_t h, Py_ssize_t first, Py_ssize_t second,
                                   Py_ssize_t hi) except? -2

@cython.locals(n=Py_ssize_t, first=Py_ssize_t, second=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t, end=Py_ssize_t,
               h=Py_ssize_t, zone=Py_ssize_t, frac_len=int)
cpdef double time_or_nan(str text, double now) except? -1.5
