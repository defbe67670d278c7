# The C types Cython compiles rlwatch/logs/areal_lines.py with (setup.py builds it as an extension where a C compiler
# and Cython are found; elsewhere the same .py runs as it is). The trackers call training_apply and LearningFeed for
# every line the counter delivers them: compiled, the text of a line is read as C characters and the tracker's
# deduplication is a C call, so the rule is written once, in the .py, at the speed of the hand-written C it replaced.
cimport cython
# str's bounded searches with C bounds (the .py imports the same module)
from rlwatch.logs cimport textscan

cdef str _TRAIN_STEP, _STEP_DONE, _AREAL_DONE, _DISK_UPDATE, _UPDATE_WEIGHTS, _REWARD, _REWARD_BEST, _REWARD_ROLLOUT
cdef str _VERL_STEP, _METRIC_DICT, _ORDINAL_POSTFIX, _LIGHT, _HEAVY, _PLAIN
cdef tuple _FINISHED, _OTHER_FORMATS, _REWARD_ROLLOUT_ENDINGS, _SUFFIXES
cdef str _G_TRAIN_STEP, _G_AREAL_DONE, _G_DISK_UPDATE, _G_VERL_STEP, _G_METRIC_DICT, _G_ORDINAL_POSTFIX
cdef tuple _G_FINISHED, _G_OTHER_FORMATS


@cython.final  # add is then a C call, with no look for an override
cdef class Recent:
    cdef readonly object keys
    cdef readonly Py_ssize_t size
    cdef readonly bint refresh

    @cython.locals(keys=object)
    cpdef bint add(self, object key) except -1


cdef class LearningFeed:
    cdef readonly object t
    cdef readonly object lock


@cython.locals(c=Py_UCS4)
cdef Py_ssize_t _digits(str text, Py_ssize_t i, Py_ssize_t n) noexcept

@cython.locals(n=Py_ssize_t, k=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, i=Py_ssize_t)
cpdef tuple parse_areal_step(str text)

@cython.locals(n=Py_ssize_t, k=Py_ssize_t, a=Py_ssize_t, i=Py_ssize_t, f=Py_ssize_t, c=Py_UCS4)
cpdef object parse_weight_update(str text)

cpdef int reward_rank(str key) except -1

cdef str _table_bar(str text, Py_ssize_t light)

cdef bint _has(str needle, str gate, str text) except -1

@cython.locals(i=Py_ssize_t)
cdef bint _any_in(tuple needles, tuple gates, str text) except -1

@cython.locals(m=Py_ssize_t, suffix=str, last=Py_UCS4)
cdef bint _suffixed(str text, Py_ssize_t a, Py_ssize_t b) except -1

@cython.locals(c=Py_UCS4)
cdef Py_ssize_t _lstrip(str text, Py_ssize_t a, Py_ssize_t b) except -1

@cython.locals(c=Py_UCS4)
cdef Py_ssize_t _rstrip(str text, Py_ssize_t a, Py_ssize_t b) except -1

@cython.locals(bar=str, bar_c=Py_UCS4, n=Py_ssize_t, out=dict, a=Py_ssize_t, b=Py_ssize_t, c=Py_ssize_t, key=str)
cpdef dict parse_stats_row(str text)

cdef bint _finite(double x) noexcept

@cython.locals(m=double)
cpdef touch(object t, double time, double offset)

@cython.locals(m=double)
cpdef mark_step(object t, double time, object counter, double offset)

cpdef record_reward(object t, object slot, int rank, double value)

cpdef training_apply(object t, double offset)

@cython.locals(text=str, delivered=Recent, contents=Recent, time=double, step=tuple, bar=str, timing=bint,
               light=Py_ssize_t)
cdef _training_line(object t, object line, double offset)

cdef _areal_step(object t, object line, object step, object total, double offset)

@cython.locals(row=dict, bar_c=Py_UCS4, n=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, c=Py_ssize_t, key=str, value=double,
               rank=int, contents=Recent)
cdef _tracked_stats(object t, str text, str bar, bint timing)

@cython.locals(text=str, areal=tuple)
cdef _learning_line(object t, object line)

@cython.locals(bar=str, bar_c=Py_UCS4, n=Py_ssize_t, values=dict, found=dict, a=Py_ssize_t, b=Py_ssize_t,
               c=Py_ssize_t, ka=Py_ssize_t, kb=Py_ssize_t, va=Py_ssize_t, key=str, contents=Recent)
cpdef learning_row(object t, object line, str text)

@cython.locals(m=Py_ssize_t, n=Py_ssize_t, suffix=str, key=str)
cdef str _first_key(dict values, tuple suffixes)

@cython.locals(when=double)
cpdef learning_record(object t, object step, dict found, double time)
