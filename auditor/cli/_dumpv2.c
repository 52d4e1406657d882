/*
 * The compiled inner loop of `txn-audit dump` for log segments (issue 12).
 *
 * dump(fd, start, stop, file_size, out_fd, keys, codecs, ts_types, markers, tail) walks the
 * v2 record batches of a segment from byte `start`, checks each one's CRC-32C and
 * writes its JSON line to `out_fd`, exactly as the Python paths write it
 * (auditor/cli/dump_fast.py, tests/test_dump_native.py). It returns the position of
 * the first entry it did not write.
 *
 * It only writes what it can vouch for: a v2 batch whose length is sane, which lies
 * wholly inside the file, whose CRC matches, and, for a control batch, whose first
 * record is a plain COMMIT/ABORT marker. At anything else -- a legacy (v0/v1) entry,
 * a bad CRC, a cut or zero-filled tail, a file that shrank, an odd control record --
 * it stops, and the Python decoder carries on from that position: it is the one
 * that reports problems, with their kinds, positions and messages. So this file
 * holds no problem text and no field names: the keys and tokens are handed in from
 * Python (auditor/cli/dump_lines.py), in the order of FIELDS, which Python checks.
 *
 * Reads are positioned (pread) into a buffer of the process's own: a broker may
 * truncate the segment meanwhile, and a truncated mapping would be SIGBUS. The GIL
 * is released for the whole walk; of two helper threads, one writes the output and
 * the other takes half of each big read and of each big window's CRCs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define V2_HEADER 61
#define LOG_OVERHEAD 12
#define ABSURD_BATCH_BYTES (128 * 1024 * 1024) /* auditor/formats/batch.py */
#define READ_BYTES (8 * 1024 * 1024)
#define OUT_BYTES (1024 * 1024)
#define N_KEYS 26
#define N_CODECS 8
#define N_TS 2
#define N_MARKERS 2 /* ABORT, COMMIT: control types 0 and 1 */

/* The fields written, in order: auditor/cli/dump_native.py checks them against dump_lines.BATCH_KEYS. */
static const char *FIELDS[N_KEYS] = {
    "type", "position", "size", "base_offset", "last_offset", "last_offset_delta", "partition_leader_epoch",
    "magic", "crc", "crc_valid", "attributes", "compression", "timestamp_type", "is_transactional",
    "is_control", "has_delete_horizon", "base_timestamp", "max_timestamp", "delete_horizon_ms",
    "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count", "control_type",
    "coordinator_epoch",
};
enum { K_TYPE, K_POSITION, K_SIZE, K_BASE_OFFSET, K_LAST_OFFSET, K_LAST_OFFSET_DELTA, K_LEADER_EPOCH,
       K_MAGIC, K_CRC, K_CRC_VALID, K_ATTRIBUTES, K_COMPRESSION, K_TS_TYPE, K_TRANSACTIONAL, K_CONTROL,
       K_DELETE_HORIZON, K_BASE_TS, K_MAX_TS, K_DELETE_HORIZON_MS, K_PRODUCER_ID, K_PRODUCER_EPOCH,
       K_BASE_SEQ, K_LAST_SEQ, K_RECORD_COUNT, K_CONTROL_TYPE, K_COORDINATOR_EPOCH };

typedef struct {
    const char *p;
    size_t n;
} lit;

/* ---- CRC-32C (Castagnoli), as Kafka's DefaultRecordBatch checks it ---- */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_HW_CRC 1
static int use_hw;

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

/* Three batches' CRCs at once: the instruction's latency is 3 cycles and its throughput
 * one per cycle, so three independent streams run about three times as fast as one. */
__attribute__((target("sse4.2"))) static void crc_hw3(const unsigned char *const p[3], const size_t n[3], uint32_t out[3]) {
    size_t m = n[0] < n[1] ? n[0] : n[1];
    m = (m < n[2] ? m : n[2]) & ~(size_t)7;
    uint64_t a = 0xFFFFFFFFu, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;
    for (size_t i = 0; i < m; i += 8) {
        uint64_t va, vb, vc;
        memcpy(&va, p[0] + i, 8);
        memcpy(&vb, p[1] + i, 8);
        memcpy(&vc, p[2] + i, 8);
        a = __builtin_ia32_crc32di(a, va);
        b = __builtin_ia32_crc32di(b, vb);
        c = __builtin_ia32_crc32di(c, vc);
    }
    out[0] = ~crc_hw((uint32_t)a, p[0] + m, n[0] - m);
    out[1] = ~crc_hw((uint32_t)b, p[1] + m, n[1] - m);
    out[2] = ~crc_hw((uint32_t)c, p[2] + m, n[2] - m);
}
#endif

static uint32_t crc32c(const unsigned char *p, size_t n) {
#ifdef HAVE_HW_CRC
    if (use_hw) return ~crc_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc_sw(0xFFFFFFFFu, p, n);
}

/* ---- big-endian fields ---- */

static inline uint64_t be64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}
static inline uint32_t be32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}
static inline uint16_t be16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* ---- helper threads: one writes the output; one takes the second half of a big read or of a window's CRCs ----
 * Started once per dump: starting a thread per window costs more than the work it takes over
 * on windows of a few MiB. */

typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *(*fn)(void *);
    void *arg;
    int started, quit;
} helper_t;

static void *helper_main(void *a) {
    helper_t *h = a;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->fn && !h->quit) pthread_cond_wait(&h->cv, &h->mu);
        if (!h->fn) break;
        void *(*fn)(void *) = h->fn;
        void *arg = h->arg;
        pthread_mutex_unlock(&h->mu);
        fn(arg);
        pthread_mutex_lock(&h->mu);
        h->fn = NULL;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void helper_start(helper_t *h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->started = pthread_create(&h->thread, NULL, helper_main, h) == 0;
}

/* Run fn(arg) on the helper (1), or nowhere when there is none (0: the caller runs it). */
static int helper_submit(helper_t *h, void *(*fn)(void *), void *arg) {
    if (!h->started) return 0;
    pthread_mutex_lock(&h->mu);
    h->arg = arg;
    h->fn = fn;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 1;
}

static void helper_wait(helper_t *h) {
    pthread_mutex_lock(&h->mu);
    while (h->fn) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static void helper_stop(helper_t *h) {
    if (h->started) {
        pthread_mutex_lock(&h->mu);
        h->quit = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

/* ---- output ----
 * Lines are formatted into one buffer while a helper thread writes the other: on a dump of
 * many small batches, the kernel's copy of the output into the page cache costs as much as
 * formatting it, and the two then take one core each. */

typedef struct {
    int fd;
    char *bufs[2];
    char *buf; /* the one being filled: bufs[cur] */
    int cur;
    size_t len;
    helper_t writer;
    const char *pending; /* handed to the writer */
    size_t pending_len;
    int err; /* errno of the first failed write, 0 if none */
} out_t;

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void *write_pending(void *arg) {
    out_t *o = arg;
    o->err = write_all(o->fd, o->pending, o->pending_len);
    return NULL;
}

static int out_open(out_t *o, int fd, size_t cap) {
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->bufs[0] = malloc(cap);
    o->bufs[1] = malloc(cap);
    o->buf = o->bufs[0];
    if (!o->bufs[0] || !o->bufs[1]) return 0;
    helper_start(&o->writer);
    return 1;
}

/* Hand the filled buffer to the writer (or write it, without one); returns the error so far. */
static int out_flush(out_t *o) {
    helper_wait(&o->writer); /* the previous buffer is written: o->err is settled */
    if (!o->err && o->len) {
        o->pending = o->buf;
        o->pending_len = o->len;
        if (helper_submit(&o->writer, write_pending, o)) {
            o->cur ^= 1;
            o->buf = o->bufs[o->cur];
        } else {
            write_pending(o);
        }
    }
    o->len = 0;
    return o->err;
}

/* Write what is left, stop the writer; returns the first write error (0 if none). */
static int out_close(out_t *o) {
    out_flush(o);
    helper_wait(&o->writer);
    helper_stop(&o->writer);
    free(o->bufs[0]);
    free(o->bufs[1]);
    return o->err;
}

static const char DIGITS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static inline char *put_i64(char *o, int64_t v) {
    char tmp[24];
    char *e = tmp + sizeof tmp, *s = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        unsigned d = (unsigned)(u % 100) * 2;
        u /= 100;
        *--s = DIGITS[d + 1];
        *--s = DIGITS[d];
    }
    if (u >= 10) {
        *--s = DIGITS[u * 2 + 1];
        *--s = DIGITS[u * 2];
    } else {
        *--s = (char)('0' + u);
    }
    if (v < 0) *--s = '-';
    memcpy(o, s, (size_t)(e - s));
    return o + (e - s);
}

static inline char *put(char *o, lit l) {
    memcpy(o, l.p, l.n);
    return o + l.n;
}

/* ---- varints of a control batch's first record ---- */

/* zig-zag varint of at most `max_bytes` bytes in [*p, end); 0 when malformed */
static int varint(const unsigned char **p, const unsigned char *end, int max_bytes, int64_t *out) {
    uint64_t raw = 0;
    for (int i = 0, shift = 0; i < max_bytes; i++, shift += 7) {
        if (*p >= end) return 0;
        unsigned char b = *(*p)++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            if (max_bytes == 5) raw &= 0xFFFFFFFFu; /* as auditor.formats.binary.Reader.varint */
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 1;
        }
    }
    return 0;
}

/* A plain marker as the first record of an uncompressed control batch: its type (0 ABORT,
 * 1 COMMIT) and coordinator epoch. 0 for anything else: the Python decoder judges it. */
static int plain_marker(const unsigned char *payload, const unsigned char *end, int *type, int32_t *epoch) {
    const unsigned char *p = payload;
    int64_t len, v, klen, vlen, nheaders;
    if (!varint(&p, end, 5, &len) || len <= 0 || len > end - p) return 0;
    const unsigned char *rend = p + len;
    if (p + 1 > rend) return 0;
    p++; /* attributes */
    if (!varint(&p, rend, 10, &v) || !varint(&p, rend, 5, &v)) return 0; /* timestamp, offset deltas */
    if (!varint(&p, rend, 5, &klen) || klen < 4 || klen > rend - p) return 0;
    const unsigned char *key = p;
    p += klen;
    if ((int16_t)be16(key) < 0) return 0; /* key version */
    int16_t t = (int16_t)be16(key + 2);
    if (t != 0 && t != 1) return 0;
    if (!varint(&p, rend, 5, &vlen) || vlen < 6 || vlen > rend - p) return 0;
    const unsigned char *value = p;
    p += vlen;
    if ((int16_t)be16(value) < 0) return 0; /* value version */
    if (!varint(&p, rend, 5, &nheaders) || nheaders != 0 || p != rend) return 0;
    *type = t;
    *epoch = (int32_t)be32(value + 2);
    return 1;
}

/* ---- the walk ---- */

typedef struct {
    int fd;
    helper_t *helper;
    unsigned char *buf;
    size_t cap;
    int64_t at;  /* file position of buf[0] */
    size_t len;  /* bytes held */
} reader_t;

#define SPLIT_BYTES (1024 * 1024)

typedef struct {
    int fd;
    unsigned char *into;
    size_t want;
    int64_t at;
    size_t got; /* bytes read before the end of the file, an error or `want` */
} fill_t;

static void *fill(void *arg) {
    fill_t *f = arg;
    while (f->got < f->want) {
        ssize_t got = pread(f->fd, f->into + f->got, f->want - f->got, f->at + (int64_t)f->got);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        f->got += (size_t)got;
    }
    return NULL;
}

/* Make [pos, pos + n) held; 0 if the file does not hold it (short read, error, too big). */
static int hold(reader_t *r, int64_t pos, size_t n) {
    if (pos >= r->at && pos + (int64_t)n <= r->at + (int64_t)r->len) return 1;
    size_t keep = 0;
    if (pos >= r->at && pos < r->at + (int64_t)r->len) {
        keep = (size_t)(r->at + (int64_t)r->len - pos);
        memmove(r->buf, r->buf + (pos - r->at), keep);
    }
    r->at = pos;
    r->len = keep;
    if (n > r->cap) {
        size_t cap = n + READ_BYTES;
        unsigned char *b = realloc(r->buf, cap);
        if (!b) return 0;
        r->buf = b;
        r->cap = cap;
    }
    /* the first fill: two halves at once when it is big (copying out of the page cache is what
     * a big read costs, and each core copies its half) */
    size_t want = r->cap - r->len;
    if (want >= 2 * SPLIT_BYTES) {
        size_t half = want / 2;
        fill_t second = {r->fd, r->buf + r->len + half, want - half, pos + (int64_t)(r->len + half), 0};
        int helped = helper_submit(r->helper, fill, &second);
        if (!helped) fill(&second);
        fill_t first = {r->fd, r->buf + r->len, half, pos + (int64_t)r->len, 0};
        fill(&first);
        if (helped) helper_wait(r->helper);
        /* keep what is contiguous from the start: a short first half ends the held bytes there */
        r->len += first.got;
        if (first.got == half) r->len += second.got;
    }
    if (r->len < n) { /* a small fill, or what a short first half left */
        fill_t rest = {r->fd, r->buf + r->len, r->cap - r->len, pos + (int64_t)r->len, 0};
        fill(&rest);
        r->len += rest.got;
    }
    return r->len >= n;
}

/* The read buffer, in transparent huge pages where the kernel gives them on request: the copy out
 * of the page cache and the CRCs then walk 4 page-table entries per window instead of 2,048. */
static unsigned char *read_buffer(void) {
    void *p = NULL;
    if (posix_memalign(&p, 2 * 1024 * 1024, READ_BYTES) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, READ_BYTES, MADV_HUGEPAGE);
#endif
    return p;
}

typedef struct {
    int64_t pos;
    const unsigned char *h;
    size_t entry;
} pending_t;

#define MAX_GROUP 65536        /* batches framed, checked and written together */
#define SHARED_CRC_BYTES (1024 * 1024) /* from this many bytes of a window on, two threads compute its CRCs */

typedef struct {
    pending_t *group;
    uint32_t *crc;
    int from, to;
} crc_job_t;

static void *crc_range(void *arg) {
    crc_job_t *j = arg;
    int i = j->from;
#ifdef HAVE_HW_CRC
    if (use_hw)
        for (; i + 3 <= j->to; i += 3) {
            const unsigned char *ps[3];
            size_t ns[3];
            for (int k = 0; k < 3; k++) {
                ps[k] = j->group[i + k].h + 21;
                ns[k] = j->group[i + k].entry - 21;
            }
            crc_hw3(ps, ns, j->crc + i);
        }
#endif
    for (; i < j->to; i++) j->crc[i] = crc32c(j->group[i].h + 21, j->group[i].entry - 21);
    return NULL;
}

/* The CRC-32C of each batch's bytes from its attributes on: the second half of a big window's
 * bytes on a thread of its own. */
static void crc_all(helper_t *helper, pending_t *group, uint32_t *crc, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += group[i].entry;
    int split = n;
    if (total >= SHARED_CRC_BYTES && n >= 2) {
        size_t half = 0;
        for (split = 0; split < n - 1 && half < total / 2; split++) half += group[split].entry;
    }
    crc_job_t second = {group, crc, split, n};
    int helped = split < n && helper_submit(helper, crc_range, &second);
    crc_job_t first = {group, crc, 0, helped ? split : n};
    crc_range(&first);
    if (helped) helper_wait(helper);
}

static PyObject *dump(PyObject *self, PyObject *args) {
    int fd, out_fd;
    long long start, stop, file_size;
    PyObject *keys_o, *codecs_o, *ts_o, *markers_o;
    Py_buffer tail_b;
    if (!PyArg_ParseTuple(args, "iLLLiO!O!O!O!y*", &fd, &start, &stop, &file_size, &out_fd, &PyTuple_Type, &keys_o,
                          &PyTuple_Type, &codecs_o, &PyTuple_Type, &ts_o, &PyTuple_Type, &markers_o, &tail_b))
        return NULL;
    lit keys[N_KEYS], codecs[N_CODECS], ts[N_TS], markers[N_MARKERS], tail = {tail_b.buf, (size_t)tail_b.len};
    size_t line_max = tail.n + 64;
    struct { PyObject *t; lit *into; Py_ssize_t n; } lists[4] = {
        {keys_o, keys, N_KEYS}, {codecs_o, codecs, N_CODECS}, {ts_o, ts, N_TS}, {markers_o, markers, N_MARKERS}};
    for (int l = 0; l < 4; l++) {
        if (PyTuple_GET_SIZE(lists[l].t) != lists[l].n) {
            PyBuffer_Release(&tail_b);
            return PyErr_Format(PyExc_ValueError, "expected %zd literals, got %zd", lists[l].n, PyTuple_GET_SIZE(lists[l].t));
        }
        for (Py_ssize_t i = 0; i < lists[l].n; i++) {
            PyObject *b = PyTuple_GET_ITEM(lists[l].t, i);
            if (!PyBytes_Check(b)) {
                PyBuffer_Release(&tail_b);
                return PyErr_Format(PyExc_TypeError, "literals must be bytes");
            }
            lists[l].into[i].p = PyBytes_AS_STRING(b);
            lists[l].into[i].n = (size_t)PyBytes_GET_SIZE(b);
            line_max += lists[l].into[i].n + 24;
        }
    }
    helper_t helper;
    reader_t r = {fd, &helper, read_buffer(), READ_BYTES, 0, 0};
    out_t o;
    int64_t pos = start;
    if (!r.buf || !out_open(&o, out_fd, OUT_BYTES + line_max)) {
        free(r.buf);
        free(o.bufs[0]);
        free(o.bufs[1]);
        PyBuffer_Release(&tail_b);
        return PyErr_NoMemory();
    }
    static const lit T = {"true", 4}, F = {"false", 5}, NUL = {"null", 4};
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    pending_t *group = malloc(sizeof(pending_t) * MAX_GROUP);
    uint32_t *crc = malloc(sizeof(uint32_t) * MAX_GROUP);
    int ng = 0;
    int done = !group || !crc;
    helper_start(&helper);
    while (!done) {
        /* frame the batches the buffer holds (reading more only for the first), check their CRCs
         * together, then write them: the CRCs of a big window are shared with a second thread */
        ng = 0;
        int64_t p = pos;
        while (ng < MAX_GROUP && p < stop) {
            if (file_size - p < V2_HEADER) { done = 1; break; }
            if (ng == 0 ? !hold(&r, p, V2_HEADER) : p + V2_HEADER > r.at + (int64_t)r.len) {
                done = ng == 0;
                break;
            }
            const unsigned char *h = r.buf + (p - r.at);
            int32_t size = (int32_t)be32(h + 8);
            if (h[16] != 2 || size < V2_HEADER - LOG_OVERHEAD || size > ABSURD_BATCH_BYTES) { done = 1; break; }
            size_t entry = (size_t)size + LOG_OVERHEAD;
            if ((int64_t)entry > file_size - p) { done = 1; break; }
            if (ng == 0 ? !hold(&r, p, entry) : p + (int64_t)entry > r.at + (int64_t)r.len) {
                done = ng == 0;
                break;
            }
            group[ng].pos = p;
            group[ng].entry = entry;
            ng++;
            p += (int64_t)entry;
        }
        for (int i = 0; i < ng; i++) group[i].h = r.buf + (group[i].pos - r.at);
        crc_all(&helper, group, crc, ng);
        for (int i = 0; i < ng; i++) {
            const unsigned char *h = group[i].h;
            uint32_t stored = be32(h + 17);
            if (crc[i] != stored) { done = 1; break; }
            uint16_t attr = be16(h + 21);
            int codec = attr & 7, log_append = (attr >> 3) & 1, txn = (attr >> 4) & 1, ctl = (attr >> 5) & 1,
                horizon = (attr >> 6) & 1;
            int32_t record_count = (int32_t)be32(h + 57), delta = (int32_t)be32(h + 23);
            int64_t base_ts = (int64_t)be64(h + 27);
            int marker = -1;
            int32_t coordinator_epoch = 0;
            if (ctl && record_count > 0) {
                if (codec != 0 || !plain_marker(h + V2_HEADER, h + group[i].entry, &marker, &coordinator_epoch)) {
                    done = 1;
                    break;
                }
            }
            int64_t base_offset = (int64_t)be64(h);
            int64_t seq = (int32_t)be32(h + 53), last_seq;
            if (seq < 0) last_seq = -1; /* DefaultRecordBatch.incrementSequence: wraps to 0 past Integer.MAX_VALUE */
            else if (seq > INT32_MAX - (int64_t)delta) last_seq = (int64_t)delta - (INT32_MAX - seq) - 1;
            else last_seq = seq + delta;
            char *w = o.buf + o.len;
            w = put(w, keys[K_TYPE]); /* with its value */
            w = put_i64(put(w, keys[K_POSITION]), group[i].pos);
            w = put_i64(put(w, keys[K_SIZE]), (int64_t)group[i].entry);
            w = put_i64(put(w, keys[K_BASE_OFFSET]), base_offset);
            w = put_i64(put(w, keys[K_LAST_OFFSET]), (int64_t)((uint64_t)base_offset + (uint64_t)(int64_t)delta));
            w = put_i64(put(w, keys[K_LAST_OFFSET_DELTA]), delta);
            w = put_i64(put(w, keys[K_LEADER_EPOCH]), (int32_t)be32(h + 12));
            w = put_i64(put(w, keys[K_MAGIC]), 2);
            w = put_i64(put(w, keys[K_CRC]), stored);
            w = put(put(w, keys[K_CRC_VALID]), T);
            w = put_i64(put(w, keys[K_ATTRIBUTES]), attr);
            w = put(put(w, keys[K_COMPRESSION]), codecs[codec]);
            w = put(put(w, keys[K_TS_TYPE]), ts[log_append]);
            w = put(put(w, keys[K_TRANSACTIONAL]), txn ? T : F);
            w = put(put(w, keys[K_CONTROL]), ctl ? T : F);
            w = put(put(w, keys[K_DELETE_HORIZON]), horizon ? T : F);
            w = put_i64(put(w, keys[K_BASE_TS]), base_ts);
            w = put_i64(put(w, keys[K_MAX_TS]), (int64_t)be64(h + 35));
            w = put(w, keys[K_DELETE_HORIZON_MS]);
            w = horizon ? put_i64(w, base_ts) : put(w, NUL);
            w = put_i64(put(w, keys[K_PRODUCER_ID]), (int64_t)be64(h + 43));
            w = put_i64(put(w, keys[K_PRODUCER_EPOCH]), (int16_t)be16(h + 51));
            w = put_i64(put(w, keys[K_BASE_SEQ]), seq);
            w = put_i64(put(w, keys[K_LAST_SEQ]), last_seq);
            w = put_i64(put(w, keys[K_RECORD_COUNT]), record_count);
            w = put(put(w, keys[K_CONTROL_TYPE]), marker < 0 ? NUL : markers[marker]);
            w = put(w, keys[K_COORDINATOR_EPOCH]);
            w = marker < 0 ? put(w, NUL) : put_i64(w, coordinator_epoch);
            w = put(w, tail);
            o.len = (size_t)(w - o.buf);
            pos = group[i].pos + (int64_t)group[i].entry;
            if (o.len >= OUT_BYTES && out_flush(&o)) {
                done = 1;
                break;
            }
        }
        if (pos >= stop) done = 1;
    }
    err = out_close(&o);
    helper_stop(&helper);
    free(group);
    free(crc);
    Py_END_ALLOW_THREADS
    free(r.buf);
    PyBuffer_Release(&tail_b);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(pos);
}

static PyMethodDef methods[] = {
    {"dump", dump, METH_VARARGS,
     "dump(fd, start, stop, file_size, out_fd, keys, codecs, ts_types, markers, tail) -> position reached"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dumpv2", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__dumpv2(void) {
    crc_init();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    use_hw = __builtin_cpu_supports("sse4.2");
#endif
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *fields = PyTuple_New(N_KEYS);
    if (!fields) return NULL;
    for (int i = 0; i < N_KEYS; i++) PyTuple_SET_ITEM(fields, i, PyUnicode_FromString(FIELDS[i]));
    if (PyModule_AddObject(m, "FIELDS", fields) < 0) return NULL;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC",
#ifdef HAVE_HW_CRC
                                use_hw
#else
                                0
#endif
                                ) < 0)
        return NULL;
    return m;
}
