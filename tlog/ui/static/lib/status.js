// Offline verification of a registry's signed OCSP-style status answer
// (OAP-CORE-1.0 §22.1), a port of registry/statusverify.py verify_status with
// the same checks, order and reasons (StatusVerificationError):
//  1. the response is signed by the registry key (Ed25519 over JCS(response minus
//     "signature"), key from the registry's did:key);
//  2. the embedded epoch statement is signed by the same key, names that registry
//     and has the same this_update / next_update;
//  3. the statement is anchored in the log: a `receipt` entry of SHA-256(JCS(statement)),
//     receipt_id urn:oap:status-epoch:<n>, signed by the registry; inclusion and
//     checkpoint checked too when a TrustPolicy is given (bundle.js);
//  4. good/unknown: the bracketing leaves prove the id is absent from the sorted
//     Merkle tree of revoked ids (size and root signed in the statement);
//     revoked: the id's leaf is in that tree and commits to the record's hash, the
//     record's own signatures verify, the record revokes this id at that time for that
//     reason, the Git path leads from the anchored commit tree to exactly the record's
//     bytes, the commit's .tlog-proof anchors (commit, tree, seq) (and for a kill switch
//     the receipt anchor);
//  5. fresh: this_update <= now + 5 min and now < next_update (unless allowStale).
import { StatusVerificationError, OAPError } from './errors.js';
import { b64dec, utf8, hex, bytesEqual } from './b64.js';
import { jcsBytes, parseJSON } from './jcs.js';
import { sha256, leafHash, verifyInclusion, EMPTY_ROOT } from './merkle.js';
import { publicFromDidKey } from './didkey.js';
import { ed25519Verify } from './ed25519.js';
import { parseProofBundle } from './bundle.js';
import { decodeCBOR, canonicalEntry } from './cbor.js';
import { checkRecord, recordRevokes, verifyGitPath, parseUtc, dateToMicros, microsToDate, MAX_CLOCK_SKEW_US } from './records.js';

const STATUSES = ['good', 'revoked', 'unknown'];
const fail = (msg) => new StatusVerificationError(msg);
const without = (obj, key) => Object.fromEntries(Object.entries(obj).filter(([k]) => k !== key));
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isInt = (v) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
const sameKeys = (obj, keys) => Object.keys(obj).length === keys.length && keys.every((k) => Object.prototype.hasOwnProperty.call(obj, k));
const sha256Text = (d) => 'sha256:' + hex(d);
function cmpBytes(a, b) {
  for (let k = 0; k < Math.min(a.length, b.length); k++) if (a[k] !== b[k]) return a[k] - b[k];
  return a.length - b.length;
}

async function checkSigned(obj, pub, what) {
  try {
    const raw = typeof obj.signature === 'string' ? b64dec(obj.signature, 'signature') : new Uint8Array(0);
    await ed25519Verify(pub, jcsBytes(without(obj, 'signature')), raw);
  } catch (e) {
    if (e instanceof OAPError) throw fail(`${what} is not signed by the registry key`);
    throw e;
  }
}
function time(value, what) {
  try { return parseUtc(value, what); } catch (e) {
    if (e instanceof OAPError) throw fail(`${what} is not an RFC 3339 UTC time`);
    throw e;
  }
}

// --- anchors (registry/anchoring.py); AnchorError reasons, wrapped by the caller -------
async function entryOf(bundle, what) {
  let b;
  try { b = parseProofBundle(bundle); } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: malformed .tlog-proof: ${e.reason}`);
    throw e;
  }
  if (b.extra === null) throw fail(`${what}: the .tlog-proof carries no entry`);
  let entry;
  try {
    ({ value: entry } = decodeCBOR(b.extra));
    if (!isObj(entry) || !['receipt', 'commitment', 'conformance', 'registry'].includes(entry.type)) throw fail(`${what}: bad entry: not an OAP log entry`);
    if (!bytesEqual(await canonicalEntry(entry), b.extra)) throw fail(`${what}: entry is not in canonical form`);
  } catch (e) {
    if (e instanceof StatusVerificationError) throw e;
    if (e instanceof OAPError) throw fail(`${what}: bad entry: ${e.reason}`);
    throw e;
  }
  return [b, entry];
}
async function checkInLog(b, policy, what) {
  if (!policy) return false;
  try { await policy.verifyBundle(b); } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: not proven in the log: ${e.reason}`);
    throw e;
  }
  return true;
}
/** anchoring.py verify_receipt_anchor. */
export async function verifyReceiptAnchor(bundle, { receiptHash, receiptId, registry, policy = null }) {
  const what = `receipt anchor of ${receiptId}`;
  const [b, e] = await entryOf(bundle, what);
  if (e.type !== 'receipt' || e.receipt_hash !== sha256Text(receiptHash)) throw fail(`${what}: entry does not anchor this record's hash`);
  if (e.receipt_id !== receiptId || e.signer !== registry) throw fail(`${what}: entry names another receipt id or signer`);
  await checkInLog(b, policy, what);
  return b.index;
}
/** anchoring.py verify_commit_anchor. */
export async function verifyCommitAnchor(bundle, { commit, tree, seq, registry, policy = null }) {
  const what = `anchor of commit ${seq}`;
  const [b, e] = await entryOf(bundle, what);
  if (e.type !== 'registry') throw fail(`${what}: entry is not a registry entry`);
  if (e.commit !== commit || e.tree !== tree || e.seq !== seq) throw fail(`${what}: anchors commit ${e.commit} seq ${e.seq}, not ${commit} seq ${seq}`);
  if (e.signer !== registry) throw fail(`${what}: signed by ${e.signer}, not the registry key ${registry}`);
  await checkInLog(b, policy, what);
  return b.index;
}

// --- sorted Merkle tree proofs -------------------------------------------------------
async function leafOf(item, size, root, what) {
  if (!isObj(item) || !sameKeys(item, ['index', 'leaf', 'inclusion_proof'])) throw fail(`${what}: must be {index, leaf, inclusion_proof}`);
  const { index, inclusion_proof: proof } = item;
  if (!isInt(index) || !Array.isArray(proof)) throw fail(`${what}: malformed`);
  let data, hashes, leaf;
  try {
    data = b64dec(item.leaf, 'leaf');
    hashes = proof.map((h) => b64dec(h, 'proof hash'));
    leaf = parseJSON(data);
  } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: ${e.reason}`);
    throw e;
  }
  let canonical = false;
  try { canonical = isObj(leaf) && bytesEqual(jcsBytes(leaf), data); } catch { canonical = false; }
  if (!canonical || !sameKeys(leaf, ['id', 'reason', 'record', 'revoked_at']) || typeof leaf.id !== 'string')
    throw fail(`${what}: leaf is not a canonical revoked-id leaf`);
  if (hashes.some((h) => h.length !== 32)) throw fail(`${what}: proof hashes must be 32 bytes`);
  try { await verifyInclusion(index, size, await leafHash(data), hashes, root); } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: ${e.reason}`);
    throw e;
  }
  return { ...leaf, _index: BigInt(index) };
}

/** statusverify.py verify_absence: `key` is not in the sorted tree (size, root). */
export async function verifyAbsence(proof, key, size, root) {
  if (!isObj(proof) || proof.type !== 'sorted-merkle-absence' || !sameKeys(proof, ['type', 'left', 'right']))
    throw fail('good/unknown responses need a sorted-merkle-absence proof');
  const k = utf8(key), n = BigInt(size);
  const left = proof.left !== null ? await leafOf(proof.left, size, root, 'left leaf') : null;
  const right = proof.right !== null ? await leafOf(proof.right, size, root, 'right leaf') : null;
  if (!left && !right) {
    if (n !== 0n || !bytesEqual(root, EMPTY_ROOT)) throw fail('no bracketing leaves, but the revoked tree is not empty');
    return;
  }
  if (left && !(cmpBytes(utf8(left.id), k) < 0)) throw fail('left leaf does not sort before the id');
  if (right && !(cmpBytes(k, utf8(right.id)) < 0)) throw fail('right leaf does not sort after the id');
  if (!left && right._index !== 0n) throw fail('id sorts before the first leaf, but the right leaf is not leaf 0');
  if (!right && left._index !== n - 1n) throw fail('id sorts after the last leaf, but the left leaf is not the last');
  if (left && right && right._index !== left._index + 1n) throw fail('bracketing leaves are not adjacent');
}

async function checkRevoked(resp, key, size, root, registry, policy) {
  const proof = resp.proof;
  if (!isObj(proof) || proof.type !== 'sorted-merkle-membership') throw fail('a revoked response needs a sorted-merkle-membership proof');
  const leaf = await leafOf(without(proof, 'type'), size, root, 'revoked leaf');
  if (leaf.id !== key) throw fail("the leaf proven is not this id's");
  const rv = resp.revocation;
  const F = ['revoked_at', 'reason', 'record', 'path', 'seq', 'commit', 'tree', 'git_path', 'anchor'];
  if (!isObj(rv) || !F.every((f) => f in rv) || !Object.keys(rv).every((f) => F.includes(f) || f === 'receipt_anchor'))
    throw fail('revocation block malformed');
  let rec;
  try { rec = await checkRecord(rv.record); } catch (e) {
    if (e instanceof OAPError) throw fail(`revocation record: ${e.reason}`);
    throw e;
  }
  const content = jcsBytes(rv.record);
  if (leaf.record !== sha256Text(await sha256(content)) || leaf.revoked_at !== rv.revoked_at || leaf.reason !== rv.reason || rv.path !== rec.path)
    throw fail('the leaf does not commit to this record');
  const revokedAt = time(rv.revoked_at, 'revoked_at');
  if (!recordRevokes(rec, key, rv.reason, revokedAt)) throw fail('the record does not revoke this id at that time for that reason');
  await verifyGitPath(rv.tree, rec.path, rv.git_path, content, fail);
  if (!isInt(rv.seq) || typeof rv.commit !== 'string' || typeof rv.tree !== 'string') throw fail('revocation: seq, commit, tree malformed');
  await verifyCommitAnchor(rv.anchor, { commit: rv.commit, tree: rv.tree, seq: rv.seq, registry, policy });
  if (rec.type === 'kill_switch')
    await verifyReceiptAnchor(rv.receipt_anchor ?? '', { receiptHash: await sha256(content), receiptId: rec.id, registry, policy });
  return { revokedAt: microsToDate(revokedAt), reason: rv.reason, record: rv.record };
}

/** Verify a saved status response (object or JSON text, read like Python's json.loads;
 * pass the text for exact parity: "4.0" is then a float, refused where an int is needed).
 * registry: the registry's did:key; policy: a bundle.js TrustPolicy for the log (optional:
 * without it the anchors are bound to the statement/record but their log inclusion is
 * not checked, and logChecked is false); now: Date. Returns
 * {id, status, thisUpdate, nextUpdate, epoch, logChecked, revokedAt?, reason?, record?}. */
export async function verifyStatus(resp, { registry, policy = null, now = new Date(), allowStale = false }) {
  if (typeof resp === 'string' || resp instanceof Uint8Array) {
    try { resp = parseJSON(resp, { strict: false, floats: 'wrap' }); } catch (e) { throw fail(`status response is not JSON: ${e.reason}`); }
  }
  if (!isObj(resp)) throw fail('status response must be a JSON object');
  let pub;
  try { pub = publicFromDidKey(registry); } catch (e) { throw fail(`registry key: ${e.reason}`); }
  await checkSigned(resp, pub, 'status response');
  const need = ['type', 'id', 'status', 'this_update', 'next_update', 'epoch', 'epoch_anchor', 'proof', 'signature'];
  if (resp.status === 'revoked') need.push('revocation');
  if (!sameKeys(resp, need) || resp.type !== 'oap-status-response' || !STATUSES.includes(resp.status)) throw fail('not an oap-status-response');
  const key = resp.id;
  if (typeof key !== 'string' || !key) throw fail('id must be a non-empty string');
  const st = resp.epoch;
  if (!isObj(st) || st.type !== 'oap-status-epoch') throw fail('epoch statement missing');
  await checkSigned(st, pub, 'epoch statement');
  if (st.registry !== registry) throw fail('epoch statement names another registry');
  if (st.this_update !== resp.this_update || st.next_update !== resp.next_update) throw fail('response times differ from the epoch statement');
  const thisUpdate = time(resp.this_update, 'this_update'), nextUpdate = time(resp.next_update, 'next_update');
  const number = st.epoch, size = st.revoked_size;
  if (!isInt(number) || !isInt(size) || size < 0) throw fail('epoch statement: epoch and revoked_size must be integers');
  if (typeof st.revoked_root !== 'string' || !/^sha256:[0-9a-fA-F]{64}$/.test(st.revoked_root))
    throw fail("revoked_root must be 'sha256:' followed by 64 hex digits");
  const root = Uint8Array.from(st.revoked_root.slice(7).match(/../g), (h) => parseInt(h, 16));
  try {
    await verifyReceiptAnchor(resp.epoch_anchor, { receiptHash: await sha256(jcsBytes(st)), receiptId: `urn:oap:status-epoch:${number}`, registry, policy });
  } catch (e) {
    if (e instanceof StatusVerificationError) throw fail(`epoch anchor: ${e.reason}`);
    throw e;
  }
  let out = {};
  if (resp.status === 'revoked') out = await checkRevoked(resp, key, size, root, registry, policy);
  else await verifyAbsence(resp.proof, key, size, root);
  const nowUs = dateToMicros(now);
  if (thisUpdate > nowUs + MAX_CLOCK_SKEW_US) throw fail('response is from the future (this_update after now)');
  if (nowUs >= nextUpdate && !allowStale) throw fail(`response is stale: next_update ${resp.next_update} has passed`);
  return { id: key, status: resp.status, thisUpdate: microsToDate(thisUpdate), nextUpdate: microsToDate(nextUpdate),
    epoch: number, logChecked: policy !== null, ...out };
}
