// RFC 9162 §2.1 Merkle tree hashing with WebCrypto SHA-256, and the proof
// verifiers of §2.1.3.2 (inclusion) and §2.1.4.2 (consistency), transcribed
// from the RFC pseudocode like tlog/merkle/verify.py. Sizes and indices may
// be numbers or BigInts (trees beyond 2^53 leaves); all arithmetic is BigInt.
import { concat, bytesEqual, subtle } from './b64.js';
import { InclusionProofError, ConsistencyProofError } from './errors.js';


export async function sha256(bytes) {
  return new Uint8Array(await subtle().digest('SHA-256', bytes));
}
/** Root of the empty tree: SHA-256("") (RFC 9162 §2.1.1). */
export const EMPTY_ROOT = new Uint8Array([
  0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
  0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55]);
/** MTH({d}) = SHA-256(0x00 || d) (RFC 9162 §2.1.1). */
export const leafHash = (data) => sha256(concat(Uint8Array.of(0), data));
/** SHA-256(0x01 || left || right). */
export const nodeHash = (left, right) => sha256(concat(Uint8Array.of(1), left, right));

/** MTH of a list of leaf hashes (RFC 9162 §2.1.1), for building test trees and tiles. */
export async function rootOfLeafHashes(hashes) {
  if (hashes.length === 0) return EMPTY_ROOT;
  let level = hashes;
  while (level.length > 1) {
    const next = [];
    for (let i = 0; i + 1 < level.length; i += 2) next.push(await nodeHash(level[i], level[i + 1]));
    if (level.length % 2) next.push(level[level.length - 1]); // RFC 9162: the odd node is promoted
    level = next;
  }
  return level[0];
}

// Inputs are checked before any hashing, as tlog/merkle/verify.py does, in the same order
// and with the same reasons: sizes and indices are integers (safe-integer numbers or
// BigInts) with 0 <= index < size <= 2^64 - 1 (RFC 9162 §4's uint64, as C2SP checkpoints),
// every hash is a 32-byte Uint8Array, a proof has at most as many hashes as such a tree
// can need, and a size of 0 has one root, SHA-256(""). Anything else throws the verifier's
// error type; nothing is accepted silently.
export const MAX_TREE_SIZE = 2n ** 64n - 1n;
export const MAX_INCLUSION_HASHES = 64;
export const MAX_CONSISTENCY_HASHES = 128;

const big = (n, what, E) => {
  if (typeof n === 'bigint') return n;
  if (Number.isSafeInteger(n)) return BigInt(n);
  throw new E(`${what} must be an integer`);
};
function treeSize(n, E, what = 'tree size') {
  const v = big(n, what, E);
  if (v < 0n || v > MAX_TREE_SIZE) throw new E(`${what} ${v} is outside 0..2^64-1`);
  return v;
}
const isHash = (h) => h instanceof Uint8Array && h.length === 32;
function hash32(h, what, E) {
  if (!isHash(h)) throw new E(`${what} is not 32 bytes`);
  return h;
}
function checkHashes(proof, E) {
  for (const p of proof) if (!isHash(p)) throw new E('proof hash is not 32 bytes');
}
function proofList(proof, limit, tooLong, E) {
  if (!Array.isArray(proof)) throw new E('proof must be a list of hashes');
  if (proof.length > limit) throw new E(tooLong);
  return proof;
}

/** RFC 9162 §2.1.3.2 steps 1-5: the root an inclusion proof implies (step 5's
 * comparison with the root is verifyInclusion's). */
export async function rootFromInclusion(index, size, leaf, proof) {
  const E = InclusionProofError;
  const n = treeSize(size, E);
  let fn = big(index, 'index', E), sn = n - 1n;                        // step 2
  if (!(fn >= 0n && fn < n)) throw new E(`index ${fn} is outside a tree of size ${n}`); // step 1
  hash32(leaf, 'leaf hash', E);
  proofList(proof, MAX_INCLUSION_HASHES, 'inclusion proof is too long', E);
  let r = leaf;                                                         // step 3
  for (const p of proof) {                                              // step 4
    if (!isHash(p)) throw new E('proof hash is not 32 bytes');
    if (sn === 0n) throw new E('inclusion proof is too long');           // 4a
    if ((fn & 1n) || fn === sn) {                                       // 4b
      r = await nodeHash(p, r);
      if (!(fn & 1n)) while (fn && !(fn & 1n)) { fn >>= 1n; sn >>= 1n; }
    } else {
      r = await nodeHash(r, p);                                         // 4b "Otherwise"
    }
    fn >>= 1n; sn >>= 1n;                                               // 4c
  }
  if (sn !== 0n) throw new E('inclusion proof is too short');           // step 5 (sn == 0)
  return r;
}

/** Verify an inclusion proof against a root; throws InclusionProofError. */
export async function verifyInclusion(index, size, leaf, proof, root) {
  treeSize(size, InclusionProofError);
  hash32(root, 'root', InclusionProofError);
  const r = await rootFromInclusion(index, size, leaf, proof);
  if (!bytesEqual(r, root)) throw new InclusionProofError('inclusion proof does not lead to the checkpoint root');
}

/** RFC 9162 §2.1.4.2; throws ConsistencyProofError with the reason. The RFC covers
 * 0 < old < new; equal sizes and old = 0 are handled first as tlog/merkle/verify.py (and
 * Go's tlog) do. Step 1 (an empty proof fails) is checked after step 2's prepend, as in
 * Python, so that the reasons match: an empty proof still always fails (when old is a
 * power of two, step 7 finds sn != 0 and reports "too short"). */
export async function verifyConsistency(oldSize, newSize, oldRoot, newRoot, proof) {
  const E = ConsistencyProofError;
  const m = big(oldSize, 'old size', E), n = treeSize(newSize, E, 'new size');
  if (!(m >= 0n && m <= n)) throw new E(`old size ${m} is not within 0..${n}`);
  hash32(oldRoot, 'old root', E);
  hash32(newRoot, 'new root', E);
  proofList(proof, MAX_CONSISTENCY_HASHES, 'consistency proof is too long', E);
  checkHashes(proof, E);
  if (m === 0n && !bytesEqual(oldRoot, EMPTY_ROOT)) throw new E('size-0 root must be SHA-256 of the empty string');
  if (m === n) {
    if (proof.length) throw new E('proof must be empty for equal sizes');
    if (!bytesEqual(oldRoot, newRoot)) throw new E('same size, different roots');
    return;
  }
  if (m === 0n) {
    if (proof.length) throw new E('proof from the empty tree must be empty');
    return;
  }
  const path = [...proof];
  if ((m & (m - 1n)) === 0n) path.unshift(oldRoot);                     // step 2
  if (!path.length) throw new E('consistency proof is empty');          // step 1
  let fn = m - 1n, sn = n - 1n;                                         // step 3
  while (fn & 1n) { fn >>= 1n; sn >>= 1n; }                             // step 4
  let fr = path[0], sr = path[0];                                       // step 5
  for (const c of path.slice(1)) {                                      // step 6
    if (sn === 0n) throw new E('consistency proof is too long');         // 6a
    if ((fn & 1n) || fn === sn) {                                       // 6b
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if (!(fn & 1n)) while (fn && !(fn & 1n)) { fn >>= 1n; sn >>= 1n; }
    } else {
      sr = await nodeHash(sr, c);                                       // 6b "Otherwise"
    }
    fn >>= 1n; sn >>= 1n;                                               // 6c
  }
  if (sn !== 0n) throw new E('consistency proof is too short');         // step 7
  if (!(bytesEqual(fr, oldRoot) && bytesEqual(sr, newRoot)))
    throw new E('consistency proof does not match the two roots');      // step 7
}
