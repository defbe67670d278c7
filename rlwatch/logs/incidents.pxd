# The C types Cython compiles rlwatch/logs/incidents.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The compiled event path (_eventpath.pyx) cimports
# from here the incident rules it runs for each line and event: Grouper's methods, called at C speed with the file's
# FileIncidents (held in the counter's own per-file state) and a LineTime it subclasses to read a line's time from
# its chunk only when a rule asks for it; _Record, whose fields it reads. The Python tracker (IncidentTracker, compiled
# as Python) calls the same methods, so the rules are written once.
cimport cython
from libc.stdint cimport int64_t
# the traceback and report rules the incident rules call per line, at C speed (the .py imports the same names)
from rlwatch.logs.signatures cimport chain, exception, frame, header, location
from rlwatch.logs.torchrun_report cimport report_line
# str's bounded searches with C bounds (the .py imports the same module)
from rlwatch.logs cimport textscan

cdef int64_t _MAX_TALLIES, _NCCL_SAME_BURST, _STALL_LINES, _AFTER_LINES, _SILENT_LINES
cdef int _FRAMES, _AFTER, _CHAIN
cdef Py_ssize_t _STALE_MAX, _SIGNATURES_KEPT
cdef dict _signatures, _STORM_KINDS
cdef str _REFUSED
cdef str _RANK_PREFIX, _CHILD_FAILED
cdef int64_t _UNCOUNTED
cdef tuple _CRASH_KINDS


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


cdef class LineTime:
    cdef public object fn
    cdef public bint have
    cdef public double t
    cdef public double by
    cdef public bint has_by

    cpdef void compute(self) except *
    cpdef void get(self) except *


@cython.final
cdef class _Block:
    cdef public int64_t lineno
    cdef public double first_t
    cdef public double first_by
    cdef public bint first_has_by
    cdef public int64_t seen
    cdef public int64_t lines
    cdef public object location
    cdef public int state
    cdef public int64_t idle
    cdef public int64_t gap
    cdef public _Record record
    cdef public str exc_type
    cdef public str exc_msg
    cdef public object rank
    cdef public object report
    cdef public bint stale


# what reading frame lines in bulk does to a block, for both bulk readers (the event path's loop does the byte scans)
cdef bint in_frames(_Block block) noexcept
cdef int64_t stall_room(_Block block) noexcept
cdef void frames_read(_Block block, int64_t n, str where, int64_t idle_after, int64_t lineno) noexcept
cdef bint between_read(_Block block, int64_t n, bint chained, int64_t lineno) noexcept


@cython.final
cdef class _Storm:
    cdef double[::1] times
    cdef long long[::1] lines
    cdef int cap
    cdef int head
    cdef int size
    cdef _Record record


@cython.final
cdef class FileIncidents:
    cdef public str path
    cdef public str base
    cdef public dict blocks
    cdef public _Storm storm_refused
    cdef public _Storm storm_timeout
    cdef public _Record crash
    cdef public object step


@cython.locals(rec=_Record)
cdef _Record _record(str kind, str path, int64_t lineno, double t, double by, bint has_by, int64_t count, str title,
                     str sig)
@cython.locals(block=_Block)
cdef _Block _block(int64_t lineno, double t, double by, bint has_by, object rank)
cdef double _gap(double a, double b) noexcept
cdef bint _step_word(Py_UCS4 c) noexcept


@cython.locals(n=Py_ssize_t, lo=Py_ssize_t, up=Py_ssize_t, p=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t,
               d=Py_ssize_t)
cpdef str step_number(str text)
cdef str _signature(tuple parts)


@cython.final
cdef class Grouper:
    cdef public int storm_threshold
    cdef public double storm_window
    cdef public double crash_window
    cdef public Py_ssize_t max_incidents
    cdef public object records
    cdef public dict tallies
    cdef public dict files
    cdef public dict open_paths
    cdef public dict timeouts
    cdef public list stale

    cpdef FileIncidents file(self, str path)
    cdef _Record _new(self, str kind, FileIncidents fi, int64_t lineno, double t, double by, bint has_by,
                      int64_t count, str title, str sig)
    cdef void _drop(self, _Record rec) except *
    @cython.locals(rank=object)
    cdef void _open(self, FileIncidents fi, str tag, int64_t lineno, LineTime w) except *
    cdef void _close(self, FileIncidents fi, str tag) except *
    @cython.locals(blocks=dict, block=_Block)
    cdef void _expire(self, FileIncidents fi, str tag, int64_t lineno) except *
    @cython.locals(blocks=dict, block=_Block)
    cpdef void expire_over(self, FileIncidents fi, int64_t first, int64_t last) except *
    @cython.locals(block=_Block, k=Py_ssize_t, c=Py_UCS4)
    cpdef void take(self, FileIncidents fi, str tag, str body, int64_t lineno, LineTime w) except *
    @cython.locals(found=tuple, exc=tuple, n=Py_ssize_t)
    cdef void _in_frames(self, FileIncidents fi, str tag, _Block block, str body, int64_t lineno, LineTime w) except *
    @cython.locals(rec=_Record)
    cdef void _after(self, FileIncidents fi, str tag, _Block block, str body, int64_t lineno, LineTime w) except *
    @cython.locals(rec=_Record)
    cdef void _settle(self, _Block block) except *
    @cython.locals(stale=list)
    cpdef void settle_all(self) except *
    @cython.locals(rec=_Record)
    cdef void _publish(self, FileIncidents fi, _Block block, LineTime w, int64_t lineno) except *
    @cython.locals(message=str, victims=tuple, parts=list)
    cdef void _made(self, _Block block, _Record rec, object where) except *
    cpdef void event(self, FileIncidents fi, str kind, int64_t lineno, double t, double by, bint has_by,
                     str text) except *
    @cython.locals(refused=bint, storm=_Storm, last=int, rec=_Record, sig=str)
    cdef void _storm(self, FileIncidents fi, str kind, int64_t lineno, double t, double by, bint has_by) except *
    @cython.locals(rec=_Record, title=str)
    cdef void _crash(self, FileIncidents fi, str kind, int64_t lineno, double t, double by, bint has_by,
                     str text) except *
    @cython.locals(rec=_Record)
    cdef void _timeout(self, FileIncidents fi, int64_t lineno, double t, double by, bint has_by, str text) except *
    cpdef tuple incidents(self)
    cpdef tuple dropped(self)
    @cython.locals(rec=_Record, best=_Record)
    cdef object _cause_of(self, _Record failure)
