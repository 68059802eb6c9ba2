// A registry's key rotations (GET /v1/key-rotations), a port of registry/keyrotation.py:
// each statement hands the registry over from the key in force (its `signature`) to a new key
// (its `countersignature`), both Ed25519 over JCS(statement minus the two); the chain starts at
// the registry's genesis key. at(seq): the key that signs the anchor of commit seq; maySign(key,
// epoch, pinned): a key of the chain from the pinned one on, not retired by status epoch `epoch`.
import { InvalidInput, OAPError } from './errors.js';
import { b64dec } from './b64.js';
import { jcsBytes } from './jcs.js';
import { publicFromDidKey } from './didkey.js';
import { ed25519Verify } from './ed25519.js';
import { parseUtc } from './times.js';

export const ROTATION_TYPE = 'oap-registry-key-rotation';
const MAX_ROTATIONS = 1000;
const FIELDS = ['type', 'registry', 'number', 'previous', 'key', 'seq', 'epoch', 'issued_at', 'signature', 'countersignature'];
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isInt = (v) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
/** A rotation statement is malformed, out of order or not signed by the keys it names. */
export class RotationError extends InvalidInput {}
const fail = (msg) => new RotationError(msg);

async function checkSig(doc, field, did) {
  try {
    const msg = jcsBytes(Object.fromEntries(Object.entries(doc).filter(([k]) => k !== 'signature' && k !== 'countersignature')));
    await ed25519Verify(publicFromDidKey(did), msg, typeof doc[field] === 'string' ? b64dec(doc[field], field) : new Uint8Array(0));
  } catch (e) {
    if (e instanceof OAPError) throw fail(`key rotation: the ${field} is not by ${did}`);
    throw e;
  }
}

/** One statement whose form and both signatures verify (keyrotation.parse_rotation). */
export async function parseRotation(doc) {
  if (!isObj(doc) || Object.keys(doc).length !== FIELDS.length || !FIELDS.every((k) => Object.hasOwn(doc, k)) || doc.type !== ROTATION_TYPE)
    throw fail(`not an ${ROTATION_TYPE} statement`);
  const { number, seq, epoch } = doc;
  if (!isInt(number) || number < 1 || number > MAX_ROTATIONS || !isInt(seq) || seq < 1 || !isInt(epoch) || epoch < 1)
    throw fail('key rotation: number must be 1.., seq a commit after the genesis and epoch 1..');
  for (const name of ['registry', 'previous', 'key']) {
    try { publicFromDidKey(doc[name]); } catch (e) {
      if (e instanceof OAPError) throw fail(`key rotation: ${name}: ${e.reason}`);
      throw e;
    }
  }
  if (doc.previous === doc.key) throw fail('key rotation: the new key is the old key');
  let issuedAt;
  try { issuedAt = parseUtc(doc.issued_at, 'issued_at'); } catch (e) {
    if (e instanceof OAPError) throw fail(`key rotation: ${e.reason}`);
    throw e;
  }
  await checkSig(doc, 'signature', doc.previous);
  await checkSig(doc, 'countersignature', doc.key);
  return { registry: doc.registry, number: Number(number), previous: doc.previous, key: doc.key, seq: BigInt(seq), epoch: BigInt(epoch), issuedAt };
}

/** The chain of `registry` (its genesis key) through `statements` (keyrotation.key_chain). */
export async function keyChain(registry, statements) {
  if (!Array.isArray(statements) || statements.length > MAX_ROTATIONS) throw fail(`more than ${MAX_ROTATIONS} key rotations`);
  const rotations = [];
  for (const s of statements) {
    const r = await parseRotation(s);
    const current = rotations.length ? rotations[rotations.length - 1].key : registry;
    const last = rotations[rotations.length - 1];
    if (r.registry !== registry) throw fail(`key rotation of registry ${r.registry}, not of ${registry}`);
    if (r.number !== rotations.length + 1) throw fail(`key rotation ${r.number} out of order: expected ${rotations.length + 1}`);
    if (r.previous !== current) throw fail(`key rotation ${r.number} hands over from ${r.previous}, but the registry's key is ${current}`);
    if (last && (r.seq <= last.seq || r.epoch < last.epoch || r.issuedAt < last.issuedAt)) throw fail(`key rotation ${r.number} is not after rotation ${last.number}`);
    rotations.push(r);
  }
  const keys = [registry, ...rotations.map((r) => r.key)];
  return {
    registry, rotations, keys,
    current: keys[keys.length - 1],
    at(seq) {
      let key = registry;
      for (const r of rotations) if (r.seq <= BigInt(seq)) key = r.key;
      return key;
    },
    maySign(key, epoch, pinned) {
      const from = keys.indexOf(pinned);
      if (from < 0 || !keys.slice(from).includes(key)) return false;
      const retired = rotations.find((r) => r.previous === key);
      return !retired || BigInt(epoch) < retired.epoch;
    },
  };
}

/** A GET /v1/key-rotations answer, verified (keyrotation.chain_of_document). */
export async function chainOfDocument(doc) {
  if (!isObj(doc) || !Array.isArray(doc.rotations) || typeof doc.registry !== 'string') throw fail('not a key-rotations document');
  return keyChain(doc.registry, doc.rotations);
}
