// Deterministic CBOR (RFC 8949 §4.2.1) for OAP log entries (DESIGN §3.1,
// tlog/formats/canonical.py `dcbor`, tlog/formats/strict.py `loads_cbor`,
// tlog/formats/entries.py). Only the entry data model exists: maps with text
// keys, arrays, text, integers within signed 64 bits, booleans, null.
// leaf hash of an entry = SHA-256(0x00 || dcbor(entry)) (RFC 9162 §2.1.1).
import { InvalidInput, SignatureError } from './errors.js';
import { utf8, fromUtf8, b64dec, b64enc, bytesEqual, concat } from './b64.js';
import { leafHash } from './merkle.js';
import { jcs, jcsBytes, JSONFloat } from './jcs.js';
import { parseSigner } from './didkey.js';
import { ed25519Verify } from './ed25519.js';
import { parseUtc } from './times.js';

export const MAX_ENTRY_BYTES = 65535;
const INT64_MIN = -(2n ** 63n), INT64_MAX = 2n ** 63n - 1n, SAFE = 2n ** 53n - 1n;
function setKey(obj, k, v) { Object.defineProperty(obj, k, { value: v, enumerable: true, writable: true, configurable: true }); }

/** Decode one CBOR item strictly, like loads_cbor: definite lengths only; no byte strings,
 * tags, floats, undefined or other simple values; text map keys, no duplicates; depth <= 16;
 * valid UTF-8; no trailing bytes. Non-shortest heads are accepted (as in Python) but
 * reported: returns {value, canonical} where canonical = (dcbor(value) equals the input). */
export function decodeCBOR(bytes, { maxDepth = 16, maxItems = 65536 } = {}) {
  if (!(bytes instanceof Uint8Array) || !bytes.length) throw new InvalidInput('empty CBOR body');
  let p = 0, items = 0;
  const need = (n) => { if (p + n > bytes.length) throw new InvalidInput('truncated CBOR'); };
  const head = () => {
    need(1);
    const b = bytes[p++], major = b >> 5, ai = b & 31;
    let arg;
    if (ai < 24) arg = BigInt(ai);
    else if (ai <= 27) {
      const n = 1 << (ai - 24); need(n);
      arg = 0n;
      for (let k = 0; k < n; k++) arg = (arg << 8n) | BigInt(bytes[p++]);
    } else if (ai === 31) {
      if (major === 7) throw new InvalidInput('malformed CBOR: unexpected break');
      if (major >= 2 && major <= 5) throw new InvalidInput('indefinite-length CBOR items are not allowed');
      throw new InvalidInput('malformed CBOR: reserved additional information');
    } else throw new InvalidInput('malformed CBOR: reserved additional information');
    return { major, ai, arg };
  };
  const item = (depth) => {
    if (++items > maxItems) throw new InvalidInput(`CBOR body has more than ${maxItems} items (values and keys)`);
    const { major, ai, arg } = head();
    switch (major) {
      case 0: case 1: {
        const v = major === 0 ? arg : -1n - arg;
        if (v < INT64_MIN || v > INT64_MAX) throw new InvalidInput('integer out of the signed 64-bit range');
        return v >= -SAFE && v <= SAFE ? Number(v) : v;
      }
      case 2: throw new InvalidInput('CBOR byte strings are not allowed');
      case 3: {
        if (arg > BigInt(bytes.length - p)) throw new InvalidInput('truncated CBOR');
        const n = Number(arg), s = bytes.subarray(p, p + n); p += n;
        try { return fromUtf8(s); } catch { throw new InvalidInput('malformed CBOR: text is not valid UTF-8'); }
      }
      case 4: case 5: {
        if (depth >= maxDepth) throw new InvalidInput(`CBOR nested deeper than ${maxDepth} levels`);
        if (arg > BigInt(bytes.length - p)) throw new InvalidInput('truncated CBOR'); // every item is >= 1 byte
        const n = Number(arg);
        if (major === 4) { const a = []; for (let k = 0; k < n; k++) a.push(item(depth + 1)); return a; }
        const o = {};
        for (let k = 0; k < n; k++) {
          if (p < bytes.length && bytes[p] >> 5 !== 3) throw new InvalidInput('CBOR map keys must be text strings');
          const key = item(depth + 1), v = item(depth + 1);
          if (Object.prototype.hasOwnProperty.call(o, key)) throw new InvalidInput(`malformed CBOR: duplicate key '${key}'`);
          setKey(o, key, v);
        }
        return o;
      }
      case 6: throw new InvalidInput('CBOR tags are not allowed');
      default:
        if (ai === 20) return false;
        if (ai === 21) return true;
        if (ai === 22) return null;
        if (ai === 23) throw new InvalidInput('CBOR undefined is not allowed');
        if (ai >= 25 && ai <= 27) throw new InvalidInput('floating-point numbers are not allowed');
        throw new InvalidInput('CBOR simple values other than false/true/null are not allowed');
    }
  };
  const value = item(0);
  if (p !== bytes.length) throw new InvalidInput(`trailing bytes after the CBOR item (${bytes.length - p} bytes)`);
  return { value, canonical: bytesEqual(dcbor(value), bytes) };
}

function cborHead(major, n) {
  n = BigInt(n);
  const m = major << 5;
  if (n < 24n) return Uint8Array.of(m | Number(n));
  const [ai, len] = n < 0x100n ? [24, 1] : n < 0x10000n ? [25, 2] : n < 0x100000000n ? [26, 4] : [27, 8];
  const out = new Uint8Array(1 + len); out[0] = m | ai;
  for (let k = len; k >= 1; k--) { out[k] = Number(n & 255n); n >>= 8n; }
  return out;
}
function cmpBytes(a, b) {
  for (let k = 0; k < Math.min(a.length, b.length); k++) if (a[k] !== b[k]) return a[k] - b[k];
  return a.length - b.length;
}

/** Deterministic CBOR (RFC 8949 §4.2.1: shortest heads, definite lengths, map keys sorted
 * by the bytewise order of their encodings) of a value of the entry data model. */
export function dcbor(v) {
  if (v === null) return Uint8Array.of(0xf6);
  if (v === true) return Uint8Array.of(0xf5);
  if (v === false) return Uint8Array.of(0xf4);
  if (typeof v === 'number' || typeof v === 'bigint') {
    if (typeof v === 'number' && !Number.isSafeInteger(v)) throw new InvalidInput('floating-point numbers are not allowed');
    const n = BigInt(v);
    if (n < INT64_MIN || n > INT64_MAX) throw new InvalidInput('integer out of the signed 64-bit range');
    return n >= 0n ? cborHead(0, n) : cborHead(1, -1n - n);
  }
  if (v instanceof JSONFloat) throw new InvalidInput('floating-point numbers are not allowed');
  if (typeof v === 'string') { const b = utf8(v); return concat(cborHead(3, b.length), b); }
  if (Array.isArray(v)) return concat(cborHead(4, v.length), ...v.map(dcbor));
  if (typeof v === 'object') {
    const pairs = Object.keys(v).map((k) => [dcbor(k), dcbor(v[k])]).sort((a, b) => cmpBytes(a[0], b[0]));
    return concat(cborHead(5, pairs.length), ...pairs.flat());
  }
  throw new InvalidInput(`values of type ${typeof v} are not allowed`);
}

// --- OAP entries ----------------------------------------------------------------

const ENTRY_TYPES = ['receipt', 'commitment', 'conformance', 'registry'];

/** Stored entry bytes -> {entry, leafHash, canonical} (entries.py decode_entry + RFC 9162 leaf). */
export async function decodeEntry(bytes) {
  if (bytes.length > MAX_ENTRY_BYTES) throw new InvalidInput(`entry is ${bytes.length} bytes; the limit is ${MAX_ENTRY_BYTES}`);
  const { value, canonical } = decodeCBOR(bytes);
  if (!value || typeof value !== 'object' || Array.isArray(value) || !ENTRY_TYPES.includes(value.type))
    throw new InvalidInput('not an OAP log entry');
  return { entry: value, leafHash: await leafHash(bytes), canonical };
}

/** Check a GET /v1/entries/<i> answer {index, leaf_hash, entry, entry_cbor}: the leaf hash is
 * recomputed from entry_cbor and the decoded entry must equal the JSON `entry`. */
export async function verifyEntryResponse(resp) {
  const data = b64dec(resp.entry_cbor, 'entry_cbor');
  const got = await decodeEntry(data);
  if (b64enc(got.leafHash) !== resp.leaf_hash) throw new InvalidInput('leaf_hash is not the hash of entry_cbor');
  if (resp.entry !== undefined && jcs(resp.entry) !== jcs(got.entry)) throw new InvalidInput('entry differs from entry_cbor');
  return { index: resp.index, ...got, bytes: data };
}

// entries.py canonical_entry for the entry types the registry anchors with (receipt,
// commitment, registry): the same field rules, the signature check, then dCBOR.
const SHA256_TEXT = /^sha256:[0-9a-fA-F]{64}$/;
const URN = /^urn:oap:[\x21-\x7e]+$/;
function fields(obj, kind, required, optional = []) {
  const keys = Object.keys(obj);
  const missing = required.filter((k) => !keys.includes(k)).sort();
  if (missing.length) throw new InvalidInput(`${kind} entry: missing field(s): ${missing.join(', ')}`);
  const unknown = keys.filter((k) => !required.includes(k) && !optional.includes(k)).sort();
  if (unknown.length) throw new InvalidInput(`${kind} entry: unknown field(s): ${unknown.join(', ')}`);
}
function signerAndSig(obj, kind) {
  let pub;
  try { pub = parseSigner(obj.signer); } catch (e) { throw new InvalidInput(`${kind} entry: signer: ${e.reason}`); }
  if (typeof obj.signature !== 'string') throw new InvalidInput(`${kind} entry: signature must be a base64 string`);
  let sig;
  try { sig = b64dec(obj.signature, 'signature'); } catch (e) { throw new InvalidInput(`${kind} entry: ${e.reason}`); }
  if (sig.length !== 64) throw new InvalidInput(`${kind} entry: signature must be base64 of 64 bytes`);
  return [pub, sig];
}
async function verifySig(kind, pub, msg, sig) {
  try { await ed25519Verify(pub, msg, sig); } catch (e) {
    if (e instanceof SignatureError) throw new InvalidInput(`${kind} entry: signature does not verify for signer`);
    throw e;
  }
}

/** Validate an entry as the log does and return its canonical dCBOR bytes (receipt:
 * Ed25519 over the raw 32-byte receipt hash; registry: Ed25519 over jcs(entry without
 * signature); commitment: no signature). Conformance entries are refused here
 * (their receipt checks are not ported to JS). */
export async function canonicalEntry(obj) {
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw new InvalidInput('entry must be an object');
  let out;
  if (obj.type === 'receipt') {
    fields(obj, 'receipt', ['type', 'receipt_hash', 'signer', 'signature'], ['receipt_id', 'timestamp']);
    if (typeof obj.receipt_hash !== 'string' || !SHA256_TEXT.test(obj.receipt_hash))
      throw new InvalidInput("receipt entry: receipt_hash must be 'sha256:' followed by 64 hex digits");
    const [pub, sig] = signerAndSig(obj, 'receipt');
    out = { type: 'receipt', receipt_hash: obj.receipt_hash.toLowerCase(), signer: obj.signer, signature: obj.signature };
    if ('receipt_id' in obj) {
      const rid = obj.receipt_id;
      if (typeof rid !== 'string' || rid.length > 256 || !URN.test(rid))
        throw new InvalidInput("receipt entry: receipt_id must be a 'urn:oap:' identifier of printable ASCII, at most 256 characters");
      out.receipt_id = rid;
    }
    // the receipt's own claimed signing time, copied by the anchoring client (OAP §19.1, §28.5);
    // the signature covers only the receipt hash
    if ('timestamp' in obj) { parseUtc(obj.timestamp, 'receipt entry: timestamp'); out.timestamp = obj.timestamp; }
    const digest = Uint8Array.from(out.receipt_hash.slice(7).match(/../g), (h) => parseInt(h, 16));
    await verifySig('receipt', pub, digest, sig);
  } else if (obj.type === 'commitment') {
    fields(obj, 'commitment', ['type', 'commitment']);
    if (typeof obj.commitment !== 'string' || !SHA256_TEXT.test(obj.commitment))
      throw new InvalidInput("commitment entry: commitment must be 'sha256:' followed by 64 hex digits");
    out = { type: 'commitment', commitment: obj.commitment.toLowerCase() };
  } else if (obj.type === 'registry') {
    fields(obj, 'registry', ['type', 'commit', 'tree', 'seq', 'signer', 'signature']);
    for (const f of ['commit', 'tree'])
      if (typeof obj[f] !== 'string' || !/^[0-9a-f]{40}$/.test(obj[f])) throw new InvalidInput(`registry entry: ${f} must be 40 lowercase hex digits`);
    if (typeof obj.seq !== 'number' || !Number.isSafeInteger(obj.seq) || obj.seq < 0)
      throw new InvalidInput(`registry entry: seq must be an integer from 0 to ${SAFE}`);
    const [pub, sig] = signerAndSig(obj, 'registry');
    out = { type: 'registry', commit: obj.commit, tree: obj.tree, seq: obj.seq, signer: obj.signer, signature: obj.signature };
    const { signature, ...unsigned } = out;
    await verifySig('registry', pub, jcsBytes(unsigned), sig);
  } else if (obj.type === 'conformance') {
    throw new InvalidInput('conformance entries are not validated in the browser');
  } else throw new InvalidInput(`entry type must be one of: ${ENTRY_TYPES.join(', ')}`);
  const data = dcbor(out);
  if (data.length > MAX_ENTRY_BYTES) throw new InvalidInput(`entry is ${data.length} bytes; the limit is ${MAX_ENTRY_BYTES}`);
  return data;
}
