// W3C Bitstring Status List v1.0 credentials the registry publishes for an issuer
// (registry/statuslist.py): statusPurpose `revocation` (bits never clear; every bit once the
// issuer is revoked for a reason other than a rotation) or `suspension` (every bit while the
// issuer is suspended). Checked here: the registry's eddsa-jcs-2022 proof (by its did:key),
// the credential's shape, and `encodedList` (multibase base64url "u" of GZIP data, index 0
// the most significant bit of the first byte, at least 131,072 entries).
import { InvalidInput, StatusVerificationError } from './errors.js';
import { b64urlDec } from './b64.js';
import { splitDidUrl } from './diddoc.js';
import { verifyProof } from './dataintegrity.js';
import { parseUtc } from './times.js';

export const STATUS_LIST_BITS = 131072;
export const STATUS_PURPOSES = ['revocation', 'suspension'];
const MAX_DECODED = 16 * 1024 * 1024;
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const fail = (msg) => new StatusVerificationError(`status list: ${msg}`);

/** `encodedList` -> the raw bitstring (statuslist.py decode_list); InvalidInput when malformed. */
export async function decodeList(encoded) {
  if (typeof encoded !== 'string' || !encoded.startsWith('u')) throw new InvalidInput("encodedList must be multibase base64url ('u' prefix)");
  if (encoded.includes('=')) throw new InvalidInput('encodedList must not be padded');
  let packed;
  try { packed = b64urlDec(encoded.slice(1), 'encodedList'); } catch { throw new InvalidInput('encodedList is not base64url of GZIP data'); }
  const chunks = [];
  let total = 0;
  try {
    const reader = new Blob([packed]).stream().pipeThrough(new DecompressionStream('gzip')).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      total += value.length;
      if (total > MAX_DECODED) { await reader.cancel(); throw new InvalidInput('encodedList is truncated or too large'); }
      chunks.push(value);
    }
  } catch (e) {
    if (e instanceof InvalidInput) throw e;
    throw new InvalidInput('encodedList is not base64url of GZIP data');
  }
  const bits = new Uint8Array(total);
  let o = 0;
  for (const c of chunks) { bits.set(c, o); o += c.length; }
  if (bits.length * 8 < STATUS_LIST_BITS) throw new InvalidInput(`status list shorter than ${STATUS_LIST_BITS} entries`);
  return bits;
}

/** The bit at `index` (statuslist.py bit). */
export function listBit(bits, index) {
  if (index < 0 || index >= bits.length * 8) throw new InvalidInput(`status index ${index} outside the list`);
  return (bits[index >> 3] & (0x80 >> (index & 7))) !== 0;
}

/** A status list credential of the registry `registry` (its did:key), checked:
 * -> {purpose, bits, set: number of bits set, all: every bit set, size, validFrom, validUntil, url}. */
export async function verifyStatusList(cred, { registry, purpose = null, now = new Date() } = {}) {
  if (!isObj(cred)) throw fail('not a JSON object');
  const types = cred.type;
  if (!Array.isArray(types) || !types.includes('VerifiableCredential') || !types.includes('BitstringStatusListCredential'))
    throw fail('not a BitstringStatusListCredential');
  if (cred.issuer !== registry) throw fail(`issued by ${cred.issuer}, not the registry ${registry}`);
  const proof = cred.proof;
  if (!isObj(proof)) throw fail('no Data Integrity proof');
  if (splitDidUrl(String(proof.verificationMethod))[0] !== registry) throw fail(`proof by ${proof.verificationMethod}, not the registry key`);
  try { await verifyProof(cred, proof, null, { where: 'proof' }); } catch (e) {
    throw fail(`the registry's proof does not verify: ${e.reason || e.message}`);
  }
  const cs = cred.credentialSubject;
  if (!isObj(cs) || cs.type !== 'BitstringStatusList' || !STATUS_PURPOSES.includes(cs.statusPurpose)) throw fail('credentialSubject is not a BitstringStatusList');
  if (purpose !== null && cs.statusPurpose !== purpose) throw fail(`statusPurpose is ${cs.statusPurpose}, not ${purpose}`);
  let bits;
  try { bits = await decodeList(cs.encodedList); } catch (e) { throw fail(e.reason); }
  let set = 0;
  for (const b of bits) for (let x = b; x; x &= x - 1) set++;
  const validUntil = typeof cred.validUntil === 'string' ? cred.validUntil : null;
  if (validUntil && parseUtc(validUntil, 'validUntil') <= BigInt(now.getTime()) * 1000n) throw fail(`stale: validUntil ${validUntil} has passed`);
  return { purpose: cs.statusPurpose, bits, set, all: set === bits.length * 8, size: bits.length * 8,
    validFrom: cred.validFrom ?? null, validUntil, url: cred.id ?? null };
}
