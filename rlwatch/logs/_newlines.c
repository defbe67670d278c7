/*
 * Universal-newline counting in compiled code: the part of reading a big log that is the same work for every byte.
 *
 * rlwatch numbers lines as Python's universal newlines do: "\n", "\r\n" and a bare "\r" (tqdm's progress bars)
 * each end one line. `bytes.count` runs at about 2 GB/s and holds the GIL, and a line count must pass over every
 * byte of a backlog before its newest part can be numbered (diagnosis first) and again in the tailer's chunks.
 * Here the count runs eight bytes at a time without the GIL, and a range of a file is read and counted in C
 * without a Python object per block.
 *
 * The same rules in Python are in rlwatch/logs/newlines.py; it uses this module when it is built and a test
 * proves both give identical answers on hostile input.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ONES 0x0101010101010101ULL
#define LOW7 0x7F7F7F7F7F7F7F7FULL
#define HIGH 0x8080808080808080ULL
#define FILE_BLOCK (256 * 1024) /* fits the L2 cache: read, then counted while still there */

/* 0x01 in each byte of w that equals the byte in `pattern` (repeated in every byte), 0x00 elsewhere. Exact: the
 * low seven bits are added without a carry across bytes, so no byte's result depends on its neighbours. */
static inline uint64_t equal_bytes(uint64_t w, uint64_t pattern) {
    uint64_t x = w ^ pattern;
    uint64_t t = ((x & LOW7) + LOW7) | x;
    return (~t & HIGH) >> 7;
}

/* Sum of the eight byte lanes of `acc` (each at most 255). */
static inline uint64_t lane_sum(uint64_t acc) {
    uint64_t pairs = (acc & 0x00FF00FF00FF00FFULL) + ((acc >> 8) & 0x00FF00FF00FF00FFULL);
    return (pairs * 0x0001000100010001ULL) >> 48;
}

/* Bytes equal to `c` in p[0:n]. */
static uint64_t count_byte(const unsigned char *p, size_t n, unsigned char c) {
    uint64_t total = 0;
    uint64_t pattern = ONES * c;
    size_t i = 0;
    while (n - i >= 8) {
        uint64_t acc = 0;
        size_t words = (n - i) / 8;
        if (words > 255) {
            words = 255; /* each lane of acc holds at most 255 */
        }
        for (size_t k = 0; k < words; k++, i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            acc += equal_bytes(w, pattern);
        }
        total += lane_sum(acc);
    }
    for (; i < n; i++) {
        total += p[i] == c;
    }
    return total;
}

/* Line terminators in p[0:n]: "\n", "\r\n" (once) and bare "\r"; a "\r" as the last byte counts (as Python's
 * count("\n") + count("\r") - count("\r\n") over the same bytes does). */
static uint64_t count_terminators(const unsigned char *p, size_t n) {
    if (n == 0) {
        return 0;
    }
    const unsigned char *cr = memchr(p, '\r', n);
    if (cr == NULL) {
        return count_byte(p, n, '\n');
    }
    uint64_t total = count_byte(p, (size_t)(cr - p), '\n');
    for (size_t i = (size_t)(cr - p); i < n; i++) {
        unsigned char c = p[i];
        if (c == '\n') {
            total++;
        } else if (c == '\r') {
            total += !(i + 1 < n && p[i + 1] == '\n');
        }
    }
    return total;
}

PyDoc_STRVAR(count_lines_doc,
             "count_lines(data, start=0, end=None, /) -> int\n\n"
             "Universal-newline terminators in data[start:end] ('\\r\\n' counts once). Any bytes-like object.");

static PyObject *py_count_lines(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "count_lines() takes from 1 to 3 positional arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t start = 0;
    Py_ssize_t end = view.len;
    if (nargs > 1 && args[1] != Py_None) {
        start = PyLong_AsSsize_t(args[1]);
    }
    if (!PyErr_Occurred() && nargs > 2 && args[2] != Py_None) {
        end = PyLong_AsSsize_t(args[2]);
    }
    if (PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* Slice semantics, as data.count(b"\n", start, end) has them. */
    if (start < 0) {
        start = start + view.len < 0 ? 0 : start + view.len;
    }
    if (end < 0) {
        end = end + view.len < 0 ? 0 : end + view.len;
    }
    if (end > view.len) {
        end = view.len;
    }
    uint64_t n = 0;
    if (start < end) {
        const unsigned char *p = (const unsigned char *)view.buf + start;
        size_t len = (size_t)(end - start);
        if (len >= (1 << 16)) {
            Py_BEGIN_ALLOW_THREADS;
            n = count_terminators(p, len);
            Py_END_ALLOW_THREADS;
        } else {
            n = count_terminators(p, len);
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(n);
}

PyDoc_STRVAR(count_file_range_doc,
             "count_file_range(fd, start, end, /) -> (lines, first, last)\n\n"
             "Universal-newline terminators in bytes [start, end) of an open file, read with pread; first and last\n"
             "are its first and last bytes (-1 when nothing was read), so neighbouring ranges can join a '\\r\\n'\n"
             "cut between them. Stops early at the end of the file. Raises OSError when a read fails.");

static PyObject *py_count_file_range(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "count_file_range() takes exactly 3 positional arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    long long start = PyLong_AsLongLong(args[1]);
    long long end = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "count_file_range(): not a file descriptor");
        return NULL;
    }
    if (start < 0 || end < 0) {
        PyErr_SetString(PyExc_ValueError, "count_file_range(): negative offset");
        return NULL;
    }
    unsigned char *buf = malloc(FILE_BLOCK);
    if (buf == NULL) {
        return PyErr_NoMemory();
    }
    uint64_t lines = 0;
    int first = -1, last = -1, failed = 0;
    long long pos = start;
    Py_BEGIN_ALLOW_THREADS;
    while (pos < end) {
        long long want = end - pos < FILE_BLOCK ? end - pos : FILE_BLOCK;
        ssize_t got = pread((int)fd, buf, (size_t)want, (off_t)pos);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            failed = errno;
            break;
        }
        if (got == 0) {
            break; /* the file is shorter than asked: count what there is */
        }
        if (first < 0) {
            first = buf[0];
        }
        lines += count_terminators(buf, (size_t)got);
        if (last == '\r' && buf[0] == '\n') {
            lines--; /* a "\r\n" cut between two blocks was counted as two terminators */
        }
        last = buf[got - 1];
        pos += got;
    }
    Py_END_ALLOW_THREADS;
    free(buf);
    if (failed) {
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("(Kii)", (unsigned long long)lines, first, last);
}

static PyMethodDef methods[] = {
    {"count_lines", (PyCFunction)(void (*)(void))py_count_lines, METH_FASTCALL, count_lines_doc},
    {"count_file_range", (PyCFunction)(void (*)(void))py_count_file_range, METH_FASTCALL, count_file_range_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "rlwatch.logs._newlines",
    "Universal-newline counting, compiled (see rlwatch.logs.newlines for the same rules in Python).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__newlines(void) { return PyModule_Create(&module); }
