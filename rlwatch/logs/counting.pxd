# The C types Cython compiles rlwatch/logs/counting.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The compiled event path (_eventpath.pyx) cimports the
# counting state and rules from here: its calls into Counts and its reads of the state's fields are C ones, and the
# Python counter (events.PyEventCounter) imports the same classes, so the counting is written once.
cimport cython
from libc.stdint cimport int64_t
from rlwatch.logs cimport textscan
from rlwatch.logs.incidents cimport FileIncidents, Grouper, step_number
from rlwatch.logs.timestamps cimport time_or_nan

cdef double _INF, _NAN
cdef Py_ssize_t _SHOWN_CAP
cdef object _LOG_LINE_NEW, _LL_PATH, _LL_LINENO, _LL_TEXT, _LL_TIME

ctypedef object (*LineMaker)(str, int64_t, str, double)

@cython.locals(line=object)
cdef object _log_line(str path, int64_t lineno, str text, double time)
cdef object _finite(double t)
cpdef str shown(str text)
cpdef double undated_time(double earlier, bint has_earlier, bint backlog, double before, bint has_before,
                          double now) noexcept
cpdef double upper_bound(double t, double by) noexcept


@cython.final
cdef class LongLine:
    cdef public int64_t lineno
    cdef public bytes head
    cdef public bytes tail
    cdef public set seen
    cdef public bint has_span
    cdef public double span_t
    cdef public double span_by
    cdef public bint span_has_by


@cython.locals(long=LongLine)
cpdef LongLine long_line(int64_t lineno)


@cython.final
cdef class FileKind:
    cdef public int64_t files
    cdef public bint has_files
    cdef public int64_t streak
    cdef public bint has_streak
    cdef public bint has_last
    cdef public double last_lo
    cdef public double last_hi
    cdef public bint last_placed
    cdef public int64_t last_lineno
    cdef public object last_step


@cython.locals(fk=FileKind)
cdef FileKind _file_kind()


@cython.final
cdef class FileState:
    cdef public str path
    cdef public str base
    cdef public int64_t banners
    cdef public LongLine long
    cdef public bint has_stamp
    cdef public double stamp
    cdef public int64_t progress_lines
    cdef public list streaking
    cdef public list kinds
    cdef public FileIncidents inc


@cython.final
cdef class KindStats:
    cdef public object kind
    cdef public str name
    cdef public bint progress
    cdef public bint internal
    cdef public bint event
    cdef public list subs
    cdef public int64_t count
    cdef public double first_lo
    cdef public double first_hi
    cdef public bint approximate
    cdef public list file_order
    cdef public list streak_order
    cdef public dict buckets
    cdef list ring_path
    cdef list ring_text
    cdef list ring_line
    cdef long long[::1] ring_lineno
    cdef double[::1] ring_time
    cdef int ring_cap
    cdef int ring_head
    cdef int ring_size

    @cython.locals(i=int)
    cpdef void remember(self, str path, int64_t lineno, str text, double own) except *
    @cython.locals(out=list, k=int, i=int, line=object, path=str, text=str)
    cpdef tuple recent(self)


@cython.locals(st=KindStats)
cdef KindStats _kind_stats(object kind, int cap)


@cython.final
cdef class Counts:
    cdef public Grouper g
    cdef LineMaker make_line
    cdef public int recent_lines
    cdef public double window
    cdef public list stats
    cdef public int nk
    cdef public dict index
    cdef public dict files
    cdef public object errors
    cdef public list tag_sink
    cdef public int64_t tag_keep
    cdef public int64_t tag_from
    cdef public list redrawn
    cdef public int banner
    cdef public int restart

    cpdef void chunk(self, int64_t first_lineno, int64_t nlines) except *
    @cython.locals(fs=FileState)
    cpdef FileState file(self, str path)
    @cython.locals(st=KindStats, fk=FileKind, other=FileKind, digits=str, own=double, hi=double, lo=double,
                   second=int64_t, line=object, callback=object)
    cpdef void count(self, int i, FileState fs, int64_t lineno, double t, double by, bint has_by, str shown,
                     double now) except *
    cpdef bint restarts(self, FileState fs, bint restart_counted) except -1
    @cython.locals(long=LongLine)
    cpdef bint long_new(self, FileState fs, int i) except -1
    @cython.locals(long=LongLine)
    cpdef void count_long(self, int i, FileState fs, double t, double by, bint has_by, str shown,
                          double now) except *
    @cython.locals(long=LongLine, parsed=double, lo=double)
    cpdef void long_time(self, FileState fs, str head, double now, double by, bint has_by) except *
    cdef inline void _streak(self, KindStats st, FileState fs, FileKind fk, int64_t n) except *
    @cython.locals(st=KindStats, first_tag=int64_t)
    cpdef void bulk(self, int i, FileState fs, int64_t lineno, int64_t skipped) except *
    @cython.locals(floor=object)
    cpdef void prune(self, KindStats st, double now) except *
    @cython.locals(out=dict, i=int, st=KindStats, in_window=int64_t)
    cpdef dict summaries(self, double now)
    @cython.locals(best=int64_t, n=int64_t, fs=FileState)
    cdef int64_t _max_streak(self, int i, KindStats st) except? -1
    @cython.locals(latest=FileKind, latest_fs=FileState, fk=FileKind, fs=FileState, last_lo=double, last_hi=double,
                   where=str)
    cdef tuple _bounds(self, int i, KindStats st)
    @cython.locals(fs=FileState, n=int64_t, out=dict)
    cpdef dict streaks(self, str kind)
