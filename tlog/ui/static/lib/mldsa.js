// ML-DSA-44 cosignatures (C2SP tlog-cosignature type 0x06, "subtree/v1"), mirroring
// tlog/formats/mldsa.py and tlog/formats/checkpoint.py subtree_message. WebCrypto has no
// ML-DSA: verification uses the vendored @noble/post-quantum (lib/noble/, audited, MIT;
// versions and hashes in lib/noble/README.md), pure ML-DSA with an empty context.
//   cosigned_message = "subtree/v1\n\0" || u8 len || cosigner name || u64 timestamp ||
//                      u8 len || origin || u64 start || u64 end || hash[32]
import { ml_dsa44 } from './noble/post-quantum-ml-dsa.js';
import { utf8, concat } from './b64.js';
import { FormatError, SignatureError, pyRepr } from './errors.js';
import { MAX_COSIGNATURE_TIMESTAMP, MAX_TREE_SIZE } from './checkpoint.js';

export const MLDSA44_PUBLIC_KEY_SIZE = 1312;
export const MLDSA44_SIGNATURE_SIZE = 2420;
export const SUBTREE_LABEL = concat(utf8('subtree/v1\n'), Uint8Array.of(0));

function u8String(value, what) {
  if (typeof value !== 'string') throw new FormatError(`${what} must be a string`);
  const raw = utf8(value);
  if (raw.length < 1 || raw.length > 255) throw new FormatError(`${what} must be 1..255 bytes`);
  return concat(Uint8Array.of(raw.length), raw);
}

function u64(v) {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(v));
  return out;
}

/** The cosigned_message of tlog-cosignature (checkpoint.py subtree_message); BigInt or number ints. */
export function subtreeMessage(cosignerName, timestamp, origin, start, end, root) {
  const name = u8String(cosignerName, 'cosigner name'), log = u8String(origin, 'log origin');
  const ts = BigInt(timestamp), s = BigInt(start), e = BigInt(end);
  if (ts < 0n || ts > MAX_COSIGNATURE_TIMESTAMP) throw new FormatError('cosignature timestamp out of range 0..2^63-1');
  if (!(0n <= s && s <= e && e <= MAX_TREE_SIZE)) throw new FormatError('subtree needs 0 <= start <= end < 2^64');
  if (s !== 0n && ts !== 0n) throw new FormatError('a subtree that does not start at 0 must have timestamp 0');
  if (!(root instanceof Uint8Array) || root.length !== 32) throw new FormatError('subtree hash must be 32 bytes');
  return concat(SUBTREE_LABEL, name, u64(ts), log, u64(s), u64(e), root);
}

/** Throw FormatError unless `pub` is an encoded ML-DSA-44 public key. */
export function checkMldsaPublic(pub) {
  if (!(pub instanceof Uint8Array) || pub.length !== MLDSA44_PUBLIC_KEY_SIZE)
    throw new FormatError(`ML-DSA-44 public key must be ${MLDSA44_PUBLIC_KEY_SIZE} bytes, got ${pub ? pub.length : 0}`);
}

/** Throw SignatureError unless `sig` is a valid ML-DSA-44 signature of `msg` (empty context). */
export function mldsa44Verify(pub, msg, sig) {
  if (sig.length !== MLDSA44_SIGNATURE_SIZE) throw new SignatureError('malformed ML-DSA-44 signature');
  let ok = false;
  try { ok = ml_dsa44.verify(sig, msg, pub); } catch { ok = false; }
  if (!ok) throw new SignatureError('ML-DSA-44 signature does not verify');
}

/** Verify an ML-DSA-44 subtree/v1 cosignature blob (timestamp || signature, after the key ID)
 * by `verifier` (a note.js Verifier of type 0x06) of leaves [start, end) of `origin` with hash
 * `root`; return its timestamp (BigInt; 0 unless start is 0). Throws SignatureError. */
export function verifySubtreeCosignature(verifier, origin, start, end, root, blob) {
  const who = pyRepr(verifier.name);
  if (blob.length !== 8 + MLDSA44_SIGNATURE_SIZE) throw new SignatureError(`malformed ML-DSA-44 cosignature by ${who}`);
  const ts = new DataView(blob.buffer, blob.byteOffset, 8).getBigUint64(0);
  let msg;
  try { msg = subtreeMessage(verifier.name, ts, origin, start, end, root); } catch (e) {
    if (e instanceof FormatError) throw new SignatureError(`cosignature by ${who}: ${e.reason}`);
    throw e;
  }
  try { mldsa44Verify(verifier.public, msg, blob.subarray(8)); } catch (e) {
    if (e instanceof SignatureError) throw new SignatureError(`cosignature by ${who} does not verify`);
    throw e;
  }
  return ts;
}
