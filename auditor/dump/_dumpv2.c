/*
 * The compiled inner loop of `txn-audit dump` for log segments.
 *
 * dump(fd, start, stop, file_size, out_fd, keys, codecs, ts_types, markers, tail) walks the
 * v2 record batches of a segment from byte `start`, checks each one's CRC-32C and
 * writes its JSON line to `out_fd`, exactly as the Python paths write it
 * (auditor/dump/_fast.py, tests/test_dump_native.py). It returns the position of
 * the first entry it did not write.
 *
 * It only writes what it can vouch for: a v2 batch whose length is sane, which lies
 * wholly inside the file, whose CRC matches, and, for a control batch, whose first
 * record is a plain COMMIT/ABORT marker. At anything else -- a legacy (v0/v1) entry,
 * a bad CRC, a cut or zero-filled tail, a file that shrank, an odd control record --
 * it stops, and the Python decoder carries on from that position: it is the one
 * that reports problems, with their kinds, positions and messages. So this file
 * holds no problem text and no field names: the keys and tokens are handed in from
 * Python (auditor/dump/_lines.py), in the order of FIELDS, which Python checks.
 *
 * Reads are positioned (pread) into a buffer of the process's own: a broker may
 * truncate the segment meanwhile, and a truncated mapping would be SIGBUS. The GIL
 * is released for the whole walk; of two helper threads, one writes the output and
 * the other takes half of each big read and of each big window's CRCs.
 *
 * records(...) does the same for `dump --records` of a data topic: see its comment
 * below. Buffers and threads are made once per process (ctx_t), not per file.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
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
#define OUT_SLACK (1024 * 1024) /* room past OUT_BYTES for the line that crosses it */
#define N_KEYS 26
#define N_CODECS 8
#define N_TS 2
#define N_MARKERS 7 /* control types 0..6: ABORT, COMMIT, LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER,
                       KRAFT_VERSION, KRAFT_VOTERS (ControlRecordType, Kafka 4.x) */

/* The fields written, in order: auditor/dump/_native.py checks them against _lines.BATCH_KEYS. */
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
    helper_t *writer; /* the context's: kept from one call to the next */
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

static void out_open(out_t *o, int fd, char *bufs[2], helper_t *writer) {
    memset(o, 0, sizeof *o);
    o->fd = fd;
    o->bufs[0] = bufs[0];
    o->bufs[1] = bufs[1];
    o->buf = o->bufs[0];
    o->writer = writer;
}

/* Hand the filled buffer to the writer (or write it, without one); returns the error so far. */
static int out_flush(out_t *o) {
    helper_wait(o->writer); /* the previous buffer is written: o->err is settled */
    if (!o->err && o->len) {
        o->pending = o->buf;
        o->pending_len = o->len;
        if (helper_submit(o->writer, write_pending, o)) {
            o->cur ^= 1;
            o->buf = o->bufs[o->cur];
        } else {
            write_pending(o);
        }
    }
    o->len = 0;
    return o->err;
}

/* Write what is left and wait for it; returns the first write error (0 if none). The last
 * buffer is written on this thread: handing it over would only be waited for (and on a dump of
 * many small files, one handover per file is most of a file's time in here). */
static int out_close(out_t *o) {
    helper_wait(o->writer);
    if (!o->err && o->len) o->err = write_all(o->fd, o->buf, o->len);
    o->len = 0;
    return o->err;
}

/* Bytes of any length (a batch's lines from the Python decoder): copied in, or, when they do not
 * fit the buffer, written as they are once what precedes them is out. */
static int out_bytes(out_t *o, const char *p, size_t n) {
    if (o->len + n <= OUT_BYTES + OUT_SLACK) {
        memcpy(o->buf + o->len, p, n);
        o->len += n;
        return o->len >= OUT_BYTES ? out_flush(o) : o->err;
    }
    if (out_flush(o)) return o->err;
    helper_wait(o->writer);
    if (!o->err) o->err = write_all(o->fd, p, n);
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

/* The first record of an uncompressed control batch, as auditor.formats.records.decode_control
 * reads it (after Kafka 4.3.1's ControlRecordType.parseTypeId, whose ids 0..6 are ABORT, COMMIT,
 * LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS, and
 * EndTransactionMarker.deserializeValue): its
 * type, 0..6, and for a marker (0 ABORT, 1 COMMIT) the coordinator epoch (-1 for the other types,
 * whose value is not read). 0 for anything else: the Python decoder judges it. */
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
    if (t < 0 || t >= N_MARKERS) return 0;
    if (!varint(&p, rend, 5, &vlen) || vlen > rend - p) return 0;
    if (t <= 1 && vlen < 6) return 0; /* a marker's value: version and coordinator epoch */
    const unsigned char *value = p;
    if (vlen > 0) p += vlen; /* a negative length is a null value (read only for markers) */
    if (t <= 1 && (int16_t)be16(value) < 0) return 0; /* value version */
    if (!varint(&p, rend, 5, &nheaders) || nheaders != 0 || p != rend) return 0;
    *type = t;
    *epoch = t <= 1 ? (int32_t)be32(value + 2) : -1;
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
    int64_t end; /* the file's size as sized: no read is asked for past it */
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
     * a big read costs, and each core copies its half); a small file's is one read on this thread
     * (handing half of a 4 KB file to the helper cost more than reading it: 1,486 small files) */
    size_t want = r->cap - r->len;
    int64_t left = r->end - (pos + (int64_t)r->len);
    if (r->end - pos >= (int64_t)n && (int64_t)want > left) want = (size_t)left;
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

/* ---- what a call needs, kept from one call to the next ----
 * A dump of many small files (a broker's log dirs: thousands of segments of a few KB) called
 * this once per file, and each call allocated an 8 MiB read buffer (a fresh transparent huge page
 * to zero), two output buffers and two threads: ~150 us a file, more than the decoding of most.
 * One context is kept for the process (a second caller meanwhile gets a private one). */

/* libdeflate's decompressor API (libdeflate.h, v1.x): results 0 success, 3 insufficient space */
typedef void *(*ld_alloc_t)(void);
typedef void (*ld_free_t)(void *d);
typedef int (*ld_gzip_t)(void *d, const void *in, size_t in_n, void *out, size_t out_n, size_t *in_used,
                         size_t *out_used);
static ld_alloc_t ld_alloc;
static ld_free_t ld_free;
static ld_gzip_t ld_gzip;

typedef struct {
    unsigned char *p;
    size_t len, cap;
} buf_t;

typedef struct rec rec_t;

typedef struct {
    unsigned char *rbuf;
    size_t rcap;
    char *obufs[2];
    helper_t writer, helper;
    pending_t *group;
    uint32_t *crc;
    buf_t inflated; /* records(): a batch's records, lz4- or gzip-decompressed */
    void *gunzip;   /* records(): this context's libdeflate decompressor, made at its first gzip batch */
    rec_t *recs;    /* records(): what the walk read of them */
    size_t rcap_recs;
    int ready, shared;
} ctx_t;

static ctx_t shared_ctx;
static int shared_busy; /* set and cleared with the GIL held */

static void ctx_free(ctx_t *c) {
    if (c->writer.started || c->helper.started) {
        helper_stop(&c->writer);
        helper_stop(&c->helper);
    }
    free(c->rbuf);
    free(c->obufs[0]);
    free(c->obufs[1]);
    free(c->group);
    free(c->crc);
    free(c->inflated.p);
    if (c->gunzip && ld_free) ld_free(c->gunzip);
    free(c->recs);
    memset(c, 0, sizeof *c);
}

static int ctx_init(ctx_t *c) {
    memset(c, 0, sizeof *c);
    c->rbuf = read_buffer();
    c->rcap = READ_BYTES;
    c->obufs[0] = malloc(OUT_BYTES + OUT_SLACK);
    c->obufs[1] = malloc(OUT_BYTES + OUT_SLACK);
    c->group = malloc(sizeof(pending_t) * MAX_GROUP);
    c->crc = malloc(sizeof(uint32_t) * MAX_GROUP);
    if (!c->rbuf || !c->obufs[0] || !c->obufs[1] || !c->group || !c->crc) {
        ctx_free(c);
        return 0;
    }
    helper_start(&c->writer);
    helper_start(&c->helper);
    c->ready = 1;
    return 1;
}

/* With the GIL held. NULL (MemoryError set) when nothing could be allocated. */
static ctx_t *ctx_get(void) {
    if (!shared_busy) {
        if (!shared_ctx.ready && !ctx_init(&shared_ctx)) {
            PyErr_NoMemory();
            return NULL;
        }
        shared_ctx.shared = 1;
        shared_busy = 1;
        return &shared_ctx;
    }
    ctx_t *c = malloc(sizeof *c);
    if (!c || !ctx_init(c)) {
        free(c);
        PyErr_NoMemory();
        return NULL;
    }
    return c;
}

static void ctx_put(ctx_t *c) {
    if (c == &shared_ctx) {
        shared_busy = 0;
        return;
    }
    ctx_free(c);
    free(c);
}

/* A child forked while the helper threads exist has none of them: it starts afresh (the
 * parent's buffers are left to it unfreed, their state unknown). */
static void ctx_after_fork(void) {
    memset(&shared_ctx, 0, sizeof shared_ctx);
    shared_busy = 0;
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
    if (line_max > OUT_SLACK) {
        PyBuffer_Release(&tail_b);
        return PyErr_Format(PyExc_ValueError, "literals too long");
    }
    ctx_t *ctx = ctx_get();
    if (!ctx) {
        PyBuffer_Release(&tail_b);
        return NULL;
    }
    reader_t r = {fd, &ctx->helper, ctx->rbuf, ctx->rcap, 0, 0, file_size};
    out_t o;
    int64_t pos = start;
    out_open(&o, out_fd, ctx->obufs, &ctx->writer);
    static const lit T = {"true", 4}, F = {"false", 5}, NUL = {"null", 4};
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    pending_t *group = ctx->group;
    uint32_t *crc = ctx->crc;
    helper_t *helper = &ctx->helper;
    int ng = 0;
    int done = 0;
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
        crc_all(helper, group, crc, ng);
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
            w = marker < 0 || marker > 1 ? put(w, NUL) : put_i64(w, coordinator_epoch);
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
    Py_END_ALLOW_THREADS
    ctx->rbuf = r.buf; /* hold() may have grown it */
    ctx->rcap = r.cap;
    ctx_put(ctx);
    PyBuffer_Release(&tail_b);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLongLong(pos);
}

/* ---- records: `dump --records` of a data topic's segment ----
 *
 * records(fd, start, stop, file_size, out_fd, keys, end, inflate, fallback, libraries) walks
 * the v2 batches from `start` as dump() frames them (without their CRC: the per-object path
 * writes the records of a batch whatever its CRC, auditor.ingest.segments.iter_data_records),
 * and writes one JSON line per record of every non-control batch, as
 * auditor.dump._run._records + json.dumps writes it; a control batch's records (markers, lines
 * of another shape, one per transaction) are left to `fallback`. It returns where it stopped framing
 * (a legacy entry, a cut tail, ...: the Python path goes on from there).
 *
 * A batch's records are walked as auditor.formats.records.iter_records reads them (Kafka 4.3.1's
 * org.apache.kafka.common.record.internal.DefaultRecord.readFrom: length, attributes, timestamp
 * and offset deltas, key, value, headers)
 * and written only when all of them read cleanly and fill the batch exactly. Anything else -- a
 * malformed record, bytes left over, an offset or timestamp past int64, a header key that is not
 * UTF-8, a payload or codec this code does not decompress -- goes to `fallback(position)`, the
 * Python decoder, for that one batch: it returns the batch's lines (those of the records before
 * the failure), so a damaged batch dumps exactly as before.
 *
 * Decompression: lz4 here, with the LZ4 block decoder of the `lz4` package (LZ4_decompress_safe,
 * looked up in the library `libraries()[0]` names, the one auditor.formats.codecs uses) and the
 * frame read as codecs._lz4_frame reads it (Kafka 4.3.1's org.apache.kafka.common.compress.
 * Lz4BlockInputStream.readHeader / readBlock: FLG, BD, header checksum, blocks); gzip here too,
 * with libdeflate (the `deflate` package's build of it, `libraries()[1]`): twice zlib's speed on
 * a producer's batch (15 against 32 us for 22 KB), and only members of the plain form every
 * producer writes (FLG 0); anything libdeflate refuses, a member with header fields, an inflate
 * past the limit, goes to codecs._gzip through the fallback, which gives the verdict and the
 * message (zlib's, as java.util.zip's). libdeflate checks what zlib checks of a plain member:
 * the deflate stream, the CRC-32 and the length (ISIZE). The other codecs through
 * `inflate(codec, payload)`, which is codecs.decompress. */

#define MAX_PAYLOAD_BYTES (64 * 1024 * 1024) /* auditor/formats/batch.py: read_payload's limit */
#define INFLATE_LIMIT (64 * 1024 * 1024)     /* auditor/formats/codecs.py: DEFAULT_INFLATE_LIMIT */
#define HEADER_KEYS_MAX (64 * 1024)          /* JSON bytes of one record's header keys; more: Python */
#define N_RKEYS 8

typedef int (*lz4_safe_t)(const char *src, char *dst, int src_size, int dst_capacity);
static lz4_safe_t lz4_safe;
static int libs_tried;


/* xxHash32 (the LZ4 frame descriptor's checksum is its second byte) */
static uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
static uint32_t xxh32(const unsigned char *p, size_t n, uint32_t seed) {
    const uint32_t P1 = 2654435761u, P2 = 2246822519u, P3 = 3266489917u, P4 = 668265263u, P5 = 374761393u;
    size_t i = 0;
    uint32_t h;
    if (n >= 16) {
        uint32_t v[4] = {seed + P1 + P2, seed + P2, seed, seed - P1};
        for (; i + 16 <= n; i += 16)
            for (int k = 0; k < 4; k++) {
                uint32_t lane;
                memcpy(&lane, p + i + 4 * k, 4);
                v[k] = rotl32(v[k] + lane * P2, 13) * P1;
            }
        h = rotl32(v[0], 1) + rotl32(v[1], 7) + rotl32(v[2], 12) + rotl32(v[3], 18);
    } else {
        h = seed + P5;
    }
    h += (uint32_t)n;
    for (; i + 4 <= n; i += 4) {
        uint32_t lane;
        memcpy(&lane, p + i, 4);
        h = rotl32(h + lane * P3, 17) * P4;
    }
    for (; i < n; i++) h = rotl32(h + p[i] * P5, 11) * P1;
    h ^= h >> 15;
    h *= P2;
    h ^= h >> 13;
    h *= P3;
    h ^= h >> 16;
    return h;
}

static int buf_room(buf_t *b, size_t n) {
    if (b->len + n <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + n) cap *= 2;
    unsigned char *q = realloc(b->p, cap);
    if (!q) return 0;
    b->p = q;
    b->cap = cap;
    return 1;
}

static const size_t LZ4_BLOCK_MAX[8] = {0, 0, 0, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20};

/* An LZ4 frame as codecs._lz4_frame reads it (magic >= 1: the header checksum is checked): into
 * `out`; 0 when codecs._lz4_frame would raise (or the block decoder is missing). */
static int lz4_frame(const unsigned char *d, size_t n, buf_t *out) {
    out->len = 0;
    if (!lz4_safe || n < 7) return 0;
    uint32_t m;
    memcpy(&m, d, 4);
    if (m != 0x184D2204u) return 0; /* little-endian, as be32() assumes */
    unsigned flg = d[4], bd = d[5];
    if ((flg >> 6) != 1 || !(flg & 0x20)) return 0;
    int block_checksum = (flg & 0x10) != 0;
    size_t block_max = LZ4_BLOCK_MAX[(bd >> 4) & 7];
    if (!block_max) return 0;
    size_t pos = 6 + ((flg & 0x08) ? 8 : 0);
    if (pos + 1 > n) return 0;
    if (d[pos] != ((xxh32(d + 4, pos - 4, 0) >> 8) & 0xFF)) return 0;
    pos++;
    for (;;) {
        if (pos + 4 > n) return 0;
        uint32_t size;
        memcpy(&size, d + pos, 4);
        pos += 4;
        if (size == 0) break;
        int stored = (size & 0x80000000u) != 0;
        size &= 0x7FFFFFFFu;
        if (size > block_max || pos + size > n) return 0;
        if (!buf_room(out, block_max)) return 0;
        if (stored) {
            memcpy(out->p + out->len, d + pos, size);
            out->len += size;
        } else {
            int got = lz4_safe((const char *)d + pos, (char *)out->p + out->len, (int)size, (int)block_max);
            if (got < 0) return 0;
            out->len += (size_t)got;
        }
        if (out->len > INFLATE_LIMIT) return 0;
        pos += size + (block_checksum ? 4 : 0);
    }
    return 1;
}

/* A gzip payload as codecs._gzip reads it (members one after another until the rest is empty or
 * does not start with the gzip magic: trailing bytes are ignored, as java.util.zip does): into
 * `out`; 0 when codecs._gzip should judge it (see above). */
static int gzip_members(void **dec, const unsigned char *d, size_t n, buf_t *out) {
    out->len = 0;
    if (!ld_gzip) return 0;
    if (!*dec && !(*dec = ld_alloc())) return 0;
    size_t pos = 0;
    while (pos < n) {
        /* 10-byte header, at least an empty deflate block, 8-byte trailer; CM 8 and no FLG bits */
        if (n - pos < 18 || d[pos] != 0x1f || d[pos + 1] != 0x8b || d[pos + 2] != 8 || d[pos + 3] != 0) return 0;
        /* room for the output: the trailer's ISIZE when this member is the payload's last (the
         * usual case: one member), else 4x the input, doubled until it fits */
        size_t room = 4 * (n - pos) + 4096;
        uint32_t isize;
        memcpy(&isize, d + n - 4, 4); /* little-endian, as be32() assumes */
        if (isize >= room && isize <= 1032 * (n - pos)) room = (size_t)isize + 1;
        for (;;) {
            if (room > INFLATE_LIMIT + 1 - out->len) room = INFLATE_LIMIT + 1 - out->len;
            if (!buf_room(out, room)) return 0;
            size_t used = 0, got = 0;
            int r = ld_gzip(*dec, d + pos, n - pos, out->p + out->len, room, &used, &got);
            if (r == 0) {
                out->len += got;
                pos += used;
                break;
            }
            if (r != 3 || out->len + room > INFLATE_LIMIT) return 0;
            room *= 2;
        }
        if (out->len > INFLATE_LIMIT) return 0;
        if (pos < n && (n - pos < 2 || d[pos] != 0x1f || d[pos + 1] != 0x8b)) break;
    }
    return 1;
}

/* The libraries' decoders, looked up once (a file `libraries()` does not name, or that does not
 * load, leaves its codec to Python). */
static void *load(PyObject *paths, Py_ssize_t i) {
    PyObject *path = PyTuple_Check(paths) && PyTuple_GET_SIZE(paths) > i ? PyTuple_GET_ITEM(paths, i) : NULL;
    if (!path || !PyUnicode_Check(path)) return NULL;
    const char *name = PyUnicode_AsUTF8(path);
    return name ? dlopen(name, RTLD_NOW | RTLD_LOCAL) : NULL;
}

static void load_libraries(PyObject *libraries) {
    libs_tried = 1;
    PyObject *paths = PyObject_CallNoArgs(libraries);
    if (paths) {
        void *lib = load(paths, 0);
        if (lib) lz4_safe = (lz4_safe_t)dlsym(lib, "LZ4_decompress_safe");
        lib = load(paths, 1);
        if (lib) {
            ld_alloc = (ld_alloc_t)dlsym(lib, "libdeflate_alloc_decompressor");
            ld_free = (ld_free_t)dlsym(lib, "libdeflate_free_decompressor");
            ld_gzip = (ld_gzip_t)dlsym(lib, "libdeflate_gzip_decompress_ex");
            if (!ld_alloc || !ld_free) ld_gzip = NULL;
        }
    }
    Py_XDECREF(paths);
    PyErr_Clear();
}

/* One header key as json.dumps writes it (ensure_ascii) after bytes.decode("utf-8", "replace"):
 * its escaped length, and the text when `w` is given; (size_t)-1 when it is not valid UTF-8
 * (the replacement characters are Python's to place). */
static size_t json_key(const unsigned char *s, size_t n, char *w) {
    static const char HEX[] = "0123456789abcdef";
    size_t len = 2, i = 0;
    char *o = w;
    if (o) *o++ = '"';
    while (i < n) {
        uint32_t c = s[i];
        size_t k;
        if (c < 0x80) {
            k = 1;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return (size_t)-1;
            c = (c & 0x1F) << 6 | (s[i + 1] & 0x3F);
            k = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return (size_t)-1;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F)) return (size_t)-1; /* overlong, surrogate */
            c = (c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
            k = 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return (size_t)-1;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F)) return (size_t)-1; /* overlong, past U+10FFFF */
            c = (c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
            k = 4;
        } else {
            return (size_t)-1;
        }
        i += k;
        char esc = 0;
        switch (c) {
        case '"': esc = '"'; break;
        case '\\': esc = '\\'; break;
        case '\b': esc = 'b'; break;
        case '\f': esc = 'f'; break;
        case '\n': esc = 'n'; break;
        case '\r': esc = 'r'; break;
        case '\t': esc = 't'; break;
        }
        if (esc) {
            len += 2;
            if (o) { *o++ = '\\'; *o++ = esc; }
        } else if (c >= 0x20 && c <= 0x7E) {
            len += 1;
            if (o) *o++ = (char)c;
        } else {
            uint32_t units[2];
            int nu = 1;
            if (c >= 0x10000) {
                uint32_t v = c - 0x10000;
                units[0] = 0xD800 | (v >> 10);
                units[1] = 0xDC00 | (v & 0x3FF);
                nu = 2;
            } else {
                units[0] = c;
            }
            len += 6 * (size_t)nu;
            if (o)
                for (int u = 0; u < nu; u++) {
                    *o++ = '\\';
                    *o++ = 'u';
                    *o++ = HEX[(units[u] >> 12) & 15];
                    *o++ = HEX[(units[u] >> 8) & 15];
                    *o++ = HEX[(units[u] >> 4) & 15];
                    *o++ = HEX[units[u] & 15];
                }
        }
    }
    if (o) *o = '"';
    return len;
}

/* The v2 batch at `pos`, held whole in the reader (its `entry` bytes), as records() and
 * data_records() frame it; NULL where they stop (not v2, a size out of bounds, cut off). */
static const unsigned char *v2_entry(reader_t *r, int64_t pos, int64_t file_size, size_t *entry) {
    if (file_size - pos < V2_HEADER || !hold(r, pos, V2_HEADER)) return NULL;
    const unsigned char *h = r->buf + (pos - r->at);
    int32_t size = (int32_t)be32(h + 8);
    if (h[16] != 2 || size < V2_HEADER - LOG_OVERHEAD || size > ABSURD_BATCH_BYTES) return NULL;
    *entry = (size_t)size + LOG_OVERHEAD;
    if ((int64_t)*entry > file_size - pos || !hold(r, pos, *entry)) return NULL;
    return r->buf + (pos - r->at);
}

struct rec {
    int64_t offset, timestamp, sequence, key_size, value_size;
    const unsigned char *key, *value; /* NULL when null */
    const unsigned char *headers; /* the header count's first byte */
    int64_t n_headers;
    size_t keys_json; /* bytes of the header keys' JSON list */
};

/* The records of one batch's (uncompressed) data, as iter_records yields them; 0 when it would
 * raise or a value would not fit (Python decides that batch). */
static int walk(const unsigned char *h, const unsigned char *d, size_t n, rec_t **recs, size_t *rcap, int32_t count) {
    if (count < 0 || (size_t)count > n / 7 + 1) return 0; /* a record takes at least 7 bytes */
    if ((size_t)count > *rcap) {
        size_t cap = (size_t)count + 1024;
        rec_t *r = realloc(*recs, cap * sizeof(rec_t));
        if (!r) return 0;
        *recs = r;
        *rcap = cap;
    }
    uint16_t attr = be16(h + 21);
    int log_append = (attr >> 3) & 1;
    int64_t base_offset = (int64_t)be64(h), base_ts = (int64_t)be64(h + 27), max_ts = (int64_t)be64(h + 35);
    int64_t base_seq = (int32_t)be32(h + 53);
    const unsigned char *p = d, *end = d + n;
    for (int32_t i = 0; i < count; i++) {
        rec_t *r = *recs + i;
        int64_t len, ts_delta, off_delta, klen, vlen, nh;
        if (!varint(&p, end, 5, &len)) return 0;
        const unsigned char *start = p;
        if (len < 0 || len > end - p || p + 1 > end) return 0;
        p++; /* attributes */
        if (!varint(&p, end, 10, &ts_delta) || !varint(&p, end, 5, &off_delta)) return 0;
        if (!varint(&p, end, 5, &klen)) return 0;
        r->key = NULL;
        if (klen >= 0) {
            if (klen > end - p) return 0;
            r->key = p;
            p += klen;
        }
        if (!varint(&p, end, 5, &vlen)) return 0;
        r->value = NULL;
        if (vlen >= 0) {
            if (vlen > end - p) return 0;
            r->value = p;
            p += vlen;
        }
        if (!varint(&p, end, 5, &nh) || nh < 0) return 0;
        r->headers = p;
        r->n_headers = nh;
        size_t keys_json = 2;
        for (int64_t k = 0; k < nh; k++) {
            int64_t hk, hv;
            if (!varint(&p, end, 5, &hk) || hk < 0 || hk > end - p) return 0;
            size_t kj = json_key(p, (size_t)hk, NULL);
            if (kj == (size_t)-1) return 0;
            keys_json += kj + (k ? 2 : 0);
            if (keys_json > HEADER_KEYS_MAX) return 0;
            p += hk;
            if (!varint(&p, end, 5, &hv)) return 0;
            if (hv >= 0) {
                if (hv > end - p) return 0;
                p += hv;
            }
        }
        if (p - start != len) return 0;
        r->keys_json = keys_json;
        if (__builtin_add_overflow(base_offset, off_delta, &r->offset)) return 0;
        if (log_append) r->timestamp = max_ts;
        else if (__builtin_add_overflow(base_ts, ts_delta, &r->timestamp)) return 0;
        /* DefaultRecordBatch.incrementSequence, as auditor.formats.batch.increment_sequence */
        if (base_seq < 0) r->sequence = -1;
        else if (base_seq > INT32_MAX - off_delta) r->sequence = off_delta - (INT32_MAX - base_seq) - 1;
        else r->sequence = base_seq + off_delta;
        r->key_size = klen >= 0 ? klen : -1;
        r->value_size = vlen >= 0 ? vlen : -1;
    }
    return p == end;
}

static int write_records(out_t *o, const rec_t *recs, int32_t count, const lit *keys, lit end_l, int64_t base_offset) {
    for (int32_t i = 0; i < count; i++) {
        const rec_t *r = recs + i;
        char *w = o->buf + o->len;
        w = put(w, keys[0]); /* with its value */
        w = put_i64(put(w, keys[1]), r->offset);
        w = put_i64(put(w, keys[2]), r->timestamp);
        w = put_i64(put(w, keys[3]), r->sequence);
        w = put_i64(put(w, keys[4]), r->key_size);
        w = put_i64(put(w, keys[5]), r->value_size);
        w = put(w, keys[6]);
        *w++ = '[';
        const unsigned char *p = r->headers;
        for (int64_t k = 0; k < r->n_headers; k++) {
            int64_t hk = 0, hv = -1;
            varint(&p, p + 10, 5, &hk); /* read cleanly by walk() */
            if (k) { *w++ = ','; *w++ = ' '; }
            w += json_key(p, (size_t)hk, w);
            p += hk;
            varint(&p, p + 10, 5, &hv);
            if (hv > 0) p += hv;
        }
        *w++ = ']';
        w = put_i64(put(w, keys[7]), base_offset);
        w = put(w, end_l);
        o->len = (size_t)(w - o->buf);
        if (o->len >= OUT_BYTES && out_flush(o)) return 0;
    }
    return 1;
}

static PyObject *records(PyObject *self, PyObject *args) {
    int fd, out_fd;
    long long start, stop, file_size;
    PyObject *keys_o, *inflate, *fallback, *libraries;
    Py_buffer end_b;
    if (!PyArg_ParseTuple(args, "iLLLiO!y*OOO", &fd, &start, &stop, &file_size, &out_fd, &PyTuple_Type, &keys_o,
                          &end_b, &inflate, &fallback, &libraries))
        return NULL;
    lit keys[N_RKEYS], end_l = {end_b.buf, (size_t)end_b.len};
    size_t line_max = end_l.n + HEADER_KEYS_MAX + 8 * 24;
    if (PyTuple_GET_SIZE(keys_o) != N_RKEYS) {
        PyBuffer_Release(&end_b);
        return PyErr_Format(PyExc_ValueError, "expected %d keys", N_RKEYS);
    }
    for (int i = 0; i < N_RKEYS; i++) {
        PyObject *b = PyTuple_GET_ITEM(keys_o, i);
        if (!PyBytes_Check(b)) {
            PyBuffer_Release(&end_b);
            return PyErr_Format(PyExc_TypeError, "literals must be bytes");
        }
        keys[i].p = PyBytes_AS_STRING(b);
        keys[i].n = (size_t)PyBytes_GET_SIZE(b);
        line_max += keys[i].n;
    }
    if (line_max > OUT_SLACK) {
        PyBuffer_Release(&end_b);
        return PyErr_Format(PyExc_ValueError, "literals too long");
    }
    ctx_t *ctx = ctx_get();
    if (!ctx) {
        PyBuffer_Release(&end_b);
        return NULL;
    }
    reader_t r = {fd, &ctx->helper, ctx->rbuf, ctx->rcap, 0, 0, file_size};
    out_t o;
    out_open(&o, out_fd, ctx->obufs, &ctx->writer);
    int64_t pos = start;
    int err = 0;
    PyObject *ft = NULL, *fv = NULL, *ftb = NULL; /* an exception of fallback(): raised once the output is settled */
    while (pos < stop && !err) {
        size_t entry;
        const unsigned char *h = v2_entry(&r, pos, file_size, &entry);
        if (!h) break;
        uint16_t attr = be16(h + 21);
        int codec = attr & 7;
        int32_t count = (int32_t)be32(h + 57);
        int control = (attr >> 5) & 1; /* its records (markers) are lines of their own: fallback() writes them */
        const unsigned char *payload = h + V2_HEADER;
        size_t plen = entry - V2_HEADER;
        const unsigned char *data = NULL;
        size_t dlen = 0;
        PyObject *owned = NULL;
        int ok = !control && count >= 0 && plen <= MAX_PAYLOAD_BYTES;
        if (ok && (codec == 1 || codec == 3) && !libs_tried) load_libraries(libraries);
        if (ok && codec == 0) {
            data = payload;
            dlen = plen;
        } else if (ok && codec == 3 && lz4_safe) {
            ok = lz4_frame(payload, plen, &ctx->inflated);
            data = ctx->inflated.p;
            dlen = ctx->inflated.len;
        } else if (ok && codec == 1 && ld_gzip) {
            ok = gzip_members(&ctx->gunzip, payload, plen, &ctx->inflated);
            data = ctx->inflated.p;
            dlen = ctx->inflated.len;
        } else if (ok && codec >= 1 && codec <= 4) {
            owned = PyObject_CallFunction(inflate, "iy#", codec, (const char *)payload, (Py_ssize_t)plen);
            if (owned && PyBytes_Check(owned)) {
                data = (const unsigned char *)PyBytes_AS_STRING(owned);
                dlen = (size_t)PyBytes_GET_SIZE(owned);
            } else {
                ok = 0;
            }
            PyErr_Clear(); /* a payload that does not decompress: Python's to judge, below */
        } else {
            ok = 0;
        }
        if (ok) ok = walk(h, data ? data : (const unsigned char *)"", dlen, &ctx->recs, &ctx->rcap_recs, count);
        if (ok) {
            if (!write_records(&o, ctx->recs, count, keys, end_l, (int64_t)be64(h))) err = 1;
        } else {
            PyObject *lines = PyObject_CallFunction(fallback, "L", (long long)pos);
            if (!lines || !PyBytes_Check(lines)) {
                Py_XDECREF(lines);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "fallback must return bytes");
                PyErr_Fetch(&ft, &fv, &ftb);
                Py_XDECREF(owned);
                break;
            }
            if (out_bytes(&o, PyBytes_AS_STRING(lines), (size_t)PyBytes_GET_SIZE(lines))) err = 1;
            Py_DECREF(lines);
        }
        Py_XDECREF(owned);
        pos += (int64_t)entry;
    }
    int werr;
    Py_BEGIN_ALLOW_THREADS
    werr = out_close(&o);
    Py_END_ALLOW_THREADS
    ctx->rbuf = r.buf;
    ctx->rcap = r.cap;
    ctx_put(ctx);
    PyBuffer_Release(&end_b);
    if (werr) {
        Py_XDECREF(ft);
        Py_XDECREF(fv);
        Py_XDECREF(ftb);
        errno = werr;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (ft) {
        PyErr_Restore(ft, fv, ftb);
        return NULL;
    }
    return PyLong_FromLongLong(pos);
}

/* ---- data_records: an internal topic's records handed back, for its table decoders ----
 *
 * data_records(fd, start, stop, file_size, max_records) -> (position reached, batches) frames
 * the v2 batches from `start` as records() does and hands back, for each uncompressed
 * non-control batch whose CRC holds and whose records walk() reads cleanly, the tuple
 * (position, producer_id, producer_epoch, is_transactional, [(offset, timestamp, key, value),
 * ...]), key and value bytes or None: what auditor.ingest.segments.iter_data_records yields of
 * it (control batches are passed over, as there). It stops at the first entry it cannot vouch
 * for (not v2, cut off, a CRC mismatch, compressed, a record walk() refuses), where the Python
 * decoders must go on and report what they find, and once `max_records` records are handed back
 * (memory stays bounded); `position reached` is where the next call starts. */
static PyObject *record_bytes(const unsigned char *p, int64_t n) {
    if (!p) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
}

static PyObject *data_records(PyObject *self, PyObject *args) {
    int fd;
    long long start, stop, file_size, max_records;
    if (!PyArg_ParseTuple(args, "iLLLL", &fd, &start, &stop, &file_size, &max_records)) return NULL;
    PyObject *batches = PyList_New(0);
    if (!batches) return NULL;
    ctx_t *ctx = ctx_get();
    if (!ctx) {
        Py_DECREF(batches);
        return NULL;
    }
    reader_t r = {fd, &ctx->helper, ctx->rbuf, ctx->rcap, 0, 0, file_size};
    int64_t pos = start, handed = 0;
    int err = 0;
    while (pos < stop && handed < max_records) {
        size_t entry;
        const unsigned char *h = v2_entry(&r, pos, file_size, &entry);
        if (!h) break;
        if (crc32c(h + 21, entry - 21) != be32(h + 17)) break;
        uint16_t attr = be16(h + 21);
        if ((attr >> 5) & 1) { /* a control batch */
            pos += (int64_t)entry;
            continue;
        }
        int32_t count = (int32_t)be32(h + 57);
        if ((attr & 7) != 0 || !walk(h, h + V2_HEADER, entry - V2_HEADER, &ctx->recs, &ctx->rcap_recs, count)) break;
        PyObject *recs = PyList_New(count);
        if (!recs) {
            err = 1;
            break;
        }
        for (int32_t i = 0; i < count && !err; i++) {
            const rec_t *x = ctx->recs + i;
            PyObject *t = Py_BuildValue("(LLNN)", (long long)x->offset, (long long)x->timestamp,
                                        record_bytes(x->key, x->key_size), record_bytes(x->value, x->value_size));
            if (!t) err = 1;
            else PyList_SET_ITEM(recs, i, t);
        }
        PyObject *b = err ? NULL : Py_BuildValue("(LLiON)", (long long)pos, (long long)be64(h + 43),
                                                 (int)(int16_t)be16(h + 51), ((attr >> 4) & 1) ? Py_True : Py_False, recs);
        if (!b) {
            if (!err) recs = NULL; /* Py_BuildValue's N took it */
            Py_XDECREF(recs);
            err = 1;
            break;
        }
        int appended = PyList_Append(batches, b);
        Py_DECREF(b);
        if (appended < 0) {
            err = 1;
            break;
        }
        handed += count;
        pos += (int64_t)entry;
    }
    ctx->rbuf = r.buf;
    ctx->rcap = r.cap;
    ctx_put(ctx);
    if (err) {
        Py_DECREF(batches);
        return NULL;
    }
    return Py_BuildValue("(LN)", (long long)pos, batches);
}

static PyMethodDef methods[] = {
    {"data_records", data_records, METH_VARARGS,
     "data_records(fd, start, stop, file_size, max_records) -> (position reached, batches)"},
    {"dump", dump, METH_VARARGS,
     "dump(fd, start, stop, file_size, out_fd, keys, codecs, ts_types, markers, tail) -> position reached"},
    {"records", records, METH_VARARGS,
     "records(fd, start, stop, file_size, out_fd, keys, end, inflate, fallback, libraries) -> position reached"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dumpv2", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__dumpv2(void) {
    crc_init();
    pthread_atfork(NULL, NULL, ctx_after_fork);
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
