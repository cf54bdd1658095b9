/*
 * hdfsfuse._chunked_crc: verify every checksum chunk of a buffer in one call, without the GIL.
 *
 * HDFS keeps one big-endian CRC per `bytes_per_checksum` bytes of a block (the last chunk may be
 * shorter). Checking a 64 KiB packet or a 4 MiB local read chunk by chunk from Python costs a call
 * and a slice per 512 bytes; here it is one call, and other threads run meanwhile.
 *
 *   first_mismatch(kind, data, sums, bytes_per_checksum) -> index of the first bad chunk, or -1
 *   crc(kind, data) -> the CRC of data
 *
 * kind 1 is CRC32 (zlib's, reflected polynomial 0xEDB88320), kind 2 is CRC32C (Castagnoli,
 * reflected polynomial 0x82F63B78); both start from 0xFFFFFFFF and end XORed with it. CRC32C uses
 * the SSE4.2 crc32 instruction when the CPU has it, and slicing-by-8 tables otherwise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
    Py_ssize_t bad = -1;
    const unsigned char *d = data.buf, *s = sums.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
#ifdef HAVE_SSE42_PATH
    if (kind == 2 && use_sse42) {
        Py_ssize_t whole = data.len / bpc; /* chunks of the full size */
        for (; i + 3 <= whole; i += 3) {
            uint32_t got[3];
            crc32c_sse42_x3(d + i * bpc, (size_t)bpc, got);
            for (int j = 0; j < 3; j++) {
                if (got[j] != be32(s + 4 * (i + j))) {
                    bad = i + j;
                    break;
                }
            }
            if (bad >= 0) break;
        }
    }
#endif
    for (; bad < 0 && i < count; i++) {
        Py_ssize_t off = i * bpc;
        size_t n = (size_t)(data.len - off < bpc ? data.len - off : bpc);
        if (crc_of(kind, d + off, n) != be32(s + 4 * i)) {
            bad = i;
            break;
        }
    }
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

static PyMethodDef methods[] = {
    {"first_mismatch", first_mismatch, METH_VARARGS,
     "first_mismatch(kind, data, sums, bytes_per_checksum) -> index of the first bad chunk, or -1"},
    {"crc", crc, METH_VARARGS, "crc(kind, data) -> CRC32 (kind 1) or CRC32C (kind 2) of data"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chunked_crc",
                                    "Chunk-by-chunk CRC verification in one call.", -1, methods};

PyMODINIT_FUNC PyInit__chunked_crc(void) {
    make_tables(1, 0xEDB88320u);
    make_tables(2, 0x82F63B78u);
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    use_sse42 = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL) PyModule_AddIntConstant(m, "hardware_crc32c", use_sse42);
    return m;
}
