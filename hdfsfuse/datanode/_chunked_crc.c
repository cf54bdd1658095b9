/*
 * hdfsfuse._chunked_crc: verify every checksum chunk of a buffer in one call, without the GIL.
 *
 * HDFS keeps one big-endian CRC per `bytes_per_checksum` bytes of a block (the last chunk may be
 * shorter). Checking a 64 KiB packet or a 4 MiB local read chunk by chunk from Python costs a call
 * and a slice per 512 bytes; here it is one call, and other threads run meanwhile.
 *
 *   first_mismatch(kind, data, sums, bytes_per_checksum) -> index of the first bad chunk, or -1
 *   crc(kind, data) -> the CRC of data
 *   take_data_packets(...) -> the packet loop of a READ_BLOCK response's common case (below)
 *   read_chunks(...) -> a local read of whole chunks and their checksums, verified (below)
 *   buffer(n[, align]) -> a bytearray of n bytes, not zeroed first (its start aligned)
 *
 * kind 1 is CRC32 (zlib's, reflected polynomial 0xEDB88320), kind 2 is CRC32C (Castagnoli,
 * reflected polynomial 0x82F63B78); both start from 0xFFFFFFFF and end XORed with it. CRC32C uses
 * the SSE4.2 crc32 instruction when the CPU has it, and slicing-by-8 tables otherwise.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

static uint32_t tables[3][8][256]; /* [kind][slice][byte] */

static void make_tables(int kind, uint32_t poly) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (poly & (0u - (c & 1u)));
        tables[kind][0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int s = 1; s < 8; s++)
            tables[kind][s][b] = (tables[kind][s - 1][b] >> 8) ^ tables[kind][0][tables[kind][s - 1][b] & 0xff];
}

static uint32_t crc_tables(int kind, uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t (*t)[256] = tables[kind];
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
              t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_SSE42_PATH 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}

/* The CRC32Cs of three chunks of n bytes at once. The crc32 instruction takes 3 cycles and can
 * start one a cycle: one chunk's chain of them keeps the unit a third busy, three keep it full. */
/* Three consecutive chunks of n bytes from a. */
__attribute__((target("sse4.2"))) static void crc32c_sse42_x3(const unsigned char *a, size_t n, uint32_t out[3]) {
    const unsigned char *b = a + n, *c = b + n;
    uint64_t ca = 0xFFFFFFFFu, cb = 0xFFFFFFFFu, cc = 0xFFFFFFFFu;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t va, vb, vc;
        memcpy(&va, a + i, 8);
        memcpy(&vb, b + i, 8);
        memcpy(&vc, c + i, 8);
        ca = __builtin_ia32_crc32di(ca, va);
        cb = __builtin_ia32_crc32di(cb, vb);
        cc = __builtin_ia32_crc32di(cc, vc);
    }
    uint32_t a32 = (uint32_t)ca, b32 = (uint32_t)cb, c32 = (uint32_t)cc;
    for (; i < n; i++) {
        a32 = __builtin_ia32_crc32qi(a32, a[i]);
        b32 = __builtin_ia32_crc32qi(b32, b[i]);
        c32 = __builtin_ia32_crc32qi(c32, c[i]);
    }
    out[0] = ~a32;
    out[1] = ~b32;
    out[2] = ~c32;
}
#endif

static int use_sse42 = 0;

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static int64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

static uint32_t crc_of(int kind, const unsigned char *p, size_t n) {
#ifdef HAVE_SSE42_PATH
    if (kind == 2 && use_sse42) return ~crc32c_sse42(0xFFFFFFFFu, p, n);
#endif
    return ~crc_tables(kind, 0xFFFFFFFFu, p, n);
}

static int check_kind(int kind) {
    if (kind != 1 && kind != 2) {
        PyErr_Format(PyExc_ValueError, "checksum kind %d: only 1 (CRC32) and 2 (CRC32C)", kind);
        return -1;
    }
    return 0;
}

/* The index of the first chunk of d[0:n] whose CRC is not its big-endian value in s, or -1. */
static Py_ssize_t first_bad_chunk(int kind, const unsigned char *d, Py_ssize_t n, const unsigned char *s,
                                  Py_ssize_t bpc) {
    Py_ssize_t count = (n + bpc - 1) / bpc, i = 0;
#ifdef HAVE_SSE42_PATH
    if (kind == 2 && use_sse42) {
        Py_ssize_t whole = n / bpc;
        for (; i + 3 <= whole; i += 3) {
            uint32_t got[3];
            crc32c_sse42_x3(d + i * bpc, (size_t)bpc, got);
            for (int j = 0; j < 3; j++)
                if (got[j] != be32(s + 4 * (i + j))) return i + j;
        }
    }
#endif
    for (; i < count; i++) {
        Py_ssize_t off = i * bpc;
        size_t len = (size_t)(n - off < bpc ? n - off : bpc);
        if (crc_of(kind, d + off, len) != be32(s + 4 * i)) return i;
    }
    return -1;
}

static PyObject *first_mismatch(PyObject *self, PyObject *args) {
    int kind;
    Py_buffer data, sums;
    Py_ssize_t bpc;
    (void)self;
    if (!PyArg_ParseTuple(args, "iy*y*n", &kind, &data, &sums, &bpc)) return NULL;
    PyObject *result = NULL;
    if (check_kind(kind) < 0) goto done;
    if (bpc <= 0) {
        PyErr_SetString(PyExc_ValueError, "bytes_per_checksum must be positive");
        goto done;
    }
    Py_ssize_t count = (data.len + bpc - 1) / bpc;
    if (sums.len != count * 4) {
        PyErr_Format(PyExc_ValueError, "%zd checksum bytes for %zd data bytes", sums.len, data.len);
        goto done;
    }
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = first_bad_chunk(kind, data.buf, data.len, sums.buf, bpc);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&sums);
    return result;
}

static PyObject *crc(PyObject *self, PyObject *args) {
    int kind;
    Py_buffer data;
    (void)self;
    if (!PyArg_ParseTuple(args, "iy*", &kind, &data)) return NULL;
    PyObject *result = NULL;
    if (check_kind(kind) == 0) {
        uint32_t value;
        Py_BEGIN_ALLOW_THREADS
        value = crc_of(kind, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
        result = PyLong_FromUnsignedLong(value);
    }
    PyBuffer_Release(&data);
    return result;
}

/* The packets of a READ_BLOCK response, as `dtp.ReadBlockParser._parse_packet` takes them:
 *
 *   PLEN (u32 BE) | HLEN (u16 BE) | header (HLEN) | checksums | data (dataLen)
 *   header, fixed layout (25 bytes, protobuf): 0x09 offsetInBlock (i64 LE) 0x11 seqno (i64 LE)
 *                                              0x18 lastPacketInBlock (0|1) 0x25 dataLen (i32 LE)
 *
 * take_data_packets(kind, bpc, size, buf, at, pos, seqno, start, end, output, max_packet[, base, cell, gap])
 *     -> (at, pos, seqno, taken)
 *
 * From `at` in `buf`, takes every complete data packet in the fixed layout that passes each of
 * the parser's checks: its seqno and block offset are the next expected (`seqno`, `pos`), its
 * checksum bytes fit its data, it is not marked last and starts before `end`, and every chunk
 * verifies (kind 1 or 2; kind 0 verifies nothing). Each packet's bytes in [start, end) of the
 * block are copied to `output`, which holds exactly that range, or, with `base, cell, gap`, to
 * where a placement puts them (`dtp.Placement`: block byte p at base + (p - start) +
 * (p / cell - start / cell) * gap, so a striped unit's cells land between the other units' cells
 * of a group buffer). Returns where it stopped, the
 * next expected offset and seqno, and the data bytes taken. It stops before the first packet it
 * does not take (incomplete, the final empty one, another header layout, any failed check) and
 * takes nothing from it: the Python loop then takes that packet, and raises its own errors.
 */
/* Where a placement puts block byte p of a read that starts at `start` (see dtp.Placement). */
static inline int64_t placed_at(int64_t p, int64_t start, int64_t base, int64_t cell, int64_t gap) {
    return base + (p - start) + (cell ? (p / cell - start / cell) * gap : 0);
}

static PyObject *take_data_packets(PyObject *self, PyObject *args) {
    int kind;
    Py_ssize_t bpc, size, at, max_packet, taken = 0, base = 0, cell = 0, gap = 0;
    long long pos, seqno, start, end;
    Py_buffer buf, output;
    (void)self;
    if (!PyArg_ParseTuple(args, "inny*nLLLLw*n|nnn", &kind, &bpc, &size, &buf, &at, &pos, &seqno, &start, &end,
                          &output, &max_packet, &base, &cell, &gap))
        return NULL;
    int placed = PyTuple_GET_SIZE(args) > 11; /* a placement given, even an all-zero one */
    if ((kind != 0 && check_kind(kind) < 0) || bpc <= 0 || at < 0 || at > buf.len || end <= start ||
        (!placed && output.len != end - start) ||
        (placed && (base < 0 || cell < 0 || gap < 0 || (cell == 0 && gap != 0) ||
                    placed_at(end - 1, start, base, cell, gap) >= output.len))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "take_data_packets: bad arguments");
        PyBuffer_Release(&buf);
        PyBuffer_Release(&output);
        return NULL;
    }
    const unsigned char *b = buf.buf;
    unsigned char *out = output.buf;
    Py_ssize_t n = buf.len;
    Py_BEGIN_ALLOW_THREADS
    while (n - at >= 6) {
        const unsigned char *p = b + at;
        int64_t plen = (int64_t)be32(p);
        int64_t hlen = ((int64_t)p[4] << 8) | p[5];
        if (hlen != 25 || plen + hlen > max_packet) break;
        int64_t total = 2 + hlen + plen;
        if (n - at < total) break;
        const unsigned char *h = p + 6;
        if (h[0] != 0x09 || h[9] != 0x11 || h[18] != 0x18 || h[19] != 0 || h[20] != 0x25) break;
        int64_t offset = le64(h + 1), seq = le64(h + 10);
        int64_t data_len = le32(h + 21);
        if (seq != seqno || offset != pos || data_len <= 0 || offset >= end) break;
        int64_t sums_len = plen - 4 - data_len; /* negative (dataLen past PLEN) never matches */
        if (sums_len != (data_len + bpc - 1) / bpc * size) break;
        const unsigned char *sums = h + hlen, *data = sums + sums_len;
        if (kind != 0 && first_bad_chunk(kind, data, (Py_ssize_t)data_len, sums, bpc) >= 0) break;
        int64_t lo = offset > start ? offset : start;
        int64_t hi = offset + data_len < end ? offset + data_len : end;
        if (hi > lo && cell == 0) {
            memcpy(out + base + (lo - start), data + (lo - offset), (size_t)(hi - lo));
        } else if (hi > lo) {
            for (int64_t q = lo; q < hi;) { /* one cell at a time */
                int64_t stop = (q / cell + 1) * cell;
                if (stop > hi) stop = hi;
                memcpy(out + placed_at(q, start, base, cell, gap), data + (q - offset), (size_t)(stop - q));
                q = stop;
            }
        }
        pos = offset + data_len;
        seqno = seq + 1;
        taken += (Py_ssize_t)data_len;
        at += (Py_ssize_t)total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&output);
    return Py_BuildValue("nLLn", at, pos, seqno, taken);
}

/* pread(2) of n bytes, or preadv2 with RWF_NOWAIT: -1 with errno, or the bytes read (fewer only
 * at the end of the file; under `nowait` also when the rest is not in memory). */
static Py_ssize_t read_at(int fd, unsigned char *p, Py_ssize_t n, long long pos, int nowait) {
    Py_ssize_t got = 0;
    while (got < n) {
        ssize_t r;
        if (nowait) {
            struct iovec v = {p + got, (size_t)(n - got)};
            r = preadv2(fd, &v, 1, (off_t)(pos + got), RWF_NOWAIT);
        } else {
            r = pread(fd, p + got, (size_t)(n - got), (off_t)(pos + got));
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return got ? got : -1;
        if (r == 0 || nowait) return got + r; /* a short nowait read: the rest would wait */
        got += r;
    }
    return got;
}

#define READ_PIECE (256 * 1024) /* verified while still in the CPU's cache (a multiple of any bpc <= 256 KiB) */

/*
 * read_chunks(kind, bpc, data_fd, data_pos, nbytes, sums_fd, sums_pos, nowait)
 *     -> (data, data_got, sums_got, bad)
 *
 * What `localio.read_verified` does around it, in one call without the GIL: read `nbytes` of
 * whole checksum chunks at `data_pos` of data_fd, and their big-endian checksums (4 bytes per
 * chunk; none for kind 0) at `sums_pos` of sums_fd, and verify each chunk. The data is read and
 * verified READ_PIECE at a time, so each piece is checked while in the cache. Returns the bytes
 * object (its first `data_got` bytes are read), how many checksum bytes were read, and the index
 * of the first chunk that does not verify (-1: all do; nothing is verified past a short read).
 * `nowait`: RWF_NOWAIT reads, which raise BlockingIOError (EAGAIN) or come back short instead
 * of waiting for a disk. OSError for any other failed read.
 */
static PyObject *read_chunks(PyObject *self, PyObject *args) {
    int kind, data_fd, sums_fd, nowait;
    Py_ssize_t bpc, nbytes;
    long long data_pos, sums_pos;
    (void)self;
    if (!PyArg_ParseTuple(args, "iniLniLp", &kind, &bpc, &data_fd, &data_pos, &nbytes, &sums_fd, &sums_pos, &nowait))
        return NULL;
    if ((kind != 0 && check_kind(kind) < 0) || bpc <= 0 || bpc > READ_PIECE || READ_PIECE % bpc || nbytes < 0 ||
        data_pos < 0 || sums_pos < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "read_chunks: bad arguments");
        return NULL;
    }
    Py_ssize_t sums_len = kind ? (nbytes + bpc - 1) / bpc * 4 : 0;
    PyObject *data = PyBytes_FromStringAndSize(NULL, nbytes);
    if (data == NULL) return NULL;
    unsigned char *sums = sums_len ? PyMem_RawMalloc((size_t)sums_len) : NULL;
    if (sums_len && sums == NULL) {
        Py_DECREF(data);
        return PyErr_NoMemory();
    }
    unsigned char *d = (unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t data_got = 0, sums_got = 0, bad = -1;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    if (sums_len) {
        sums_got = read_at(sums_fd, sums, sums_len, sums_pos, nowait);
        if (sums_got < 0) err = errno;
    }
    while (!err && sums_got == sums_len && data_got < nbytes) {
        Py_ssize_t n = nbytes - data_got < READ_PIECE ? nbytes - data_got : READ_PIECE;
        Py_ssize_t r = read_at(data_fd, d + data_got, n, data_pos + data_got, nowait);
        if (r < 0) {
            err = errno;
            break;
        }
        if (kind && r == n && bad < 0) {
            Py_ssize_t b = first_bad_chunk(kind, d + data_got, n, sums + data_got / bpc * 4, bpc);
            if (b >= 0) bad = data_got / bpc + b;
        }
        data_got += r;
        if (r < n || bad >= 0) break;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(sums);
    if (err) {
        Py_DECREF(data);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *result = Py_BuildValue("Nnnn", data, data_got, sums_got, bad);
    return result;
}

/* buffer(n[, align]) -> a bytearray of n bytes that are not zeroed first (bytearray(n) writes n
 * zeros). For read buffers whose every byte a read writes before anyone sees it (see
 * allocator.read_buffer). With `align` (a power of two), its bytes start at a multiple of it, as
 * O_DIRECT reads need: `align` more bytes are allocated, and the bytearray's start is moved past
 * the padding the way `del b[:pad]` moves it (no copy), then its size set to n (which must be
 * larger than `align`: CPython moves a bytearray shrunk below half its allocation). */
static PyObject *buffer(PyObject *self, PyObject *args) {
    Py_ssize_t n, align = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "n|n", &n, &align)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "buffer: negative size");
        return NULL;
    }
    if (align < 1 || (align & (align - 1)) != 0 || align > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "buffer: align must be a power of two up to 1 MiB");
        return NULL;
    }
    if (align == 1) return PyByteArray_FromStringAndSize(NULL, n);
    if (n <= align) {  /* a smaller size would make CPython move the bytes to a new allocation */
        PyErr_SetString(PyExc_ValueError, "buffer: an aligned buffer must be larger than its alignment");
        return NULL;
    }
    if (n > PY_SSIZE_T_MAX - align) return PyErr_NoMemory();
    PyObject *b = PyByteArray_FromStringAndSize(NULL, n + align);
    if (b == NULL) return NULL;
    Py_ssize_t pad = (Py_ssize_t)((align - ((uintptr_t)PyByteArray_AS_STRING(b) & (uintptr_t)(align - 1))) &
                                  (uintptr_t)(align - 1));
    if ((pad > 0 && PySequence_DelSlice(b, 0, pad) < 0) || PyByteArray_Resize(b, n) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    if (((uintptr_t)PyByteArray_AS_STRING(b) & (uintptr_t)(align - 1)) != 0) {  /* never, with CPython's bytearray */
        Py_DECREF(b);
        PyErr_SetString(PyExc_RuntimeError, "buffer: could not align the bytearray");
        return NULL;
    }
    return b;
}

static PyMethodDef methods[] = {
    {"first_mismatch", first_mismatch, METH_VARARGS,
     "first_mismatch(kind, data, sums, bytes_per_checksum) -> index of the first bad chunk, or -1"},
    {"crc", crc, METH_VARARGS, "crc(kind, data) -> CRC32 (kind 1) or CRC32C (kind 2) of data"},
    {"take_data_packets", take_data_packets, METH_VARARGS,
     "take_data_packets(kind, bpc, size, buf, at, pos, seqno, start, end, output, max_packet[, base, cell, gap]) -> "
     "(at, pos, seqno, taken): the READ_BLOCK packet loop's common case (see dtp.ReadBlockParser)"},
    {"read_chunks", read_chunks, METH_VARARGS,
     "read_chunks(kind, bpc, data_fd, data_pos, nbytes, sums_fd, sums_pos, nowait) -> (data, data_got, sums_got, "
     "bad): a local read of whole chunks and their checksums, verified without the GIL (see localio)"},
    {"buffer", buffer, METH_VARARGS,
     "buffer(n[, align]) -> a bytearray of n bytes, not zeroed first (starting at a multiple of align)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chunked_crc",
    "Chunk-by-chunk CRC verification in one call, and the READ_BLOCK packets that carry the chunks.", -1, methods};

PyMODINIT_FUNC PyInit__chunked_crc(void) {
    make_tables(1, 0xEDB88320u);
    make_tables(2, 0x82F63B78u);
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    use_sse42 = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "hardware_crc32c", use_sse42) < 0) Py_CLEAR(m);
    if (m != NULL && PyModule_AddIntConstant(m, "read_piece", READ_PIECE) < 0) Py_CLEAR(m);
    return m;
}
