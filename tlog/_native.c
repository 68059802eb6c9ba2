/* The project's one compiled module: loops that cost more per item in Python
 * than the work itself. Optional: without it tlog falls back to pure Python.
 *
 * - Batched RFC 9162 hashing for tlog.hashing. hashlib costs ~0.4 us of Python
 *   call overhead per 65-byte node hash, four times the SHA-NI compression
 *   itself; the batch paths (hash-file appends, batched verification,
 *   consistency proofs) hash millions of nodes, so they loop here, through
 *   OpenSSL's own SHA-256 (the same code hashlib uses), with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/sha.h>

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

static PyMethodDef methods[] = {
    {"node_hashes_into", node_hashes_into, METH_VARARGS,
     "node_hashes_into(pairs, out): out[i] = SHA-256(0x01 || pairs[i]) for 64-byte pairs."},
    {"leaf_hashes", leaf_hashes, METH_O,
     "leaf_hashes(entries) -> bytes: the concatenated SHA-256(0x00 || entry) of each entry."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tlog._native", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
