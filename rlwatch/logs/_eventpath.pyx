# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: nonecheck=False, embedsignature=False, binding=False
"""The event path, compiled: what rlwatch does with each line that can be an event, in one pass over a chunk.

Still a second implementation of ``rlwatch.logs.events`` (the counter). The Python module is the reference and the
fallback (``RLWATCH_NATIVE=0``, or no compiler at install): ``tests/logs/test_native_equivalence.py`` feeds both the
same chunks (real logs, random and hostile ones, cut anywhere) and compares every answer.

The per-line rules are written once, in their own .py, compiled by Cython from that text (setup.py's ``COMPILED``,
the C types in the .pxd beside each) and cimported here: a line's writer prefixes (``prefixes``), the time a line
says (``timestamps``), a traceback's header, frames and exception line (``signatures``), the incident rules and
their records (``incidents.Grouper``: traceback blocks, storms, crashes, NCCL timeouts, each file's state in a
``FileIncidents`` this counter keeps in its own per-file state, a line's time asked through ``CoreTime``), the
trackers' AReaL lines (``areal_lines``), torchrun's report (``torchrun_report``) and the counting itself
(``counting.Counts``: each kind's and file's state, what a counted line changes in it, a bar's redraws counted in
bulk, summaries and streaks). What stays here is how a line is found and read: the needle search, line arithmetic,
decoding and colour codes, the kinds' match decisions, a bar's redraws and a traceback's frames recognised in bulk.

Where the cut is: everything per line runs in C (the needle search over the chunk's bytes, line numbers, decoding,
colour codes, which kinds match, code-line exclusion, counts, times, streaks, rates, evidence, traceback blocks,
storms, crashes). What stays in Python is called per chunk or on a rare line: the kinds' own regular expressions
where they are more than literals, NCCL timeouts, an incident's signature the first time it is seen, local-time
conversion of a minute not seen before.

What other programs print (a traceback's header, torchrun's report words) is not written here: it is read when the
module loads from ``rlwatch.logs.wording``, the table the Python rules read too.
"""

from cpython.unicode cimport PyUnicode_KIND, PyUnicode_DATA, PyUnicode_GET_LENGTH
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from libc.string cimport memchr, memcmp, memcpy
from libc.math cimport NAN, isnan
from libc.stdint cimport uint64_t, uint32_t, uint16_t, uint8_t, int64_t

cdef extern from "Python.h" nogil:
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)
    bint Py_UNICODE_ISSPACE(Py_UCS4 ch)
    bint Py_UNICODE_ISALNUM(Py_UCS4 ch)
    bint Py_UNICODE_ISPRINTABLE(Py_UCS4 ch)

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object o, Py_ssize_t *size) except NULL
    bint PyUnicode_IS_ASCII(object o)
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    object PyUnicode_Substring(object s, Py_ssize_t start, Py_ssize_t end)
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end, int direction) except -2
    Py_ssize_t PyUnicode_Find(object s, object sub, Py_ssize_t start, Py_ssize_t end, int direction) except -2

cdef extern from *:
    """
    #include <string.h>
    static inline const char *rlw_memrchr(const char *s, int c, Py_ssize_t n) {
        return (const char *)memrchr(s, c, (size_t)n);
    }
    static inline const char *rlw_memmem(const char *h, Py_ssize_t hn, const char *n, Py_ssize_t nn) {
        return (const char *)memmem(h, (size_t)hn, n, (size_t)nn);
    }
    """
    const char *rlw_memrchr(const char *s, int c, Py_ssize_t n) nogil
    const char *rlw_memmem(const char *h, Py_ssize_t hn, const char *n, Py_ssize_t nn) nogil
    ctypedef unsigned int uc "Py_UCS4"


# ================================================================================================ text, as sre reads it
cdef struct U:
    int kind
    void *data
    Py_ssize_t n


cdef inline U uview(str s):
    cdef U u
    u.kind = PyUnicode_KIND(s)
    u.data = PyUnicode_DATA(s)
    u.n = PyUnicode_GET_LENGTH(s)
    return u


cdef inline uc at(U u, Py_ssize_t i) noexcept nogil:
    return PyUnicode_READ(u.kind, u.data, i)


# `re` on str patterns without re.ASCII: \s is str.isspace, \d a decimal digit, \w alphanumeric or "_".
cdef inline bint uspace(uc c) noexcept nogil:
    return Py_UNICODE_ISSPACE(c)


cdef inline bint uword(uc c) noexcept nogil:
    if c < 128:
        return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95
    return Py_UNICODE_ISALNUM(c)


cdef inline bint starts_at(U u, Py_ssize_t pos, const char *lit, Py_ssize_t n) noexcept nogil:
    """text[pos:pos+n] == lit (an ASCII literal)."""
    cdef Py_ssize_t k
    if pos < 0 or pos + n > u.n:
        return False
    for k in range(n):
        if at(u, pos + k) != <uc>(<unsigned char>lit[k]):
            return False
    return True


cdef extern from *:
    """
    /* `lit in text[a:b]` for an ASCII literal, over the text's own representation */
    #define RLW_HAS(T) { const T *d = (const T *)data; \
        for (Py_ssize_t i = a; i + n <= b; i++) { if (d[i] == (unsigned char)lit[0]) { Py_ssize_t k = 1; \
            while (k < n && d[i + k] == (unsigned char)lit[k]) k++; if (k == n) return 1; } } return 0; }
    static int rlw_span_has(int kind, const void *data, Py_ssize_t a, Py_ssize_t b, const char *lit, Py_ssize_t n) {
        if (b - a < n) return 0;
        if (kind == 1) return memmem((const char *)data + a, (size_t)(b - a), lit, (size_t)n) != NULL;
        if (kind == 2) RLW_HAS(Py_UCS2)
        RLW_HAS(Py_UCS4)
    }
    """
    int rlw_span_has(int kind, const void *data, Py_ssize_t a, Py_ssize_t b, const char *lit,
                     Py_ssize_t n) noexcept nogil


cdef inline Py_ssize_t ufind(str hay, U u, str needle, Py_ssize_t start, int direction) except -2:
    """``PyUnicode_Find(hay, needle, start, len, direction)`` (CPython's own search measured quicker than memmem
    and than a loop over two-byte text, widening and all)."""
    return PyUnicode_Find(hay, needle, start, u.n, direction)


cdef inline bint ucontains(str hay, U u, str needle) except -1:
    """``needle in hay``: an ASCII needle in wide text is looked for in the text's own representation (CPython would
    first copy the needle into the text's width)."""
    if u.kind != 1 and PyUnicode_IS_ASCII(needle):
        return rlw_span_has(u.kind, u.data, 0, u.n, <const char *>PyUnicode_DATA(needle), PyUnicode_GET_LENGTH(needle))
    return PyUnicode_Find(hay, needle, 0, u.n, 1) >= 0


cdef inline bint all_space(U u, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(pos, end):
        if not uspace(at(u, k)):
            return False
    return True


cdef bint tail_is_ws_end(U u, Py_ssize_t pos) noexcept nogil:
    """``\\s*$`` matches at pos (``$``: the end, or before a final newline, which is a space anyway)."""
    return all_space(u, pos, u.n)


cdef str decode(const char *p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(p, n, "replace")


cdef extern from "Python.h":
    object PyUnicode_FromKindAndData(int kind, const void *buffer, Py_ssize_t size)


cdef str strip_sgr(str text):
    """``strip_ansi``: every ``ESC [ [0-9;]* m`` removed, nothing else."""
    cdef U u = uview(text)
    cdef const unsigned char *src
    cdef unsigned char *dst
    cdef bytearray buf
    cdef Py_ssize_t w, i, j, esc, start = 0
    cdef uc c
    cdef list keep
    if u.kind == 1:  # one byte a character: the runs between codes copied into a buffer (found by memchr)
        src = <const unsigned char *>u.data
        buf = None
        dst = NULL
        w = 0
        i = 0
        while i < u.n:
            j = find_byte(src, 27, i, u.n)
            if j < 0:
                break
            esc = j
            j += 1
            if j < u.n and src[j] == 91:
                j += 1
                while j < u.n and ((48 <= src[j] <= 57) or src[j] == 59):
                    j += 1
                if j < u.n and src[j] == 109:
                    if buf is None:
                        buf = bytearray(u.n)
                        dst = <unsigned char *>(<char *>buf)
                    memcpy(dst + w, src + start, <size_t>(esc - start))
                    w += esc - start
                    start = j + 1
                    i = j + 1
                    continue
            i = esc + 1
        if buf is None:
            return text
        memcpy(dst + w, src + start, <size_t>(u.n - start))
        w += u.n - start
        return PyUnicode_FromKindAndData(1, dst, w)
    keep = []
    i = 0
    while i < u.n:
        c = at(u, i)
        if c == 27 and i + 1 < u.n and at(u, i + 1) == 91:
            j = i + 2
            while j < u.n:
                c = at(u, j)
                if (48 <= c <= 57) or c == 59:
                    j += 1
                else:
                    break
            if j < u.n and at(u, j) == 109:
                if i > start:
                    keep.append((start, i))
                start = j + 1
                i = j + 1
                continue
        i += 1
    if start == 0:
        return text
    if start < u.n:
        keep.append((start, u.n))
    return "".join([PyUnicode_Substring(text, a, b) for a, b in keep])


cpdef str py_strip_ansi(str text):
    """For the tests: the compiled ``strip_ansi``."""
    if PyUnicode_FindChar(text, 27, 0, PyUnicode_GET_LENGTH(text), 1) < 0:
        return text
    return strip_sgr(text)


# ================================================================================================ framework wording
# What other programs print lives in rlwatch/logs/wording.py, the one table the Python rules read too: here each entry
# is held as its UTF-8 bytes (for the byte searches and the nogil matchers, ``Lit``) and as text.
from rlwatch.logs import wording

cdef struct Lit:
    const char *p
    Py_ssize_t n


cdef list _held = []  # the bytes each Lit points into, kept for the module's life


cdef Lit lit(str text) except *:
    cdef bytes b = text.encode("utf-8")
    cdef Lit out
    _held.append(b)
    out.p = PyBytes_AS_STRING(b)
    out.n = PyBytes_GET_SIZE(b)
    return out


DEF _MAX_LITS = 16


cdef int lits(object texts, Lit *out) except -1:
    """Fill out[] with the entries of a tuple of the table; how many."""
    cdef int k = 0
    if len(texts) > _MAX_LITS:
        raise ValueError(f"wording: more than {_MAX_LITS} alternatives in {texts!r}")
    for text in texts:
        out[k] = lit(text)
        k += 1
    return k


cdef inline bint starts_lit(U u, Py_ssize_t pos, Lit w) noexcept nogil:
    return starts_at(u, pos, w.p, w.n)


cdef Lit W_KEYWORDS[_MAX_LITS]
cdef int N_KEYWORDS = lits(wording.CODE_KEYWORDS, W_KEYWORDS)
cdef Lit W_TRACEBACK = lit(wording.TRACEBACK)
cdef Lit W_FRAME_FILE = lit(wording.FRAME_FILE)
cdef Lit W_CHAIN_CONTEXT = lit(wording.CHAIN_CONTEXT)
cdef Lit W_CHAIN_CAUSE = lit(wording.CHAIN_CAUSE)
cdef Lit W_EXCEPTION = lit(wording.EXCEPTION_WORD)


# ========================================================================================================= prefixes
# rlwatch/logs/prefixes.py, compiled from its own text (setup.py's COMPILED, its C types in prefixes.pxd): split_at
# writes a line's writer tag to the Split it is given and returns where the message starts. Out is that Split, with
# what the matchers find besides.
from rlwatch.logs.prefixes cimport Split, split_at


cdef class Out(Split):
    """What a matcher found besides its answer: a line's writer tag (``Split.tag``), a frame's file and line, a
    lowered body."""

    cdef str file
    cdef str line
    cdef str lowered
    cdef bint has_bits  # bits hold, for each string of the core's literal set, whether the body holds it
    cdef uint64_t bits[8]


# ======================================================================================================= timestamps
# rlwatch/logs/timestamps.py, compiled from its own text (setup.py's COMPILED, its C types in timestamps.pxd): the time
# a line says, NaN for none. Local time of a minute not seen before is datetime's, in Python, behind its minute cache.
from rlwatch.logs.timestamps cimport time_or_nan


# =================================================================================================== needle search
# Matcher.hits: the kinds' needles in a chunk's raw bytes. Every occurrence is found (as Hyperscan finds them, and as
# Matcher.hits finds them in Python): a two-byte anchor inside each needle, looked up in a table at every position,
# then the whole needle compared.

from libc.stdlib cimport malloc, calloc, free

# How common each printable byte is in training logs, per 100 000 (AReaL's calm and incident-dense benchmark logs
# and tests/real/**/*.log): a needle is looked for by its rarest byte, followed by the next one (its anchor).
cdef dict _FREQ = {
    " ": 7880, "!": 1, '"': 348, "#": 41, "$": 0, "%": 2, "&": 0, "'": 178, "(": 401, ")": 351, "*": 10, "+": 76,
    ",": 984, "-": 561, ".": 1284, "/": 1649, "0": 1668, "1": 2055, "2": 1237, "3": 1108, "4": 572, "5": 539,
    "6": 448, "7": 592, "8": 653, "9": 505, ":": 691, ";": 409, "<": 4, "=": 265, ">": 2, "?": 1, "@": 0, "A": 123,
    "B": 2, "C": 209, "D": 46, "E": 180, "F": 280, "G": 26, "H": 42, "I": 99, "J": 0, "K": 14, "L": 118, "M": 36,
    "N": 144, "O": 75, "P": 96, "Q": 1, "R": 245, "S": 69, "T": 159, "U": 24, "V": 1, "W": 31, "X": 1, "Y": 1, "Z": 0,
    "[": 641, "\\": 2, "]": 227, "^": 477, "_": 1089, "`": 0, "a": 2706, "b": 305, "c": 1834, "d": 749, "e": 3876,
    "f": 466, "g": 514, "h": 630, "i": 2200, "j": 8, "k": 482, "l": 1798, "m": 804, "n": 2543, "o": 2613, "p": 1625,
    "q": 124, "r": 2247, "s": 1720, "t": 2906, "u": 676, "v": 140, "w": 341, "x": 219, "y": 563, "z": 2, "{": 21,
    "|": 3, "}": 21, "~": 0,
}  # fmt: skip

cdef extern from *:
    """
    /* The set of bytes an anchor can begin with, for finding its next member 32 (or 16) bytes at a time: lo[l] holds
       bit h when the byte (h << 4 | l) is in the set (ASCII only, h < 8). The vector versions are compiled for the
       CPUs that have them and chosen at run time; everything else runs the byte table. */
    #include <stdint.h>
    typedef struct { uint8_t lo[16]; uint8_t byte[256]; int simd; } rlw_byteset;
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    #include <immintrin.h>
    /* The first 32-byte block from *pi on (whole, before end) that holds a member: its members as bits, *pi at its
       start; or 0, *pi at the first position the blocks did not reach. */
    __attribute__((target("avx2")))
    static uint32_t rlw_block_avx2(const rlw_byteset *s, const unsigned char *p, Py_ssize_t *pi, Py_ssize_t end) {
        const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)s->lo));
        const __m256i hi = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0, 0, 0,
                                            1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m256i nib = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256();
        Py_ssize_t i = *pi;
        for (; i + 32 <= end; i += 32) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
            __m256i a = _mm256_shuffle_epi8(lo, _mm256_and_si256(v, nib));
            __m256i b = _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
            uint32_t m = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(a, b), zero));
            if (m) { *pi = i; return m; }
        }
        *pi = i;
        return 0;
    }
    __attribute__((target("ssse3")))
    static uint32_t rlw_block_ssse3(const rlw_byteset *s, const unsigned char *p, Py_ssize_t *pi, Py_ssize_t end) {
        const __m128i lo = _mm_loadu_si128((const __m128i *)s->lo);
        const __m128i hi = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, (char)128, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m128i nib = _mm_set1_epi8(0x0f), zero = _mm_setzero_si128();
        Py_ssize_t i = *pi;
        for (; i + 16 <= end; i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i a = _mm_shuffle_epi8(lo, _mm_and_si128(v, nib));
            __m128i b = _mm_shuffle_epi8(hi, _mm_and_si128(_mm_srli_epi16(v, 4), nib));
            uint32_t m = (~(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(a, b), zero))) & 0xffff;
            if (m) { *pi = i; return m; }
        }
        *pi = i;
        return 0;
    }
    static int rlw_simd_level(void) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2")) return 2;
        if (__builtin_cpu_supports("ssse3")) return 1;
        return 0;
    }
    #else
    static int rlw_simd_level(void) { return 0; }
    #endif
    /* A walk over the members of p[lo:end] in order. A block's members are kept as bits and handed out one by one,
       so a text where every few bytes is a member (a traceback-dense log: one byte in six) costs one vector compare
       per block, not one per member found. */
    typedef struct { Py_ssize_t base; Py_ssize_t next; uint32_t m; } rlw_cursor;
    static inline void rlw_begin(rlw_cursor *c, Py_ssize_t lo) { c->base = lo; c->next = lo; c->m = 0; }
    /* The next member's position, or end. */
    static inline Py_ssize_t rlw_next(rlw_cursor *c, const rlw_byteset *s, const unsigned char *p, Py_ssize_t end) {
        Py_ssize_t i;
        if (c->m) {
            i = c->base + __builtin_ctz(c->m);
            c->m &= c->m - 1;
            return i;
        }
        i = c->next;
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (s->simd == 2 && i + 32 <= end) {
            c->m = rlw_block_avx2(s, p, &i, end);
        } else if (s->simd == 1 && i + 16 <= end) {
            c->m = rlw_block_ssse3(s, p, &i, end);
        }
        if (c->m) {
            c->base = i;
            c->next = i + (s->simd == 2 ? 32 : 16);
            i += __builtin_ctz(c->m);
            c->m &= c->m - 1;
            return i;
        }
    #endif
        for (; i < end; i++) {
            if (s->byte[p[i]]) {
                c->next = i + 1;
                return i;
            }
        }
        c->next = end;
        return end;
    }
    """
    ctypedef struct rlw_byteset:
        uint8_t lo[16]
        uint8_t byte[256]
        int simd
    ctypedef struct rlw_cursor:
        pass
    void rlw_begin(rlw_cursor *c, Py_ssize_t lo) noexcept nogil
    Py_ssize_t rlw_next(rlw_cursor *c, const rlw_byteset *s, const unsigned char *p, Py_ssize_t end) noexcept nogil
    int rlw_simd_level() noexcept nogil


cdef int _SIMD = rlw_simd_level()


def simd_level():
    """Which needle search runs here: 2 AVX2, 1 SSSE3, 0 a byte table (for the tests and the benchmarks)."""
    return _SIMD


cdef inline bint same(const unsigned char *at, const char *needle, Py_ssize_t n) noexcept nogil:
    """Whether the n bytes at ``at`` are the needle's. Most places an anchor's two bytes lead to are not the needle
    (the ", " of "loss, " in every list a log prints), and its last byte tells most of them apart without a call."""
    return at[n - 1] == <unsigned char>needle[n - 1] and at[0] == <unsigned char>needle[0] and memcmp(at, needle, n) == 0


cdef class Needles:
    """The needle set of one matcher: each needle's bytes, the kinds it points to (a bit set), its anchor."""

    cdef uint16_t *table  # bigram -> bucket + 1 (0: none)
    cdef int *bucket_start
    cdef int *bucket_len
    cdef int *entry_needle
    cdef int *entry_off
    cdef int count
    cdef const char **ptr
    cdef Py_ssize_t *length
    cdef uint64_t *masks
    cdef list keep  # the needles' bytes objects, alive as long as this
    cdef rlw_byteset starts  # the bytes anchors begin with

    def __cinit__(self, list needles, list masks, int simd=-1):
        cdef int i, k, n = len(needles), off, best, score, b, e
        cdef bytes nd
        cdef dict buckets = {}
        self.count = n
        self.keep = list(needles)
        self.table = <uint16_t *>calloc(65536, sizeof(uint16_t))
        self.ptr = <const char **>malloc(sizeof(char *) * (n + 1))
        self.length = <Py_ssize_t *>malloc(sizeof(Py_ssize_t) * (n + 1))
        self.masks = <uint64_t *>malloc(sizeof(uint64_t) * (n + 1))
        self.entry_needle = <int *>malloc(sizeof(int) * (n + 1))
        self.entry_off = <int *>malloc(sizeof(int) * (n + 1))
        self.bucket_start = <int *>malloc(sizeof(int) * (n + 1))
        self.bucket_len = <int *>malloc(sizeof(int) * (n + 1))
        if not (self.table and self.ptr and self.length and self.masks and self.entry_needle and self.entry_off
                and self.bucket_start and self.bucket_len):
            raise MemoryError()
        for i in range(n):
            nd = self.keep[i]
            if len(nd) < 2:
                raise ValueError("needles are at least two bytes long")
            self.ptr[i] = PyBytes_AS_STRING(nd)
            self.length[i] = len(nd)
            self.masks[i] = masks[i]
            best = -1
            score = 1 << 30
            for off in range(len(nd) - 1):
                if nd[off] >= 128:
                    continue  # the vector search knows ASCII bytes only
                k = _FREQ.get(chr(nd[off]), 1000) * 100 + _FREQ.get(chr(nd[off + 1]), 1000) // 100
                if k < score:
                    score, best = k, off
            if best < 0:
                simd = 0  # no ASCII byte to begin an anchor: the byte table only
                best = 0
            self.starts.byte[nd[best]] = 1
            if nd[best] < 128:
                self.starts.lo[nd[best] & 15] |= 1 << (nd[best] >> 4)
            buckets.setdefault(nd[best] | (nd[best + 1] << 8), []).append((i, best))
        self.starts.simd = _SIMD if simd < 0 else min(simd, _SIMD)
        e = 0
        for b, (key, items) in enumerate(buckets.items()):
            self.table[key] = b + 1
            self.bucket_start[b] = e
            self.bucket_len[b] = len(items)
            for i, off in items:
                self.entry_needle[e] = i
                self.entry_off[e] = off
                e += 1

    def __dealloc__(self):
        free(self.table)
        free(<void *>self.ptr)
        free(self.length)
        free(self.masks)
        free(self.entry_needle)
        free(self.entry_off)
        free(self.bucket_start)
        free(self.bucket_len)

    cdef Py_ssize_t first(self, const unsigned char *p, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
        """Where a needle occurs first in p[lo:hi] (by its anchor: the earliest line that holds one), or -1."""
        cdef Py_ssize_t i, s
        cdef uint16_t b
        cdef int k, e, nd
        cdef const uint16_t *table = self.table
        cdef rlw_cursor cur
        rlw_begin(&cur, lo)
        while True:
            i = rlw_next(&cur, &self.starts, p, hi - 1)
            if i >= hi - 1:
                return -1
            b = table[p[i] | (<unsigned int>p[i + 1] << 8)]
            if b:
                e = self.bucket_start[b - 1]
                for k in range(self.bucket_len[b - 1]):
                    nd = self.entry_needle[e + k]
                    s = i - self.entry_off[e + k]
                    if s >= lo and s + self.length[nd] <= hi and same(p + s, self.ptr[nd], self.length[nd]):
                        return s

    cdef uint64_t mask(self, const unsigned char *p, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
        """The kinds of every needle that occurs in p[lo:hi]."""
        cdef Py_ssize_t i, s
        cdef uint16_t b
        cdef int k, e, nd
        cdef uint64_t out = 0
        cdef const uint16_t *table = self.table
        cdef rlw_cursor cur
        rlw_begin(&cur, lo)
        while True:
            i = rlw_next(&cur, &self.starts, p, hi - 1)
            if i >= hi - 1:
                break
            b = table[p[i] | (<unsigned int>p[i + 1] << 8)]
            if b:
                e = self.bucket_start[b - 1]
                for k in range(self.bucket_len[b - 1]):
                    nd = self.entry_needle[e + k]
                    s = i - self.entry_off[e + k]
                    if s >= lo and s + self.length[nd] <= hi and same(p + s, self.ptr[nd], self.length[nd]):
                        out |= self.masks[nd]
        return out

    cdef void bits(self, const unsigned char *p, Py_ssize_t lo, Py_ssize_t hi, uint64_t *out) noexcept nogil:
        """Which needles occur in p[lo:hi], as a bit set over the needles (``out``: (count + 63) // 64 words)."""
        cdef Py_ssize_t i, s
        cdef uint16_t b
        cdef int k, e, nd
        cdef const uint16_t *table = self.table
        cdef rlw_cursor cur
        for k in range((self.count + 63) >> 6):
            out[k] = 0
        rlw_begin(&cur, lo)
        while True:
            i = rlw_next(&cur, &self.starts, p, hi - 1)
            if i >= hi - 1:
                break
            b = table[p[i] | (<unsigned int>p[i + 1] << 8)]
            if b:
                e = self.bucket_start[b - 1]
                for k in range(self.bucket_len[b - 1]):
                    nd = self.entry_needle[e + k]
                    s = i - self.entry_off[e + k]
                    if s >= lo and s + self.length[nd] <= hi and same(p + s, self.ptr[nd], self.length[nd]):
                        out[nd >> 6] |= (<uint64_t>1) << (nd & 63)

    def first_of(self, bytes data, Py_ssize_t lo, Py_ssize_t hi):
        """For the tests: ``first`` over data[lo:hi]."""
        hi = min(hi, len(data))
        return self.first(<const unsigned char *>PyBytes_AS_STRING(data), lo, hi)

    def mask_of(self, bytes data, Py_ssize_t lo, Py_ssize_t hi):
        """For the tests: ``mask`` over data[lo:hi]."""
        hi = min(hi, len(data))
        return self.mask(<const unsigned char *>PyBytes_AS_STRING(data), lo, hi)

    def hits(self, bytes data, Py_ssize_t lo, Py_ssize_t hi):
        """For the tests: (start, needle) of every occurrence in data[lo:hi], by start."""
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
        cdef Py_ssize_t i, s
        cdef uint16_t b
        cdef int k, e, nd
        cdef list out = []
        if hi > len(data):
            hi = len(data)
        i = lo
        while i + 1 < hi:
            b = self.table[p[i] | (<unsigned int>p[i + 1] << 8)]
            if b:
                e = self.bucket_start[b - 1]
                for k in range(self.bucket_len[b - 1]):
                    nd = self.entry_needle[e + k]
                    s = i - self.entry_off[e + k]
                    if s >= lo and s + self.length[nd] <= hi and same(p + s, self.ptr[nd], self.length[nd]):
                        out.append((s, self.keep[nd]))
            i += 1
        out.sort()
        return out


# ======================================================================================================= kind checks
# Matcher._match: a kind's literals in the line's body, then its expression (unless its literals decide it), then its
# exclusion. An expression that is an alternation of plain strings (optionally each followed by ``\s*$``) is decided
# here; any other runs in `re`.

import re as _re
import warnings as _warnings

with _warnings.catch_warnings():
    _warnings.simplefilter("ignore", DeprecationWarning)
    import sre_constants as _C
    import sre_parse as _P

_MAXREPEAT = _C.MAXREPEAT


_B = object()  # a word boundary, in an expanded alternative
_W = object()  # spaces to the end (\\s*$)


def _is_ws_star(item):
    op, av = item
    return (
        op is _C.MAX_REPEAT
        and av[0] == 0
        and av[1] is _MAXREPEAT
        and list(av[2]) == [(_C.IN, [(_C.CATEGORY, _C.CATEGORY_SPACE)])]
    )


def _expand(items, limit=64):
    """The alternatives a sequence of parsed items matches exactly, each a tuple of characters, boundaries (_B)
    and spaces to the end (_W); None when the items are more than that."""
    out = [()]
    i = 0
    items = list(items)
    while i < len(items):
        op, av = items[i]
        if _is_ws_star(items[i]) and i + 1 < len(items) and items[i + 1] == (_C.AT, _C.AT_END):
            out = [s + (_W,) for s in out]
            i += 2
            continue
        if op is _C.LITERAL:
            out = [s + (chr(av),) for s in out]
        elif op is _C.AT and av is _C.AT_BOUNDARY:
            out = [s + (_B,) for s in out]
        elif op is _C.IN:
            chars = []
            for iop, iav in av:
                if iop is not _C.LITERAL:
                    return None
                chars.append(chr(iav))
            out = [s + (c,) for s in out for c in chars]
        elif op is _C.SUBPATTERN:
            if av[1] or av[2]:
                return None
            sub = _expand(av[3], limit)
            if sub is None:
                return None
            out = [s + t for s in out for t in sub]
        elif op is _C.BRANCH:
            alts = []
            for branch in av[1]:
                sub = _expand(branch, limit)
                if sub is None:
                    return None
                alts.extend(sub)
            out = [s + t for s in out for t in alts]
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT):
            lo, hi, sub_items = av
            sub = _expand(sub_items, limit)
            if sub is None or hi is _MAXREPEAT or hi > 8:
                return None
            reps = []
            for k in range(lo, hi + 1):
                acc = [()]
                for _ in range(k):
                    acc = [a + t for a in acc for t in sub]
                reps.extend(acc)
            out = [s + t for s in out for t in reps]
        else:
            return None
        if len(out) > limit:
            return None
        i += 1
    return out


def literal_program(regex):
    """[(string, followed by \\s* to the end, a word boundary before it, one after it)] whose search decides
    ``regex.search`` exactly, or None."""
    if regex.flags & ~_re.UNICODE:
        return None
    try:
        parsed = _P.parse(regex.pattern, regex.flags)
    except Exception:
        return None
    return _program(_expand(parsed.data))


def partial_program(regex):
    """For an expression that is an alternation of which only some branches are plain strings: (the program of
    those, [(strings one of which any match of another branch holds, or None; the text such a match starts with,
    after spaces, when it is anchored at the start, or None)]). A line that none of the strings matches and that
    meets no other branch's conditions cannot match: the expression need not run. None: no such split."""
    from rlwatch.logs.literals import sequence_literals

    if regex.flags & ~_re.UNICODE:
        return None
    try:
        parsed = _P.parse(regex.pattern, regex.flags)
    except Exception:
        return None
    items = list(parsed.data)
    branches = [list(b) for b in items[0][1][1]] if len(items) == 1 and items[0][0] is _C.BRANCH else [items]
    plain = []
    others = []
    for branch in branches:
        done = _program(_expand(branch))
        if done is not None:
            plain.extend(done)
            continue
        state = [False]
        try:
            required = sequence_literals(list(branch), state)
        except RecursionError:
            required = None
        if state[0] or (required is not None and not all(required)):
            required = None  # case-insensitive parts: no case-sensitive containment to test
        prefix = None
        if branch and branch[0] == (_C.AT, _C.AT_BEGINNING):
            k = 1
            if k < len(branch) and _is_ws_star(branch[k]):
                k += 1
            chars = []
            while k < len(branch) and branch[k][0] is _C.LITERAL:
                chars.append(chr(branch[k][1]))
                k += 1
            prefix = "".join(chars) or None
        others.append((tuple(required) if required else None, prefix))
    return plain, others


def _program(alternatives):
    if alternatives is None:
        return None
    program = []
    for tokens in alternatives:
        before = bool(tokens) and tokens[0] is _B
        if before:
            tokens = tokens[1:]
        after = bool(tokens) and tokens[len(tokens) - 1] is _B
        tail = bool(tokens) and tokens[len(tokens) - 1] is _W
        if after or tail:
            tokens = tokens[: len(tokens) - 1]
        if any(t is _B or t is _W for t in tokens):
            return None
        text = "".join(tokens)
        if (tail and not text.strip()) or ((before or after) and not text) or (tail and before):
            return None
        program.append((text, tail, before, after))
    return program


cdef inline bint boundary(U u, Py_ssize_t i) noexcept nogil:
    """``\\b`` at i (unicode words; none in an empty text)."""
    cdef bint that, this
    if u.n == 0:
        return False
    that = i > 0 and uword(at(u, i - 1))
    this = i < u.n and uword(at(u, i))
    return this != that


cdef bint program_search(list program, tuple needles, Out out, str body, U u) except -1:
    """Whether ``body`` holds one of the program's strings, under its conditions (``needles``: per string, a needle
    it holds, which out.bits say the body lacks or may hold)."""
    cdef tuple alt
    cdef str lit
    cdef Py_ssize_t k, n, j
    cdef int nd
    cdef bint before, after
    for j in range(len(program)):
        alt = <tuple>program[j]
        if out.has_bits and j < len(needles):
            nd = <int>needles[j]
            if nd >= 0:
                if not (out.bits[nd >> 6] >> (nd & 63)) & 1:
                    continue  # the body does not hold the string
                if not (alt[1] or alt[2] or alt[3]):
                    return True  # it does, and nothing more is asked of it
        lit = <str>alt[0]
        n = PyUnicode_GET_LENGTH(lit)
        if alt[1]:
            k = ufind(body, u, lit, 0, -1)
            if k >= 0 and tail_is_ws_end(u, k + n):
                return True
            continue
        before = alt[2]
        after = alt[3]
        if not (before or after):
            if ucontains(body, u, lit):
                return True
            continue
        k = ufind(body, u, lit, 0, 1)
        while k >= 0:
            if (not before or boundary(u, k)) and (not after or boundary(u, k + n)):
                return True
            k = ufind(body, u, lit, k + 1, 1)
    return False


def py_program_search(list program, str body):
    cdef Out out = Out()
    out.has_bits = False
    return program_search(program, (), out, body, uview(body))


cdef bint code_line(U u) noexcept nogil:
    """``kinds._CODE_LINE.search(body)``: ``^\\s*(?:#|(?:raise|except|if|elif|assert|return|def|class|await|yield|
    lambda)\\b)`` (unicode classes), the keywords being ``wording.CODE_KEYWORDS``."""
    cdef Py_ssize_t i = 0, e
    cdef int k
    while i < u.n and uspace(at(u, i)):
        i += 1
    if i >= u.n:
        return False
    if at(u, i) == 35:
        return True
    for k in range(N_KEYWORDS):  # the alternation tries each keyword in turn until one is followed by a boundary
        if starts_lit(u, i, W_KEYWORDS[k]):
            e = i + W_KEYWORDS[k].n
            if e >= u.n or not uword(at(u, e)):
                return True
    return False


cdef bint _starts_after_spaces(str body, U u, str prefix) except -1:
    cdef Py_ssize_t i = 0
    while i < u.n and uspace(at(u, i)):
        i += 1
    return body.startswith(prefix, i)


cdef class Kind:
    """One event kind as the compiled path checks it."""

    cdef public object kind  # the EventKind
    cdef public str name
    cdef int index
    cdef tuple literals  # lowered when ignore_case
    cdef tuple literal_needles  # per literal, its index in the core's literal set (-1: none); case-sensitive kinds
    cdef bint ignore_case
    cdef bint decided
    cdef list program  # [(str, bool, bool, bool)] or None: then the expression runs in `re`
    cdef tuple program_needles  # per alternative of program, its index in the core's literal set (-1: none)
    cdef list plain  # the plain branches of an expression that has others (partial_program), or None
    cdef tuple plain_needles
    cdef list others  # what each of the other branches needs
    cdef tuple others_needles  # per branch of others, its strings' indices in the core's literal set (-1: none)
    cdef object search  # kind.regex.search
    cdef int exclude  # 0 none, 1 code lines, 2 an expression in `re`
    cdef object exclude_search

    cdef bint others_may_match(self, str body, U u, Out out) except -1:
        cdef tuple cond, needles
        cdef bint ok
        cdef Py_ssize_t i, j
        cdef int nd
        for i in range(len(self.others)):
            cond = <tuple>self.others[i]
            ok = True
            if cond[0] is not None:
                ok = False
                needles = <tuple>self.others_needles[i]
                for j in range(len(<tuple>cond[0])):
                    nd = <int>needles[j]
                    if out.has_bits and nd >= 0:  # found in the body's one pass, as matches() reads its literals
                        if (out.bits[nd >> 6] >> (nd & 63)) & 1:
                            ok = True
                            break
                    elif ucontains(body, u, <str>(<tuple>cond[0])[j]):
                        ok = True
                        break
            if ok and cond[1] is not None and not _starts_after_spaces(body, u, <str>cond[1]):
                ok = False
            if ok:
                return True
        return False

    cdef bint matches(self, str body, U u, Out out) except -1:
        cdef str hay
        cdef str lit
        cdef bint found
        cdef Py_ssize_t j
        cdef int nd
        if self.literals:
            found = False
            if self.ignore_case:
                if out.lowered is None:
                    out.lowered = body.lower()
                hay = out.lowered
                for lit in self.literals:
                    if lit in hay:
                        found = True
                        break
            else:
                for j in range(len(self.literals)):
                    nd = <int>self.literal_needles[j]
                    if out.has_bits and nd >= 0:  # whether the body holds it, read in one pass for every string
                        if (out.bits[nd >> 6] >> (nd & 63)) & 1:
                            found = True
                            break
                    elif ucontains(body, u, <str>self.literals[j]):
                        found = True
                        break
            if not found:
                return False
        if not self.decided:
            if self.program is not None:
                if not program_search(self.program, self.program_needles, out, body, u):
                    return False
            elif self.plain is not None:
                if not program_search(self.plain, self.plain_needles, out, body, u):
                    if not self.others_may_match(body, u, out):
                        return False
                    if self.search(body) is None:
                        return False
            elif self.search(body) is None:
                return False
        if self.exclude == 1:
            if code_line(u):
                return False
        elif self.exclude == 2:
            if self.exclude_search(body) is not None:
                return False
        return True


# ============================================================================================ shared Python pieces
from rlwatch.logs.signatures cimport frame, header, location
from rlwatch.logs.incidents cimport _Block, between_read, frames_read, Grouper, in_frames, LineTime, stall_room

# How a line is read (an over-long line's head and overlap, how far back a line without a
# timestamp looks for one): counting's values, read into C when this module loads.
from rlwatch.logs import counting as _counting

cdef Py_ssize_t _OVERLAP = _counting.OVERLAP_BYTES
cdef Py_ssize_t _HEAD = _counting.HEAD_BYTES
cdef int _LOOK_BACK_LINES = _counting.LOOK_BACK_LINES
cdef Py_ssize_t _LOOK_BACK_BYTES = _counting.LOOK_BACK_BYTES
cdef Py_ssize_t _TIME_SEARCH_BYTES = _counting.TIME_SEARCH_BYTES
# The bytes of frame lines read in bulk per call at most: incidents' value, read into C when this module loads (what
# reading them does to a block is incidents' stall_room, frames_read and between_read).
from rlwatch.logs import incidents as _incidents

cdef Py_ssize_t _WINDOW = _incidents.FRAME_WINDOW

from rlwatch.common.state import LogLine

cdef object _object_new = object.__new__
cdef object _LL_PATH = LogLine.__dict__["path"]
cdef object _LL_LINENO = LogLine.__dict__["lineno"]
cdef object _LL_TEXT = LogLine.__dict__["text"]
cdef object _LL_TIME = LogLine.__dict__["time"]

cdef extern from *:
    """
    static int rlw_set_slot(PyObject *descr, PyObject *obj, PyObject *value) {
        return Py_TYPE(descr)->tp_descr_set(descr, obj, value);
    }
    """
    int rlw_set_slot(object descr, object obj, object value) except -1


cdef object log_line(str path, int64_t lineno, str text, double time):
    """``LogLine(path, lineno, text, time)``, made without its generated ``__init__`` (four slots set directly): the
    maker of the lines counting.Counts hands subscribers (its ``make_line``), at a C call's cost."""
    cdef object line = _object_new(LogLine)
    rlw_set_slot(_LL_PATH, line, path)
    rlw_set_slot(_LL_LINENO, line, lineno)
    rlw_set_slot(_LL_TEXT, line, text)
    rlw_set_slot(_LL_TIME, line, time)
    return line


# =========================================================================================== signatures
# A traceback's header, frames, chain messages and exception line are read by rlwatch/logs/signatures.py itself,
# compiled from its own text (setup.py's COMPILED) and cimported here (its .pxd): header, frame, chain, location and
# exception above are that module's.


def py_code_line(str body):
    return code_line(uview(body))


# ========================================================================================================= incidents
# rlwatch/logs/incidents.py, IncidentTracker: the same rules, state and answers.

# The rules are incidents.Grouper's, compiled from their own text and cimported here (incidents.pxd): the counter
# keeps each file's FileIncidents in its FileState and hands the rules a line's time through CoreTime.


# What the counter keeps of each kind and file, and how a counted line changes it, is rlwatch/logs/counting.py,
# compiled from its own text (setup.py's COMPILED, its C types in counting.pxd) and cimported here.
from rlwatch.logs.counting cimport Counts, FileState, LongLine, long_line, shown, undated_time, upper_bound


# ============================================================================================= line arithmetic
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #define RLW_ONES 0x0101010101010101ULL
    #define RLW_LOW7 0x7F7F7F7F7F7F7F7FULL
    #define RLW_HIGH 0x8080808080808080ULL
    static inline uint64_t rlw_equal_bytes(uint64_t w, uint64_t pattern) {
        uint64_t x = w ^ pattern;
        uint64_t t = ((x & RLW_LOW7) + RLW_LOW7) | x;
        return (~t & RLW_HIGH) >> 7;
    }
    static inline uint64_t rlw_lane_sum(uint64_t acc) {
        uint64_t pairs = (acc & 0x00FF00FF00FF00FFULL) + ((acc >> 8) & 0x00FF00FF00FF00FFULL);
        return (pairs * 0x0001000100010001ULL) >> 48;
    }
    /* bytes equal to c in p[0:n], eight at a time */
    static Py_ssize_t rlw_count_byte(const unsigned char *p, Py_ssize_t n, unsigned char c) {
        uint64_t total = 0, pattern = RLW_ONES * c;
        Py_ssize_t i = 0;
        while (n - i >= 8) {
            uint64_t acc = 0;
            Py_ssize_t words = (n - i) / 8;
            if (words > 255) words = 255;
            for (Py_ssize_t k = 0; k < words; k++, i += 8) {
                uint64_t w;
                memcpy(&w, p + i, 8);
                acc += rlw_equal_bytes(w, pattern);
            }
            total += rlw_lane_sum(acc);
        }
        for (; i < n; i++) total += p[i] == c;
        return (Py_ssize_t)total;
    }
    """
    Py_ssize_t rlw_count_byte(const unsigned char *p, Py_ssize_t n, unsigned char c) nogil


cdef inline Py_ssize_t find_byte(const unsigned char *p, unsigned char c, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """``data.find(c, a, b)``."""
    cdef const void *r
    if b <= a:
        return -1
    r = memchr(p + a, c, <size_t>(b - a))
    return -1 if r == NULL else <const unsigned char *>r - p


cdef inline Py_ssize_t rfind_byte(const unsigned char *p, unsigned char c, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """``data.rfind(c, a, b)``."""
    cdef const char *r
    if b <= a:
        return -1
    r = rlw_memrchr(<const char *>p + a, c, b - a)
    return -1 if r == NULL else <const unsigned char *>r - p


cdef inline Py_ssize_t count_byte(const unsigned char *p, unsigned char c, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    if b <= a:
        return 0
    return rlw_count_byte(p + a, b - a, c)


cdef Py_ssize_t find_hms_bytes(const unsigned char *p, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """``HMS_BYTES.search(data, a, b)`` is not None: ``\\d\\d:\\d\\d:\\d\\d`` in p[a:b]."""
    cdef Py_ssize_t i = a
    while i + 8 <= b:
        if p[i + 2] == 58 and p[i + 5] == 58 and 48 <= p[i] <= 57 and 48 <= p[i + 1] <= 57 and 48 <= p[
            i + 3
        ] <= 57 and 48 <= p[i + 4] <= 57 and 48 <= p[i + 6] <= 57 and 48 <= p[i + 7] <= 57:
            return i
        i += 1
    return -1


cdef bytes bare_cr_as_lf(bytes data):
    """``data`` with every "\\r" not followed by "\\n" turned into "\\n" (the same length; ``data`` itself when none
    is bare)."""
    cdef const unsigned char *src = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data), i
    cdef bytes out = None
    cdef unsigned char *dst = NULL
    i = find_byte(src, 13, 0, n)
    while i >= 0:
        if i + 1 >= n or src[i + 1] != 10:
            if out is None:
                # a fresh object (NULL: never the interpreter's shared one-byte bytes, which must not change)
                out = PyBytes_FromStringAndSize(NULL, n)
                dst = <unsigned char *>PyBytes_AS_STRING(out)
                memcpy(dst, src, <size_t>n)
            dst[i] = 10
        i = find_byte(src, 13, i + 1, n)
    return data if out is None else out


def py_bare_cr_as_lf(bytes data):
    return bare_cr_as_lf(data)


cdef class Lines:
    """events._Lines: line arithmetic over one chunk (universal newlines) and the time of a line."""

    cdef bytes data
    cdef const unsigned char *p
    cdef Py_ssize_t n
    cdef bint cr
    cdef Py_ssize_t stamp_pos  # -1: no line of this chunk known to have a time
    cdef double stamp_t
    cdef bint has_by
    cdef double by
    cdef bint has_before
    cdef double before
    cdef bint approximate

    cdef void setup(self, bytes data, object by, object before) except *:
        self.data = data
        self.p = <const unsigned char *>PyBytes_AS_STRING(data)
        self.n = PyBytes_GET_SIZE(data)
        self.cr = memchr(self.p, 13, <size_t>self.n) != NULL
        if self.cr:
            # A bare "\r" ends a line as "\n" does: in a copy where each is a "\n" the lines, their text and their
            # offsets are the same, and the line walk takes the LF path (memchr for one byte, frames in bulk)
            # unless a "\r\n" is left. Finding the end of a line in the "\r" path looks for "\n" up to the
            # chunk's end: once per line over a chunk without any, that was quadratic (issue 35).
            self.data = bare_cr_as_lf(data)
            self.p = <const unsigned char *>PyBytes_AS_STRING(self.data)
            self.cr = memchr(self.p, 13, <size_t>self.n) != NULL
        self.stamp_pos = -1
        self.stamp_t = 0.0
        self.has_by = by is not None
        self.by = <double>by if self.has_by else 0.0
        self.has_before = before is not None
        self.before = <double>before if self.has_before else 0.0
        self.approximate = False

    cdef double time_of(self, Py_ssize_t start, str text, double now) except? -1.5:
        cdef double ref = self.by if self.has_by else now
        cdef double own = NAN
        cdef Py_ssize_t floor, top, pos, end, begin, head_end, r
        cdef int k
        cdef const unsigned char *p = self.p
        cdef str found_text
        if PyUnicode_FindChar(text, 58, 0, PyUnicode_GET_LENGTH(text), 1) >= 0:
            own = time_or_nan(text, ref)
        if not isnan(own):
            self.stamp_pos = start
            self.stamp_t = own
            self.approximate = False
            return own
        floor = start - _LOOK_BACK_BYTES if start > _LOOK_BACK_BYTES else 0
        if self.stamp_pos >= 0 and self.stamp_pos < start and self.stamp_pos + 1 > floor:
            floor = self.stamp_pos + 1
        if not self.cr:
            top = start
            for k in range(_LOOK_BACK_LINES):
                if top <= floor:
                    break
                r = rfind_byte(p, 10, floor, top - 1)
                top = r + 1 if r >= 0 else floor
            if find_byte(p, 58, top, start) < 0:
                return self.fallback(start, now)
        pos = start
        for k in range(_LOOK_BACK_LINES):
            if pos <= floor:
                break
            end = pos - 1
            if self.cr and end > floor and p[end - 1] == 13 and p[end] == 10:
                end -= 1
            if self.cr:
                begin = self.line_start(end, floor)
            else:
                r = rfind_byte(p, 10, floor, end)
                begin = r + 1 if r >= 0 else floor
            head_end = end if end < begin + _TIME_SEARCH_BYTES else begin + _TIME_SEARCH_BYTES
            if find_byte(p, 58, begin, head_end) >= 0 and find_hms_bytes(p, begin, head_end) >= 0:
                found_text = decode(<const char *>p + begin, end - begin)
                if PyUnicode_FindChar(found_text, 27, 0, PyUnicode_GET_LENGTH(found_text), 1) >= 0:
                    found_text = strip_sgr(found_text)
                own = time_or_nan(found_text, ref)
                if not isnan(own):
                    self.stamp_pos = begin
                    self.stamp_t = own
                    self.approximate = False
                    return own
            pos = begin
        return self.fallback(start, now)

    cdef double fallback(self, Py_ssize_t start, double now) noexcept:
        """The time of a line with no timestamp on it or just above it (counting.undated_time)."""
        self.approximate = self.has_by  # a backlog line: a lower bound
        return undated_time(self.stamp_t, self.stamp_pos >= 0 and self.stamp_pos < start, self.has_by, self.before,
                            self.has_before, now)

    cdef Py_ssize_t line_start(self, Py_ssize_t hit, Py_ssize_t floor) noexcept nogil:
        """Start of the line containing ``hit``, no earlier than ``floor``."""
        cdef Py_ssize_t i = rfind_byte(self.p, 10, floor, hit)
        cdef Py_ssize_t j
        if self.cr:
            j = rfind_byte(self.p, 13, floor, hit)
            if j > i:
                i = j
        return i + 1 if i >= 0 else floor

    cdef Py_ssize_t line_end(self, Py_ssize_t pos, Py_ssize_t limit, Py_ssize_t *nxt) noexcept nogil:
        """End of the line starting at or containing ``pos``; the next line's start in nxt."""
        cdef Py_ssize_t i, j
        i = find_byte(self.p, 10, pos, limit)
        if self.cr:
            j = find_byte(self.p, 13, pos, limit if i < 0 else i)
            if j >= 0:
                nxt[0] = j + 2 if (j + 1 < limit and self.p[j + 1] == 10) else j + 1
                return j
        if i < 0:
            nxt[0] = limit
            return limit
        nxt[0] = i + 1
        return i

    cdef Py_ssize_t count(self, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
        """Line terminators in data[a:b] (both ends at line starts)."""
        cdef Py_ssize_t n = count_byte(self.p, 10, a, b)
        cdef Py_ssize_t i
        if self.cr:
            n += count_byte(self.p, 13, a, b)
            i = find_byte(self.p, 13, a, b)
            while i >= 0:
                if i + 1 < b and self.p[i + 1] == 10:
                    n -= 1
                i = find_byte(self.p, 13, i + 1, b)
        return n

    cdef Py_ssize_t last_start(self) noexcept nogil:
        cdef Py_ssize_t i = rfind_byte(self.p, 10, 0, self.n)
        cdef Py_ssize_t j
        if self.cr:
            j = rfind_byte(self.p, 13, 0, self.n)
            if j > i:
                i = j
        return i + 1


cdef struct Span:
    double t
    double by
    bint has_by


cdef struct When:
    # a line's (time, by), read at most once and only if someone needs it
    bint have
    Span span
    int mode  # 0: the line at `start` of the current chunk; 1: the current over-long line
    Py_ssize_t start


# ============================================================================================================ core


def literal_strings(list kinds):
    """Every string the compiled path looks for in a line's body to decide its kinds (their literals, the strings
    their expressions are made of, what their other branches require): one pass over the body finds them all."""
    found = {}
    for ek in kinds:
        strings = [] if ek.ignore_case else list(ek.literals)
        program = literal_program(ek.regex)
        if program is not None:
            strings += [alt[0] for alt in program]
        else:
            split = partial_program(ek.regex)
            if split is not None:
                strings += [alt[0] for alt in split[0]]
                strings += [lit for required, _ in split[1] if required is not None for lit in required]
        for text in strings:
            raw = text.encode("utf-8", "surrogatepass")
            if len(raw) >= 2 and "\ufffd" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
                found.setdefault(text, len(found))
    return found if len(found) <= 512 else {}


cdef Kind make_kind(object ek, int i, dict lits):
    """How the compiled path decides kind ``ek`` (index i among the matcher's kinds; ``lits``: the literal set)."""
    cdef Kind k = Kind()
    k.kind = ek
    k.name = ek.name
    k.index = i
    k.ignore_case = ek.ignore_case
    k.literals = tuple(s.lower() for s in ek.literals) if ek.ignore_case else tuple(ek.literals)
    k.literal_needles = tuple(-1 if ek.ignore_case else lits.get(lit, -1) for lit in ek.literals)
    k.decided = (
        bool(ek.literals)
        and not ek.ignore_case
        and ek.regex.flags == _re.UNICODE
        and ek.regex.pattern == "|".join(_re.escape(lit) for lit in ek.literals)
    )
    k.program = None if k.decided else literal_program(ek.regex)
    k.program_needles = tuple(lits.get(alt[0], -1) for alt in (k.program or ()))
    k.plain = k.others = None
    if not k.decided and k.program is None:
        split = partial_program(ek.regex)
        if split is not None:
            k.plain, k.others = split
    k.plain_needles = tuple(lits.get(alt[0], -1) for alt in (k.plain or ()))
    k.others_needles = tuple(
        () if required is None else tuple(lits.get(lit, -1) for lit in required) for required, _ in (k.others or ())
    )
    k.search = ek.regex.search
    if ek.exclude is None:
        k.exclude = 0
    elif ek.exclude.pattern == _CODE_LINE_PATTERN and ek.exclude.flags == _re.UNICODE:
        k.exclude = 1
    else:
        k.exclude = 2
        k.exclude_search = ek.exclude.search
    return k


def py_kind_matches(object ek, str body, bint bits=False):
    """For the tests: whether the compiled path counts ``body`` (a line's message) as kind ``ek``; ``bits``: with
    the strings it looks for found in one pass (as it counts), else searched one by one."""
    cdef dict lits
    cdef Kind k
    cdef Out out = Out()
    cdef Needles found = None
    key = (ek, bits)
    made = _TEST_KINDS.get(key)
    if made is None:  # built once per kind: building compiles its expression's parts, which is the slow part
        lits = literal_strings([ek]) if bits else {}
        k = make_kind(ek, 0, lits)
        if lits:
            found = Needles([t.encode("utf-8") for t in lits], [0] * len(lits))
        made = _TEST_KINDS[key] = (k, found)
    k, found = made
    out.has_bits = False
    if found is not None:
        out.has_bits = body_bits(found, body, out.bits)
    return k.matches(body, uview(body), out)


cdef dict _TEST_KINDS = {}


cdef bint body_bits(Needles lits, str body, uint64_t *bits) except -1:
    """Which strings of the literal set ``body`` holds (False: not known, a lone surrogate has no UTF-8): an ASCII
    body is searched as it is, any other in its UTF-8, where a string's bytes occur exactly where it does."""
    cdef const char *p
    cdef Py_ssize_t n
    if PyUnicode_IS_ASCII(body):
        lits.bits(<const unsigned char *>PyUnicode_DATA(body), 0, PyUnicode_GET_LENGTH(body), bits)
        return True
    try:
        p = PyUnicode_AsUTF8AndSize(body, &n)
    except UnicodeError:
        return False
    lits.bits(<const unsigned char *>p, 0, n, bits)
    return True


DEF _REDRAW_MAX = 1024  # progress_shape.REDRAW_MAX_BYTES


cdef inline bint _key_drop(unsigned char c) noexcept nogil:
    return c == 32 or (c >= 48 and c <= 57)


cdef inline bint _digit(unsigned char c) noexcept nogil:
    return c >= 48 and c <= 57


cdef bint digits_moved(const unsigned char *a, const unsigned char *b, Py_ssize_t n, Py_ssize_t ts,
                       Py_ssize_t te) noexcept nogil:
    """Whether ``b`` is ``a`` (both ``n`` bytes) with only digits changed into other digits, none in ``[ts, te)``.
    Then, for a line ``a`` with a redraw key: every position is a digit in both or in neither, so ``b`` has the same
    key (the key keeps every other byte and the digits of ``[ts, te)``, its "/TOTAL"), and the same needles where no
    needle holds a digit (an occurrence lies on the positions that are the same). Eight bytes at a time: a redraw
    differs from the one before in a few digits (the counter, the times, the speed)."""
    cdef Py_ssize_t i = 0, k
    cdef uint64_t x, y
    while i + 8 <= n:
        memcpy(&x, a + i, 8)
        memcpy(&y, b + i, 8)
        if x != y:
            for k in range(i, i + 8):
                if a[k] != b[k] and (not _digit(a[k]) or not _digit(b[k]) or (k >= ts and k < te)):
                    return False
        i += 8
    for k in range(i, n):
        if a[k] != b[k] and (not _digit(a[k]) or not _digit(b[k]) or (k >= ts and k < te)):
            return False
    return True


cdef inline int64_t read_counter(const unsigned char *line, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """The value of the digits line[a:b] (at most 18 of them); -1 where there are none."""
    cdef int64_t v = 0
    if a == b:
        return -1
    while a < b:
        v = v * 10 + (line[a] - 48)
        a += 1
    return v


cdef Py_ssize_t redraw_key(const unsigned char *p, Py_ssize_t start, Py_ssize_t end, unsigned char *out,
                           Py_ssize_t *at, int64_t *counter) noexcept nogil:
    """progress_shape.redraw_key, byte for byte, written into ``out`` (room for end - start + 3 bytes); its length,
    or -1 where the line is no tqdm-style bar. ``at[0:2]``: where the counter's digits lie in the line (from its
    start), ``at[2:4]``: where "/TOTAL" does; ``counter``: its value (-1: none shown)."""
    cdef const unsigned char *f
    cdef Py_ssize_t pct, close, i, j, w = 0
    if end - start > _REDRAW_MAX:
        return -1
    f = <const unsigned char *>rlw_memmem(<const char *>p + start, end - start, "%|", 2)
    if f == NULL:
        return -1
    pct = f - p
    if pct <= start or p[pct - 1] < 48 or p[pct - 1] > 57:
        return -1
    f = <const unsigned char *>memchr(p + pct + 2, 124, <size_t>(end - pct - 2)) if end > pct + 2 else NULL
    if f == NULL:
        return -1
    close = f - p
    for i in range(start, pct):
        if not _key_drop(p[i]):
            out[w] = p[i]
            w += 1
    out[w] = 37
    out[w + 1] = 124
    out[w + 2] = 124
    w += 3
    i = close + 1
    while i < end and p[i] == 32:
        i += 1
    at[0] = i - start
    while i < end and p[i] >= 48 and p[i] <= 57:
        i += 1
    at[1] = i - start
    if at[1] - at[0] > 18:
        return -1
    counter[0] = read_counter(p + start, at[0], at[1])
    j = i
    if i < end and p[i] == 47:  # "/TOTAL", as written
        j = i + 1
        while j < end and p[j] >= 48 and p[j] <= 57:
            j += 1
    at[2] = i - start
    at[3] = j - start
    while i < j:
        out[w] = p[i]
        w += 1
        i += 1
    for i in range(j, end):
        if not _key_drop(p[i]):
            out[w] = p[i]
            w += 1
    return w

cdef bint raw_is_utf8_of(str text, U u, Py_ssize_t bpos) except -1:
    """Whether the bytes ``text`` was decoded from, from byte ``bpos`` on, are the UTF-8 of ``text[bpos:]``: the
    decoding replaced nothing (no U+FFFD: the bytes were valid UTF-8) and the first ``bpos`` characters are ASCII
    (one byte each, so character ``bpos`` starts at byte ``bpos``)."""
    cdef Py_ssize_t k
    for k in range(bpos):
        if at(u, k) >= 128:
            return False
    return PyUnicode_FindChar(text, 0xFFFD, 0, u.n, 1) < 0


cdef class Core:
    """The event counter and its incident tracker, compiled (``EventCounter`` and ``IncidentTracker``)."""

    cdef list kinds  # Kind
    cdef int nk
    cdef Counts counts  # what is kept of each kind and file (counting.Counts)
    cdef Needles needles
    cdef Needles lits  # every string the kinds' decisions look for (literal_strings), or None
    cdef object clock_time
    cdef public object errors
    cdef uint64_t redrawn_mask  # the kinds a bar's redraw counts as (kinds.REDRAWN_KINDS)
    cdef bint needles_digitless  # no needle holds a digit (see digits_moved)
    cdef Out out
    cdef Lines lines  # the chunk being counted
    cdef str cur_text  # the line being counted, for its time
    cdef FileState cur_long_fs
    cdef double cur_now
    cdef double cur_long_by
    cdef bint cur_long_has_by
    # incidents
    cdef Grouper g  # the incident rules (incidents.Grouper)
    cdef CoreTime lt  # a line's time, for those rules

    def __init__(
        self,
        list kinds,
        object clock,
        list needles,
        list needle_masks,
        *,
        int recent_lines=20,
        double rate_window_s=300.0,
        int storm_threshold=5,
        double storm_window_s=60.0,
        double crash_window_s=60.0,
        int max_incidents=500,
    ):
        cdef Kind k
        cdef int i
        if len(kinds) > 64:
            raise ValueError("the compiled path counts at most 64 kinds")
        self.kinds = []
        self.redrawn_mask = 0
        lits = literal_strings(kinds)
        self.lits = Needles([t.encode("utf-8") for t in lits], [0] * len(lits)) if lits else None
        for i, ek in enumerate(kinds):
            if not ek.literals:
                raise ValueError("a kind without literals: every line must be tried (the Python path does that)")
            k = make_kind(ek, i, lits)
            self.kinds.append(k)
        self.nk = len(self.kinds)
        self.needles = Needles(needles, needle_masks)
        self.needles_digitless = not any(48 <= c <= 57 for nd in needles for c in nd)
        self.clock_time = clock.time
        self.lines = Lines()
        self.out = Out()
        self.g = Grouper(storm_threshold, storm_window_s, crash_window_s, max_incidents)
        self.counts = Counts(kinds, self.g, recent_lines=recent_lines, rate_window_s=rate_window_s)
        self.counts.make_line = log_line
        for i in self.counts.redrawn:
            self.redrawn_mask |= (<uint64_t>1) << i
        self.errors = self.counts.errors
        self.lt = CoreTime.__new__(CoreTime)
        self.lt.core = self

    # ------------------------------------------------------------------------------------------------ set-up
    def subscribe(self, str kind, object callback):
        self.counts.subscribe(kind, callback)

    def tag_into(self, object sink, int keep):
        """Append (path, line number, kind) of every counted line among the newest ``keep`` of each chunk."""
        self.counts.tag_into(sink, keep)

    # ------------------------------------------------------------------------------------------------ feeding
    def feed(self, chunk):
        cdef bytes data = chunk.data
        cdef str path = chunk.path
        cdef FileState fs = self.counts.file(path)
        cdef double now = self.clock_time()
        cdef object by = chunk.backlog_mtime
        cdef Lines lines = self.lines
        cdef Py_ssize_t size = PyBytes_GET_SIZE(data), pos = 0, limit, end, nxt = 0, start
        cdef int64_t lineno = chunk.first_lineno
        cdef int64_t nlines = chunk.nlines
        cdef bint final, first, continued = chunk.continued
        lines.setup(data, by, (fs.stamp if fs.has_stamp else None) if by is not None else None)
        self.cur_now = now
        self.counts.chunk(lineno, nlines)
        if chunk.continues_line:
            end = lines.line_end(0, size, &nxt)
            final = end < size or not continued
            first = fs.long is None or fs.long.lineno != lineno
            if first:
                fs.long = long_line(lineno)
            self.piece(fs, data[:end], first, final, now, by)
            if not final:
                return
            pos = nxt
            lineno += 1
        else:
            fs.long = None
        limit = lines.last_start() if continued else size
        if pos < limit:
            self.scan(fs, lines, pos, limit, lineno, now)
        if lines.stamp_pos >= 0:
            fs.stamp = lines.stamp_t
            fs.has_stamp = True
        start = pos if pos > limit else limit
        if continued and start < size:
            fs.long = long_line(chunk.first_lineno + nlines)
            self.piece(fs, data[start:], True, False, now, by)

    cdef void scan(self, FileState fs, Lines lines, Py_ssize_t pos, Py_ssize_t limit, int64_t lineno,
                   double now) except *:
        """events.EventCounter._scan."""
        cdef const unsigned char *p = lines.p
        cdef bint cr = lines.cr
        cdef Py_ssize_t nh = -2, stop, end, nxt = 0, start, hit, after
        cdef int64_t moved
        cdef Needles needles = self.needles
        cdef uint64_t mask, found
        while pos < limit:
            if fs.inc.blocks:
                if not cr:
                    if nh == -2 or (nh >= 0 and nh < pos):
                        nh = needles.first(p, pos, limit)
                    stop = nh if nh >= 0 else limit
                    moved = lineno
                    after = self.skip_frames(fs, p, pos, stop, &moved)
                    if after != pos:
                        pos = after
                        lineno = moved
                        continue
                end = lines.line_end(pos, limit, &nxt)
                self.line(fs, lines, pos, end, lineno, now, needles.mask(p, pos, end))
                lineno += 1
                pos = nxt
                continue
            if nh == -2 or (nh >= 0 and nh < pos):
                nh = needles.first(p, pos, limit)
            if nh < 0:
                return
            hit = nh
            if cr:
                start = lines.line_start(hit, pos)
                lineno += lines.count(pos, start)
                end = lines.line_end(hit, limit, &nxt)
            else:
                start = rfind_byte(p, 10, pos, hit)
                start = start + 1 if start >= 0 else pos
                lineno += count_byte(p, 10, pos, start)
                end = find_byte(p, 10, hit, limit)
                if end < 0:
                    end = nxt = limit
                else:
                    nxt = end + 1
            mask = needles.mask(p, start, end)
            found = self.line(fs, lines, start, end, lineno, now, mask)
            lineno += 1
            pos = nxt
            if found and not (found & ~self.redrawn_mask) and not fs.inc.blocks:
                pos = self.redraws(fs, lines, start, end, mask, found, pos, limit, &lineno)

    cdef Py_ssize_t redraws(self, FileState fs, Lines lines, Py_ssize_t start, Py_ssize_t end, uint64_t mask,
                            uint64_t found, Py_ssize_t pos, Py_ssize_t limit, int64_t *lineno) except -2:
        """events.EventCounter._redraws: the lines after a bar's line that redraw it, all but the last counted here
        in bulk; where to go on (the last one's start; ``pos`` where there is no run), ``lineno`` moved past them."""
        cdef unsigned char key[_REDRAW_MAX + 4]
        cdef unsigned char cand[_REDRAW_MAX + 4]
        cdef Py_ssize_t at[4]
        cdef int64_t counter = -1, moved = -1
        cdef const unsigned char *p = lines.p
        cdef Py_ssize_t kn = redraw_key(p, start, end, key, at, &counter), q = pos, e, qn = 0, last = pos
        cdef Py_ssize_t prev = start, prev_n = end - start
        cdef int64_t run = 0, skipped
        cdef uint64_t m
        cdef int i
        cdef Needles needles = self.needles
        if kn < 0:
            return pos
        while q < limit:
            e = lines.line_end(q, limit, &qn)
            # the quick test first: the line before with a few digits moved (the same key and needles, see
            # digits_moved), else the key and the needles, as the Python path finds them
            if (
                self.needles_digitless
                and e - q == prev_n
                and digits_moved(p + prev, p + q, prev_n, at[2], at[3])
            ):
                moved = read_counter(p + q, at[0], at[1])  # the same layout: the counter where it was
            elif (
                redraw_key(p, q, e, cand, at, &moved) != kn
                or memcmp(cand, key, <size_t>kn) != 0
                or needles.mask(p, q, e) != mask
            ):
                break
            if moved < counter:
                break  # the counter started over: another bar, or the same drawn again
            counter = moved
            prev, prev_n = q, e - q
            last = q
            run += 1
            q = qn
        if run < 2:
            return pos
        skipped = run - 1
        m = found
        while m:
            i = _lowest(m)
            m &= m - 1
            self.counts.bulk(i, fs, lineno[0], skipped)
        lineno[0] += skipped
        return last

    cdef Span when(self, When *w) except *:
        cdef Lines lines
        cdef double t
        if not w.have:
            if w.mode == 0:
                lines = self.lines
                t = lines.time_of(w.start, self.cur_text, self.cur_now)
                w.span.t = t
                if not lines.approximate:
                    w.span.has_by = False
                    w.span.by = 0.0
                else:
                    w.span.has_by = True
                    w.span.by = upper_bound(t, lines.by)
            else:
                w.span = self.long_time(self.cur_long_fs, self.cur_now, self.cur_long_by, self.cur_long_has_by)
            w.have = True
        return w.span

    cdef uint64_t line(self, FileState fs, Lines lines, Py_ssize_t start, Py_ssize_t end, int64_t lineno, double now,
                       uint64_t mask) except? 0xFFFFFFFFFFFFFFFF:
        """events.EventCounter._line: incidents see the line, then each kind it matches counts; the kinds it
        counted as."""
        cdef str text, tag, body
        cdef Py_ssize_t bpos
        cdef U ut, ub
        cdef uint64_t found = 0, m
        cdef int i
        cdef Kind k
        cdef When w
        cdef str sh
        cdef bint restart = False
        cdef Out out = self.out
        cdef bint stripped = False
        text = decode(<const char *>lines.p + start, end - start)
        ut = uview(text)
        if PyUnicode_FindChar(text, 27, 0, ut.n, 1) >= 0:
            text = strip_sgr(text)
            stripped = True
            ut = uview(text)
        bpos = split_at(text, out)
        tag = out.tag
        body = PyUnicode_Substring(text, bpos, ut.n) if bpos else text
        ub = uview(body)
        out.lowered = None
        # every string the kinds it may be look for, found in one pass over the body: a body that is not ASCII is
        # searched in the line's own bytes where they are its UTF-8 (not encoded again for the search)
        if mask == 0 or self.lits is None:
            out.has_bits = False
        elif not stripped and not PyUnicode_IS_ASCII(body) and raw_is_utf8_of(text, ut, bpos):
            (<Needles>self.lits).bits(lines.p, start + bpos, end, out.bits)
            out.has_bits = True
        else:
            out.has_bits = body_bits(self.lits, body, out.bits)
        m = mask
        while m:
            i = _lowest(m)
            m &= m - 1
            k = <Kind>self.kinds[i]
            if k.matches(body, ub, out):
                found |= (<uint64_t>1) << i
        w.have = False
        w.mode = 0
        w.start = start
        self.cur_text = text
        if fs.inc.blocks or header(body):  # with no block open only a header matters (IncidentTracker.line)
            self.take(fs, tag, body, lineno, &w)
        if not found:
            return 0
        if self.counts.banner >= 0 and (found >> self.counts.banner) & 1:  # a start banner: a restart, too?
            restart = self.counts.restarts(fs, self.counts.restart >= 0 and (found >> self.counts.restart) & 1)
        sh = shown(text)
        self.when(&w)
        m = found
        while m:
            i = _lowest(m)
            m &= m - 1
            self.counts.count(i, fs, lineno, w.span.t, w.span.by, w.span.has_by, sh, now)
        if restart:
            self.counts.count(self.counts.restart, fs, lineno, w.span.t, w.span.by, w.span.has_by, sh, now)
        return found

    cdef void piece(self, FileState fs, bytes piece, bint first, bint final, double now, object by) except *:
        """events.EventCounter._piece: one piece of an over-long line, counted once per kind."""
        cdef LongLine long = fs.long
        cdef bytes window
        cdef str text, tag, body, head, sh
        cdef Out out = self.out
        cdef Py_ssize_t bpos, hl
        cdef U ut, ub
        cdef When w
        cdef Kind k
        cdef int i
        cdef list found = []
        if long is None:
            return
        hl = len(long.head)
        if hl < _HEAD:
            long.head = long.head + piece[: _HEAD - hl]
        window = long.tail + piece
        text = decode(PyBytes_AS_STRING(window), PyBytes_GET_SIZE(window))
        if PyUnicode_FindChar(text, 27, 0, PyUnicode_GET_LENGTH(text), 1) >= 0:
            text = strip_sgr(text)
        ut = uview(text)
        bpos = split_at(text, out)
        tag = out.tag
        body = PyUnicode_Substring(text, bpos, ut.n) if bpos else text
        self.cur_long_fs = fs
        self.cur_now = now
        self.cur_long_has_by = by is not None
        self.cur_long_by = <double>by if by is not None else 0.0
        w.have = False
        w.mode = 1
        if first:  # prefixes exist only at the start of a line; incidents see the line once, by its head
            head = body[:_HEAD]
            self.take(fs, tag, head, long.lineno, &w)
        else:
            body = text
        ub = uview(body)
        out.lowered = None
        out.has_bits = False
        for i in range(self.nk):
            k = <Kind>self.kinds[i]
            if self.counts.long_new(fs, i) and k.matches(body, ub, out):
                found.append(i)
        if found:
            self.when(&w)
            sh = shown(self.prepare_text(long.head))
            for i in found:
                self.counts.count_long(i, fs, w.span.t, w.span.by, w.span.has_by, sh, now)
        long.tail = window[len(window) - _OVERLAP :] if len(window) > _OVERLAP else window
        if final:
            fs.long = None

    cdef str prepare_text(self, bytes raw):
        cdef str text = decode(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))
        if PyUnicode_FindChar(text, 27, 0, PyUnicode_GET_LENGTH(text), 1) >= 0:
            text = strip_sgr(text)
        return text

    cdef Span long_time(self, FileState fs, double now, double by, bint has_by) except *:
        """events.EventCounter._long_time."""
        cdef LongLine long = fs.long
        cdef Span s
        if not long.has_span:
            self.counts.long_time(fs, self.prepare_text(long.head), now, by, has_by)
        s.t = long.span_t
        s.has_by = long.span_has_by
        s.by = long.span_by if long.span_has_by else 0.0
        return s

    # ------------------------------------------------------------------------------------------------ reading
    def summaries(self):
        return self.counts.summaries(self.clock_time())

    def streaks(self, str kind):
        return self.counts.streaks(kind)

    def incidents(self):
        return self.g.incidents()

    def dropped_incidents(self):
        return self.g.dropped()

    def open_files(self):
        """Paths with a traceback block open (``IncidentTracker.open_paths``)."""
        return {path: set(blocks) for path, blocks in self.g.open_paths.items()}

    # ------------------------------------------------------------------------------------------- tracebacks
    cdef void take(self, FileState fs, str tag, str body, int64_t lineno, When *w) except *:
        """IncidentTracker.line: the rules see the line, its time read from the chunk if one of them asks."""
        cdef CoreTime lt = self.lt
        lt.have = False
        lt.w = w
        self.g.take(fs.inc, tag, body, lineno, lt)

    cdef Py_ssize_t skip_frames(self, FileState fs, const unsigned char *p, Py_ssize_t pos, Py_ssize_t stop,
                                int64_t *lineno) except -2:
        """IncidentTracker.skip_frames: the frame lines at p[pos:stop] read in bulk, with the effect that reading
        each would have; returns where the lines read end (pos: none read)."""
        cdef _Block block = <_Block>fs.inc.blocks.get("")
        cdef Py_ssize_t window, k, end, q, nl, after
        cdef int64_t first = lineno[0], n, room
        if block is None:
            return pos
        if not in_frames(block):
            return self.skip_between(fs, block, p, pos, stop, lineno)
        window = stop if stop < pos + _WINDOW else pos + _WINDOW
        k = find_traceback(p, pos, window)
        if k >= 0:
            k = rfind_byte(p, 10, pos, k)
            window = k + 1 if k >= 0 else pos
        end = frame_run(p, pos, window)
        if end < 0:
            return pos
        while pos < end:
            room = stall_room(block)
            if room <= 0:
                break
            q = nth_line_end(p, pos, end, room)
            n = count_byte(p, 10, pos, q)
            after = self.last_frame(p, pos, q)
            if after < 0:
                frames_read(block, n, None, 0, lineno[0])
            else:
                frames_read(block, n, location(self.out.file, self.out.line), count_byte(p, 10, after, q), lineno[0])
            lineno[0] += n
            pos = q
        if lineno[0] > first and len(fs.inc.blocks) > 1:
            self.g.expire_over(fs.inc, first, lineno[0] - 1)
        return pos

    cdef Py_ssize_t skip_between(self, FileState fs, _Block block, const unsigned char *p, Py_ssize_t pos,
                                 Py_ssize_t stop, int64_t *lineno) except -2:
        cdef Py_ssize_t end
        cdef int64_t n
        if block.report is not None:
            return pos
        end = between_run(p, pos, stop)
        if end < 0:
            return pos
        n = count_byte(p, 10, pos, end)
        if not between_read(block, n, find_exception_word(p, pos, end), lineno[0]):
            return pos
        if len(fs.inc.blocks) > 1:
            self.g.expire_over(fs.inc, lineno[0], lineno[0] + n - 1)
        lineno[0] += n
        return end

    cdef Py_ssize_t last_frame(self, const unsigned char *p, Py_ssize_t pos, Py_ssize_t q) except -2:
        """IncidentTracker._last_frame: the last frame line of p[pos:q] (its file and line in self.out), and where
        the next line starts; -1: none."""
        cdef Py_ssize_t hi = q, i, start, nl, k
        cdef bint blank
        cdef str text, body
        cdef tuple f
        cdef U u
        while True:
            i = rfind_frame_word(p, pos, hi)
            if i < 0:
                return -1
            start = rfind_byte(p, 10, pos, i)
            start = start + 1 if start >= 0 else pos
            blank = True
            for k in range(start, i):
                if p[k] != 32 and p[k] != 9:
                    blank = False
                    break
            if blank:
                nl = find_byte(p, 10, i, q)
                if nl < 0:  # not in a frame run, whose lines all end before q
                    nl = q
                text = decode(<const char *>p + start, nl - start)
                if PyUnicode_FindChar(text, 27, 0, PyUnicode_GET_LENGTH(text), 1) >= 0:
                    text = strip_sgr(text)
                u = uview(text)
                k = split_at(text, self.out)
                body = PyUnicode_Substring(text, k, u.n) if k else text
                f = frame(body)
                if f is not None:
                    self.out.file, self.out.line = f
                    return nl + 1
            hi = start


cdef class CoreTime(LineTime):
    """incidents.LineTime for the compiled counter: the time of the line being counted, read from its chunk (or the
    over-long line's head) only when a rule asks; the counter's own When then holds it for counting the line."""

    cdef Core core
    cdef When *w

    cpdef void compute(self) except *:
        cdef Span s = self.core.when(self.w)
        self.t = s.t
        self.by = s.by
        self.has_by = s.has_by


# ================================================================================================ bulk byte runs
cdef Py_ssize_t find_traceback(const unsigned char *p, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    cdef const char *r
    if b - a < W_TRACEBACK.n:
        return -1
    r = rlw_memmem(<const char *>p + a, b - a, W_TRACEBACK.p, W_TRACEBACK.n)
    return -1 if r == NULL else <const unsigned char *>r - p


cdef Py_ssize_t rfind_frame_word(const unsigned char *p, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """``data.rfind(wording.FRAME_FILE, a, b)``."""
    cdef Py_ssize_t i = b - W_FRAME_FILE.n
    cdef unsigned char c0 = <unsigned char>W_FRAME_FILE.p[0]
    while i >= a:
        if p[i] == c0 and memcmp(p + i, W_FRAME_FILE.p, W_FRAME_FILE.n) == 0:
            return i
        i -= 1
    return -1


cdef bint find_exception_word(const unsigned char *p, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return b - a >= W_EXCEPTION.n and rlw_memmem(<const char *>p + a, b - a, W_EXCEPTION.p, W_EXCEPTION.n) != NULL


cdef inline bint _frame_char(unsigned char c) noexcept nogil:
    return (0x21 <= c <= 0x2A) or (0x2C <= c <= 0x7B) or c == 0x7D or c == 0x7E


cdef Py_ssize_t frame_run(const unsigned char *p, Py_ssize_t pos, Py_ssize_t window) noexcept nogil:
    """``_FRAME_RUN.match(data, pos, window).end()``: complete lines of a blank or tab, then a printable ASCII
    character other than ``|`` and ``+``, then no escape; -1: none."""
    cdef Py_ssize_t i = pos, j, nl, good = -1
    while i < window:
        j = i
        while j < window and (p[j] == 32 or p[j] == 9):
            j += 1
        if j == i or j >= window or not _frame_char(p[j]):
            break
        # the rest of the line: its end and no escape before it, each found by memchr (a byte loop was a tenth of
        # the dense log's time, its tracebacks being most of its lines)
        nl = find_byte(p, 10, j + 1, window)
        if nl < 0 or memchr(p + j + 1, 27, <size_t>(nl - j - 1)) != NULL:
            break
        i = nl + 1
        good = i
    return good


cdef Py_ssize_t nth_line_end(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int64_t k) noexcept nogil:
    """``_N_LINES[k].match(data, pos, end)``: after the k-th line of p[pos:end]; end when there are fewer."""
    cdef Py_ssize_t i = pos, r
    cdef int64_t n
    for n in range(k):
        r = find_byte(p, 10, i, end)
        if r < 0:
            return end
        i = r + 1
    return i


cdef Py_ssize_t between_run(const unsigned char *p, Py_ssize_t pos, Py_ssize_t stop) noexcept nogil:
    """``_BETWEEN_RUN.match(data, pos, stop).end()``: blank lines and chain messages; -1: none."""
    cdef Py_ssize_t i = pos, j, good = -1
    while i < stop:
        j = i
        while j < stop and (p[j] == 32 or p[j] == 9):
            j += 1
        if j + W_CHAIN_CONTEXT.n <= stop and memcmp(p + j, W_CHAIN_CONTEXT.p, W_CHAIN_CONTEXT.n) == 0:
            j += W_CHAIN_CONTEXT.n
        elif j + W_CHAIN_CAUSE.n <= stop and memcmp(p + j, W_CHAIN_CAUSE.p, W_CHAIN_CAUSE.n) == 0:
            j += W_CHAIN_CAUSE.n
        while j < stop and (p[j] == 32 or p[j] == 9):
            j += 1
        if j >= stop or p[j] != 10:
            break
        i = j + 1
        good = i
    return good


cdef extern from *:
    """
    static inline int rlw_lowest(uint64_t m) { return __builtin_ctzll(m); }
    """
    int _lowest "rlw_lowest"(uint64_t m) noexcept nogil


from rlwatch.logs.kinds import CODE_LINE as _CODE_LINE_RE

cdef str _CODE_LINE_PATTERN = _CODE_LINE_RE.pattern
