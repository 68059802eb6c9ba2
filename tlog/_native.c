/* The project's one compiled module: loops that cost more per item in Python
 * than the work itself. Optional: without it tlog falls back to pure Python.
 *
 * - Batched RFC 9162 hashing for tlog.hashing. hashlib costs ~0.4 us of Python
 *   call overhead per 65-byte node hash, four times the SHA-NI compression
 *   itself; the batch paths (hash-file appends, batched verification,
 *   consistency proofs) hash millions of nodes, so they loop here, through
 *   OpenSSL's own SHA-256 (the same code hashlib uses), with the GIL released.
 * - Entry bundles read by a monitor (tlog.formats.parties.read_bundle): each entry's
 *   place, its leaf hash and, for the two shapes that make nearly every OAP entry (a
 *   commitment, a receipt's head), its kind and the span of its signer, in one pass
 *   over the bundle, without a Python object per entry.
 * - Structural scanners for untrusted CBOR and JSON request bodies
 *   (tlog.canonical): they count items against a budget and a depth limit before
 *   any decoder allocates an object, and find where each element of a batch's
 *   array ends so the batch is decoded a bounded group at a time. The same scan
 *   in Python costs ~0.4 us per item, on the event loop's GIL; here it is a few
 *   ns per byte with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/sha.h>
#include <stdint.h>
#include <string.h>

#define HASH 32

static PyObject *
node_hashes_into(PyObject *self, PyObject *args)
{
    Py_buffer pairs, out;
    if (!PyArg_ParseTuple(args, "y*w*", &pairs, &out))
        return NULL;
    if (pairs.len % (2 * HASH) != 0 || out.len != pairs.len / 2) {
        PyBuffer_Release(&pairs);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "pairs must be m*64 bytes and out m*32 bytes");
        return NULL;
    }
    Py_ssize_t m = pairs.len / (2 * HASH);
    const unsigned char *src = (const unsigned char *)pairs.buf;
    unsigned char *dst = (unsigned char *)out.buf;
    static const unsigned char one = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) {
        SHA256_CTX c;
        SHA256_Init(&c);
        SHA256_Update(&c, &one, 1);
        SHA256_Update(&c, src + i * 2 * HASH, 2 * HASH);
        SHA256_Final(dst + i * HASH, &c);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&pairs);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyObject *
leaf_hashes(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "entries must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject *res = PyBytes_FromStringAndSize(NULL, m * HASH);
    if (res == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(res);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    static const unsigned char zero = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (!PyBytes_Check(items[i])) {
            Py_DECREF(seq);
            Py_DECREF(res);
            PyErr_SetString(PyExc_TypeError, "entries must be bytes");
            return NULL;
        }
        SHA256_CTX c;
        SHA256_Init(&c);
        SHA256_Update(&c, &zero, 1);
        SHA256_Update(&c, PyBytes_AS_STRING(items[i]), PyBytes_GET_SIZE(items[i]));
        SHA256_Final(dst + i * HASH, &c);
    }
    Py_DECREF(seq);
    return res;
}

/* --- entry bundles ---------------------------------------------------------- */

static int
is_lower_hex(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    return 1;
}

/* bundle_entries(data, width, commitment_prefix, receipt_head) -> (used, leaves, kinds, spans)
 * The first `width` entries of a tlog-tiles entry bundle (16-bit big-endian length, bytes):
 * `used` the bytes they take; `leaves` their SHA-256(0x00 || entry), concatenated; `kinds` one
 * byte each: 0 a commitment (the prefix, then 64 lowercase hex digits, nothing else), 1 a
 * receipt's head (a map of 4 to 7 keys, then receipt_head, then a definite text string of 1 to
 * 65535 bytes: the signer), 2 anything else; `spans` four int64 each: the entry's start and
 * end in `data`, and for a receipt the signer's start and length. ValueError("truncated")
 * when the bundle holds fewer than `width` entries. */
static PyObject *
bundle_entries(PyObject *self, PyObject *args)
{
    Py_buffer buf, prefix, head;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*ny*y*", &buf, &width, &prefix, &head))
        return NULL;
    PyObject *leaves = NULL, *kinds = NULL, *spans = NULL, *res = NULL;
    if (width < 0 || width > 65536) {
        PyErr_SetString(PyExc_ValueError, "bad width");
        goto done;
    }
    leaves = PyBytes_FromStringAndSize(NULL, width * HASH);
    kinds = PyBytes_FromStringAndSize(NULL, width);
    spans = PyBytes_FromStringAndSize(NULL, width * 4 * (Py_ssize_t)sizeof(int64_t));
    if (leaves == NULL || kinds == NULL || spans == NULL)
        goto done;
    const unsigned char *p = (const unsigned char *)buf.buf, *pre = prefix.buf, *hd = head.buf;
    unsigned char *lv = (unsigned char *)PyBytes_AS_STRING(leaves), *kd = (unsigned char *)PyBytes_AS_STRING(kinds);
    int64_t *sp = (int64_t *)PyBytes_AS_STRING(spans);
    Py_ssize_t n = buf.len, pos = 0, i, clen = prefix.len + 64;
    int truncated = 0;
    static const unsigned char zero = 0;
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < width; i++) {
        if (pos + 2 > n) { truncated = 1; break; }
        Py_ssize_t k = ((Py_ssize_t)p[pos] << 8) | p[pos + 1];
        Py_ssize_t s = pos + 2, e = s + k;
        if (e > n) { truncated = 1; break; }
        const unsigned char *x = p + s;
        SHA256_CTX c;
        SHA256_Init(&c);
        SHA256_Update(&c, &zero, 1);
        SHA256_Update(&c, x, k);
        SHA256_Final(lv + i * HASH, &c);
        int64_t *q = sp + 4 * i;
        q[0] = s; q[1] = e; q[2] = 0; q[3] = 0;
        kd[i] = 2;
        if (k == clen && memcmp(x, pre, prefix.len) == 0 && is_lower_hex(x + prefix.len, 64)) {
            kd[i] = 0;
        } else if (k > 1 + head.len && x[0] >= 0xa4 && x[0] <= 0xa7 && memcmp(x + 1, hd, head.len) == 0) {
            Py_ssize_t t = 1 + head.len, len = -1, at = 0;
            unsigned char h = x[t];
            if (h >= 0x61 && h <= 0x77) { len = h - 0x60; at = t + 1; }
            else if (h == 0x78 && t + 1 < k) { len = x[t + 1]; at = t + 2; }
            else if (h == 0x79 && t + 2 < k) { len = ((Py_ssize_t)x[t + 1] << 8) | x[t + 2]; at = t + 3; }
            if (len > 0 && at + len <= k) {
                kd[i] = 1;
                q[2] = s + at;
                q[3] = len;
            }
        }
        pos = e;
    }
    Py_END_ALLOW_THREADS
    if (truncated) {
        PyErr_SetString(PyExc_ValueError, "truncated");
        goto done;
    }
    res = Py_BuildValue("(nOOO)", pos, leaves, kinds, spans);
done:
    Py_XDECREF(leaves);
    Py_XDECREF(kinds);
    Py_XDECREF(spans);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&head);
    return res;
}

/* --- structural scanners ---------------------------------------------------- */

/* Error codes, mapped to messages by tlog.canonical (keep in step with _SCAN_ERRORS). */
enum {
    E_TRUNCATED = 1, E_INDEFINITE, E_RESERVED, E_BREAK, E_BYTES, E_TAG, E_FLOAT, E_UNDEFINED,
    E_SIMPLE, E_KEY, E_DEPTH, E_ITEMS, E_SYNTAX, E_NOT_ARRAY, E_MEMORY
};

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    Py_ssize_t items, max_items;
    int err;
    Py_ssize_t errpos;
    /* split mode: per element of the outer array, its end and the items up to it */
    int64_t *ends, *cum;
    Py_ssize_t count, cap;
} scan_t;

static Py_ssize_t
fail(scan_t *s, int code, Py_ssize_t pos)
{
    if (!s->err) {
        s->err = code;
        s->errpos = pos;
    }
    return -1;
}

static int
mark(scan_t *s, Py_ssize_t end)
{
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 1024;
        int64_t *e = PyMem_RawRealloc(s->ends, cap * sizeof(int64_t));
        if (e == NULL)
            return 0;
        s->ends = e;
        int64_t *c = PyMem_RawRealloc(s->cum, cap * sizeof(int64_t));
        if (c == NULL)
            return 0;
        s->cum = c;
        s->cap = cap;
    }
    s->ends[s->count] = end;
    s->cum[s->count] = s->items;
    s->count++;
    return 1;
}

static Py_ssize_t
cbor_item(scan_t *s, Py_ssize_t pos, int depth_left, int split)
{
    const unsigned char *p = s->p;
    Py_ssize_t n = s->n, start = pos;
    if (++s->items > s->max_items)
        return fail(s, E_ITEMS, pos);
    if (pos >= n)
        return fail(s, E_TRUNCATED, pos);
    int major = p[pos] >> 5, info = p[pos] & 0x1f;
    uint64_t arg;
    pos++;
    if (info < 24) {
        arg = (uint64_t)info;
    } else if (info == 31) {
        return fail(s, major == 7 ? E_BREAK : E_INDEFINITE, start);
    } else if (info > 27) {
        return fail(s, E_RESERVED, start);
    } else {
        int size = 1 << (info - 24);
        if (size > n - pos)
            return fail(s, E_TRUNCATED, start);
        arg = 0;
        for (int i = 0; i < size; i++)
            arg = (arg << 8) | p[pos + i];
        pos += size;
    }
    if (split && major != 4)
        return fail(s, E_NOT_ARRAY, start);
    switch (major) {
    case 0:
    case 1:
        return pos;
    case 2:
        return fail(s, E_BYTES, start);
    case 3:
        if (arg > (uint64_t)(n - pos))
            return fail(s, E_TRUNCATED, start);
        return pos + (Py_ssize_t)arg;
    case 4:
    case 5: {
        if (depth_left <= 0)
            return fail(s, E_DEPTH, start);
        /* every item takes at least one byte: a forged count fails here, before any work */
        if (arg > (uint64_t)(n - pos) || (major == 5 && arg > (uint64_t)(n - pos) / 2))
            return fail(s, E_TRUNCATED, start);
        Py_ssize_t count = (Py_ssize_t)arg * (major == 5 ? 2 : 1);
        for (Py_ssize_t i = 0; i < count; i++) {
            if (major == 5 && i % 2 == 0 && pos < n && (p[pos] >> 5) != 3)
                return fail(s, E_KEY, pos);
            pos = cbor_item(s, pos, depth_left - 1, 0);
            if (pos < 0)
                return -1;
            if (split && !mark(s, pos))
                return fail(s, E_MEMORY, pos);
        }
        return pos;
    }
    case 6:
        return fail(s, E_TAG, start);
    default: /* 7: only false, true, null in their one-byte form */
        if (p[start] == 0xf4 || p[start] == 0xf5 || p[start] == 0xf6)
            return pos;
        if (p[start] == 0xf9 || p[start] == 0xfa || p[start] == 0xfb)
            return fail(s, E_FLOAT, start);
        if (p[start] == 0xf7)
            return fail(s, E_UNDEFINED, start);
        return fail(s, E_SIMPLE, start);
    }
}

static Py_ssize_t
json_ws(const scan_t *s, Py_ssize_t pos)
{
    while (pos < s->n && (s->p[pos] == ' ' || s->p[pos] == '\t' || s->p[pos] == '\n' || s->p[pos] == '\r'))
        pos++;
    return pos;
}

static Py_ssize_t
json_string(scan_t *s, Py_ssize_t pos)
{
    /* at the opening quote; escapes are skipped whole, their meaning is left to the decoder */
    Py_ssize_t start = pos++;
    const unsigned char *p = s->p;
    while (pos < s->n) {
        const unsigned char *q = memchr(p + pos, '"', s->n - pos);
        if (q == NULL)
            break;
        Py_ssize_t at = q - p, back = 0;
        while (at - 1 - back >= pos && p[at - 1 - back] == '\\')
            back++;
        if (back % 2 == 0)
            return at + 1;
        pos = at + 1;
    }
    return fail(s, E_TRUNCATED, start);
}

/* One JSON value's structure: brackets, strings and scalar tokens. Numbers, literals,
 * escapes and UTF-8 are checked by the decoder that runs on the scanned span. */
static Py_ssize_t
json_item(scan_t *s, Py_ssize_t pos, int depth_left, int split)
{
    const unsigned char *p = s->p;
    Py_ssize_t n = s->n;
    pos = json_ws(s, pos);
    if (++s->items > s->max_items)
        return fail(s, E_ITEMS, pos);
    if (pos >= n)
        return fail(s, E_TRUNCATED, pos);
    unsigned char c = p[pos];
    if (split && c != '[')
        return fail(s, E_NOT_ARRAY, pos);
    if (c == '{' || c == '[') {
        unsigned char close = c == '{' ? '}' : ']';
        Py_ssize_t start = pos;
        if (depth_left <= 0)
            return fail(s, E_DEPTH, pos);
        pos = json_ws(s, pos + 1);
        if (pos < n && p[pos] == close)
            return pos + 1;
        for (;;) {
            if (c == '{') {
                pos = json_ws(s, pos);
                if (pos >= n || p[pos] != '"')
                    return fail(s, pos >= n ? E_TRUNCATED : E_SYNTAX, pos);
                if (++s->items > s->max_items)
                    return fail(s, E_ITEMS, pos);
                pos = json_string(s, pos);
                if (pos < 0)
                    return -1;
                pos = json_ws(s, pos);
                if (pos >= n || p[pos] != ':')
                    return fail(s, pos >= n ? E_TRUNCATED : E_SYNTAX, pos);
                pos++;
            }
            pos = json_item(s, pos, depth_left - 1, 0);
            if (pos < 0)
                return -1;
            if (split && !mark(s, pos))
                return fail(s, E_MEMORY, pos);
            pos = json_ws(s, pos);
            if (pos >= n)
                return fail(s, E_TRUNCATED, start);
            if (p[pos] == close)
                return pos + 1;
            if (p[pos] != ',')
                return fail(s, E_SYNTAX, pos);
            pos++;
        }
    }
    if (c == '"')
        return json_string(s, pos);
    Py_ssize_t start = pos;
    while (pos < n && ((p[pos] >= '0' && p[pos] <= '9') || (p[pos] >= 'a' && p[pos] <= 'z') ||
                       (p[pos] >= 'A' && p[pos] <= 'Z') || p[pos] == '-' || p[pos] == '+' || p[pos] == '.'))
        pos++;
    if (pos == start)
        return fail(s, E_SYNTAX, pos);
    return pos;
}

static PyObject *
scan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, max_items;
    int json, max_depth, split;
    if (!PyArg_ParseTuple(args, "y*npinp", &buf, &pos, &json, &max_depth, &max_items, &split))
        return NULL;
    if (pos < 0 || pos > buf.len || max_items < 0) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "bad position or budget");
        return NULL;
    }
    scan_t s = {.p = (const unsigned char *)buf.buf, .n = buf.len, .max_items = max_items};
    Py_ssize_t end;
    Py_BEGIN_ALLOW_THREADS
    end = json ? json_item(&s, pos, max_depth, split) : cbor_item(&s, pos, max_depth, split);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyObject *res = NULL;
    if (end < 0) {
        PyObject *err = Py_BuildValue("(in)", s.err, s.errpos);
        if (err != NULL) {
            PyErr_SetObject(PyExc_ValueError, err);
            Py_DECREF(err);
        }
    } else if (split) {
        PyObject *ends = PyBytes_FromStringAndSize((const char *)s.ends, s.count * (Py_ssize_t)sizeof(int64_t));
        PyObject *cum = PyBytes_FromStringAndSize((const char *)s.cum, s.count * (Py_ssize_t)sizeof(int64_t));
        if (ends != NULL && cum != NULL)
            res = Py_BuildValue("(nnOO)", end, s.items, ends, cum);
        Py_XDECREF(ends);
        Py_XDECREF(cum);
    } else {
        res = Py_BuildValue("(nnOO)", end, s.items, Py_None, Py_None);
    }
    PyMem_RawFree(s.ends);
    PyMem_RawFree(s.cum);
    return res;
}

static PyMethodDef methods[] = {
    {"node_hashes_into", node_hashes_into, METH_VARARGS,
     "node_hashes_into(pairs, out): out[i] = SHA-256(0x01 || pairs[i]) for 64-byte pairs."},
    {"leaf_hashes", leaf_hashes, METH_O,
     "leaf_hashes(entries) -> bytes: the concatenated SHA-256(0x00 || entry) of each entry."},
    {"bundle_entries", bundle_entries, METH_VARARGS,
     "bundle_entries(data, width, commitment_prefix, receipt_head) -> (used, leaves, kinds, spans): the first\n"
     "width entries of an entry bundle: their leaf hashes, kinds (0 commitment, 1 receipt head, 2 other) and\n"
     "spans (int64 start, end, signer start, signer length each); ValueError when it holds fewer."},
    {"scan", scan, METH_VARARGS,
     "scan(data, pos, json, max_depth, max_items, split) -> (end, items, ends, cum): the structure of one\n"
     "CBOR or JSON item at pos within the budget, else ValueError(code, position). With split, the item\n"
     "must be an array: ends and cum are int64 arrays (bytes) of each element's end and the items so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tlog._native", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
