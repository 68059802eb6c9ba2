// Offline verification of a registry's signed OCSP-style status answer (OAP-CORE-1.0
// §22.1; docs/architecture.md §6.1), a port of registry/statusverify.py verify_status with
// the same checks, order and reasons (StatusVerificationError):
//  1. the response is signed by the registry key (Ed25519 over JCS(response minus
//     "signature"), key from the registry's did:key);
//  2. the embedded epoch statement is signed by the same key, names that registry and has
//     the same this_update / next_update;
//  3. the statement is anchored in the log: a `receipt` entry of SHA-256(JCS(statement)),
//     receipt_id urn:oap:status-epoch:<n>, signed by the registry; inclusion checked when a
//     policy is given, in k of its logs for a registry anchored in several (an anchors file,
//     lib/anchors.js; the policy's `logs <k>`);
//  4. good/unknown: the bracketing leaves prove the id is absent from the sorted Merkle tree
//     (size and root signed in the statement); revoked/suspended: the id's leaf is in that
//     tree, is a leaf of that verdict and names the deciding record's hash; for that record
//     (and the rotation it is `linked_by`, and the recovery that `reinstated` a token class)
//     its signatures verify (with the DID documents the answer carries, each proven in the
//     commit's tree), the Git path leads from the anchored commit tree to exactly its bytes,
//     and that commit's anchor binds it (and a kill switch's receipt anchor) — anchors signed
//     by the registry whose history the statement names (`history`: a mirror answers for its
//     upstream's records); and the records decide this verdict for this id at that time for
//     that reason. A conformance receipt revoked or suspended with its subject carries `via`:
//     the receipt itself, with the same evidence, whose id is this id; the records then decide
//     the verdict for the subject it names (only a receipt's answer may carry `via`). A receipt
//     whose level does not hold (witness_invalid / auditor_invalid) names the `signer` that does
//     not count and carries `via` with the receipt's raw Git commit: the signer is one of its
//     witnesses (its auditor), the records give it the standing stated from no later than the
//     commit time, and the receipt is revoked from its issued_at; witness_unqualified is decided
//     by the L5 receipt itself. Token ids may name an epoch (`<principal>#<class>@<recovery id>`);
//     a `reinstated` recovery names the next epoch (reinstatedId), never the one asked about;
//  5. fresh: this_update <= now + 5 min and now < next_update (unless allowStale).
import { StatusVerificationError, OAPError } from './errors.js';
import { b64dec, utf8, hex, bytesEqual } from './b64.js';
import { jcsBytes, parseJSON } from './jcs.js';
import { sha256, leafHash, verifyInclusion, EMPTY_ROOT } from './merkle.js';
import { publicFromDidKey } from './didkey.js';
import { ed25519Verify } from './ed25519.js';
import { parseProofBundle } from './bundle.js';
import { decodeCBOR, canonicalEntry } from './cbor.js';
import { isAnchorsFile, parseAnchors } from './anchors.js';
import { keysFromDocument } from './diddoc.js';
import { sameJSON } from './dataintegrity.js';
import { checkRecord, classify, idHash, vcStatusKey, verifyGitPath, gitSha, parseUtc, dateToMicros, microsToDate, MAX_CLOCK_SKEW_US, KILL_SWITCH_CLASSES } from './records.js';

export const STATUSES = ['good', 'revoked', 'suspended', 'unknown'];
const REVOKED = ['id', 'reason', 'record', 'revoked_at'];
/** The leaves of the sorted tree, one key set per verdict (registry/status.py). */
export const LEAF_SHAPES = [[REVOKED, 'revoked'], [[...REVOKED, 'reinstated_at', 'reinstated_by'], 'revoked'],
  [['id', 'reason', 'record', 'suspended_at'], 'suspended']];
const EVIDENCE = ['record', 'path', 'seq', 'commit', 'tree', 'git_path', 'anchor'];
const EVIDENCE_OPTIONAL = ['receipt_anchor', 'did_documents', 'commit_object'];
/** Why a conformance receipt's level does not hold: a signer that does not count (§31, §28.5). */
export const SIGNER_REASONS = ['witness_invalid', 'auditor_invalid', 'witness_unqualified', 'subject_invalid'];
const RECOVERIES = ['rotate', 'resume'];
/** A conformance receipt's status id: the only id whose answer may carry `via`. */
const RECEIPT_PREFIX = 'urn:oap:conformance:';
const MAX_DIDS_PER_DOCUMENT = 16;
const fail = (msg) => new StatusVerificationError(msg);
const without = (obj, key) => Object.fromEntries(Object.entries(obj).filter(([k]) => k !== key));
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isInt = (v) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
const has = (obj, k) => Object.hasOwn(obj, k);
const sameKeys = (obj, keys) => Object.keys(obj).length === keys.length && keys.every((k) => has(obj, k));
const within = (obj, keys) => Object.keys(obj).every((k) => keys.includes(k));
const holds = (obj, keys) => keys.every((k) => has(obj, k));
const sha256Text = (d) => 'sha256:' + hex(d);
const shapeOf = (leaf) => {
  const keys = Object.keys(leaf).filter((k) => k !== '_index');
  const hit = LEAF_SHAPES.find(([shape]) => shape.length === keys.length && shape.every((k) => keys.includes(k)));
  return hit ? hit[1] : null;
};
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

// --- anchors (registry/anchoring.py); AnchorError reasons, as StatusVerificationError ----------

/** The proofs of an anchor (one tlog-proof, or an anchors file) and the one entry they all carry. */
async function entryOf(data, what) {
  let bundles;
  try { bundles = isAnchorsFile(data) ? parseAnchors(data) : [parseProofBundle(data)]; } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: malformed .tlog-proof: ${e.reason}`);
    throw e;
  }
  if (bundles.some((b) => b.extra === null)) throw fail(`${what}: the .tlog-proof carries no entry`);
  const extra = bundles[0].extra;
  if (bundles.some((b) => !bytesEqual(b.extra, extra))) throw fail(`${what}: the logs' proofs carry different entries`);
  let entry;
  try {
    ({ value: entry } = decodeCBOR(extra));
    if (!isObj(entry) || !['receipt', 'commitment', 'conformance', 'registry'].includes(entry.type)) throw fail(`${what}: bad entry: not an OAP log entry`);
    if (!bytesEqual(await canonicalEntry(entry), extra)) throw fail(`${what}: entry is not in canonical form`);
  } catch (e) {
    if (e instanceof StatusVerificationError) throw e;
    if (e instanceof OAPError) throw fail(`${what}: bad entry: ${e.reason}`);
    throw e;
  }
  return [bundles, entry];
}

/** The entry is included in the policy's logs (k of them); the first proof's index. */
async function checkInLogs(data, bundles, policy, what) {
  if (!policy) return bundles[0].index;
  const single = !isAnchorsFile(data);
  try {
    if (single && (policy.policy.logQuorum || 1) <= 1) {
      await policy.verifyBundle(bundles[0]);
      return bundles[0].index;
    }
    return (await policy.verifyAnchored(data)).entries[0].index;
  } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: not proven in the log${single ? '' : 's'}: ${e.reason}`);
    throw e;
  }
}

/** anchoring.py verify_receipt_anchor: `bundle` (a tlog-proof or an anchors file) anchors
 * SHA-256 `receiptHash` as `receiptId`, signed by `registry`, in k of the policy's logs. */
export async function verifyReceiptAnchor(bundle, { receiptHash, receiptId, registry, policy = null }) {
  const what = `receipt anchor of ${receiptId}`;
  const [bundles, e] = await entryOf(bundle, what);
  if (e.type !== 'receipt' || e.receipt_hash !== sha256Text(receiptHash)) throw fail(`${what}: entry does not anchor this record's hash`);
  if (e.receipt_id !== receiptId || e.signer !== registry) throw fail(`${what}: entry names another receipt id or signer`);
  return checkInLogs(bundle, bundles, policy, what);
}

/** anchoring.py verify_commit_anchor: `bundle` anchors exactly (commit, tree, seq) signed by
 * `registry`, in k of the policy's logs; the log index (of the first log's proof). */
export async function verifyCommitAnchor(bundle, { commit, tree, seq, registry, policy = null }) {
  const what = `anchor of commit ${seq}`;
  const [bundles, e] = await entryOf(bundle, what);
  if (e.type !== 'registry') throw fail(`${what}: entry is not a registry entry`);
  if (e.commit !== commit || e.tree !== tree || e.seq !== seq) throw fail(`${what}: anchors commit ${e.commit} seq ${e.seq}, not ${commit} seq ${seq}`);
  if (e.signer !== registry) throw fail(`${what}: signed by ${e.signer}, not the registry key ${registry}`);
  return checkInLogs(bundle, bundles, policy, what);
}

// --- sorted Merkle tree proofs -------------------------------------------------------
async function leafOf(item, size, root, what) {
  if (!isObj(item) || !sameKeys(item, ['index', 'leaf', 'inclusion_proof'])) throw fail(`${what}: must be {index, leaf, inclusion_proof}`);
  const { index, inclusion_proof: proof } = item;
  if (!isInt(index) || !Array.isArray(proof) || typeof item.leaf !== 'string' || !proof.every((h) => typeof h === 'string'))
    throw fail(`${what}: malformed`);
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
  if (!canonical || shapeOf(leaf) === null || typeof leaf.id !== 'string') throw fail(`${what}: leaf is not a canonical status leaf`);
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

// --- revoked / suspended: records, Git paths, anchors ---------------------------------------------

async function checkStanding(resp, key, size, root, registry, policy) {
  const status = resp.status, proof = resp.proof;
  if (!isObj(proof) || proof.type !== 'sorted-merkle-membership') throw fail(`a ${status} response needs a sorted-merkle-membership proof`);
  const leaf = await leafOf(without(proof, 'type'), size, root, `${status} leaf`);
  if (leaf.id !== key) throw fail("the leaf proven is not this id's");
  if (shapeOf(leaf) !== status) throw fail(`the leaf proven is not a ${status} leaf`);
  const revoked = status === 'revoked';
  const [name, when] = revoked ? ['revocation', 'revoked_at'] : ['suspension', 'suspended_at'];
  const block = resp[name];
  const allowed = [...EVIDENCE, ...EVIDENCE_OPTIONAL, when, 'reason', 'linked_by', 'via', ...(revoked ? ['reinstated', 'signer'] : [])];
  if (!isObj(block) || !holds(block, [...EVIDENCE, when, 'reason']) || !within(block, allowed)) throw fail(`${name} block malformed`);
  if (has(block, 'via') && !key.startsWith(RECEIPT_PREFIX)) throw fail("via: only a conformance receipt's answer falls with its subject");
  const [rec, content] = await evidence(block, registry, policy, `${name} record`);
  if (leaf.record !== sha256Text(await sha256(content)) || !sameJSON(leaf[when], block[when]) || !sameJSON(leaf.reason, block.reason))
    throw fail('the leaf does not commit to this record');
  const since = time(block[when], when);
  const linked = has(block, 'linked_by') ? (await evidence(sole(block.linked_by, 'linked_by'), registry, policy, 'linked_by'))[0] : null;
  const out = { reason: block.reason, record: block.record, deciding: rec, linkedBy: linked };
  if (has(block, 'signer') || SIGNER_REASONS.includes(block.reason)) // the receipt's level does not hold
    return { ...out, ...(await signerDecides(block, rec, linked, key, since, registry, policy)) };
  if (has(block, 'via')) { // the records decide the standing of the subject the receipt names
    out.via = await via(block.via, key, registry, policy);
    key = out.via.subject;
    out.subject = key;
  }
  if (!revoked) {
    recordSuspends(rec, linked, key, block.reason, since);
    return { ...out, suspendedAt: microsToDate(since) };
  }
  recordRevokes(rec, linked, key, block.reason, since);
  out.revokedAt = microsToDate(since);
  if (has(block, 'reinstated')) {
    const r = block.reinstated;
    if (!isObj(r) || !holds(r, [...EVIDENCE, 'reinstated_at']) || !within(r, [...EVIDENCE, ...EVIDENCE_OPTIONAL, 'reinstated_at']))
      throw fail('reinstated block malformed');
    const [rrec, rcontent] = await evidence(r, registry, policy, 'reinstating record');
    if (!sameJSON(leaf.reinstated_at ?? null, r.reinstated_at) || !sameJSON(leaf.reinstated_by ?? null, sha256Text(await sha256(rcontent))))
      throw fail('the leaf does not commit to this reinstatement');
    const at = time(r.reinstated_at, 'reinstated_at');
    out.reinstatedId = recordReinstates(rrec, key, since, at);
    out.reinstatedAt = microsToDate(at);
    out.reinstatedBy = rrec;
  } else if (has(leaf, 'reinstated_at')) {
    throw fail('the leaf names a reinstatement the answer does not prove');
  }
  return out;
}

/** statusverify.py _signer_decides: a conformance receipt whose level does not hold because of a
 * signer: revoked from its issued_at; `signer` is one of its witnesses (or its auditor) and, for
 * an invalid key, the deciding record (with linked_by) gives that signer the standing `signer`
 * states, from no later than the receipt's commit time (the raw Git commit in `via`). */
async function signerDecides(block, rec, linked, key, since, registry, policy) {
  const reason = block.reason, signer = has(block, 'signer') ? block.signer : undefined;
  if (!SIGNER_REASONS.includes(reason) || !key.startsWith(RECEIPT_PREFIX) || !isObj(signer) || typeof signer.id !== 'string')
    throw fail("signer: only a conformance receipt's answer names a signer, with its reason");
  if (reason === 'witness_unqualified') {
    const ok = sameKeys(signer, ['id']) && !has(block, 'via') && linked === null && rec.type === 'conformance'
      && rec.id === key && rec.level === 'L5' && rec.witnesses.includes(signer.id) && since === rec.effectiveAt;
    if (!ok) throw fail('the record does not show an unqualified witness of this receipt');
    return { revokedAt: microsToDate(since), signer: signer.id };
  }
  const keyed = has(signer, 'key');
  if (!sameKeys(signer, keyed ? ['id', 'status', 'since', 'reason', 'key'] : ['id', 'status', 'since', 'reason'])
      || !['revoked', 'suspended'].includes(signer.status) || typeof signer.reason !== 'string' || !has(block, 'via')
      || (keyed && (typeof signer.key !== 'string' || signer.key === signer.id)))
    throw fail('signer malformed');
  const [receipt] = await evidence(sole(block.via, 'via'), registry, policy, 'via');
  if (receipt.type !== 'conformance' || receipt.id !== key) throw fail('via: not this conformance receipt');
  const committed = await commitTime(block.via, 'via');
  const who = signer.id, signedSince = time(signer.since, 'signer since');
  const signs = reason === 'subject_invalid' ? who === receipt.subject && keyed // only the key of its own signature can fail it
    : reason === 'witness_invalid' ? receipt.witnesses.includes(who) : receipt.audit !== null && receipt.audit !== undefined && receipt.audit.auditor === who;
  const role = { witness_invalid: ' witness', auditor_invalid: 'n auditor' }[reason] ?? ' subject signing by key';
  if (!signs) throw fail(`signer: ${who} is not a${role} of this receipt`);
  if (signedSince > committed) throw fail('signer: its standing began after the receipt was committed, so its signature counts');
  let decided = who; // whose standing the records prove: the signer's DID, or the key it signed with
  if (keyed) {
    if ((receipt.signingKeys ? receipt.signingKeys.get(who) : undefined) !== signer.key)
      throw fail(`signer: ${who} did not sign this receipt with the key ${signer.key}`);
    decided = signer.key;
  }
  if (signer.status === 'revoked') recordRevokes(rec, linked, decided, signer.reason, signedSince);
  else recordSuspends(rec, linked, decided, signer.reason, signedSince);
  if (since !== receipt.effectiveAt) throw fail('a receipt whose level does not hold is revoked from its issued_at');
  return { revokedAt: microsToDate(since), signer: who, via: receipt };
}

/** statusverify.py _commit_time: the committer time (µs) of the raw Git commit `commit_object`,
 * which must hash to the evidence's `commit` and name its `tree`. */
async function commitTime(block, what) {
  let raw = null;
  if (typeof block.commit_object === 'string') {
    try { raw = b64dec(block.commit_object, 'commit_object'); } catch (e) {
      if (e instanceof OAPError) throw fail(`${what}: ${e.reason}`);
      throw e;
    }
  }
  if (raw === null || await gitSha('commit', raw) !== block.commit) throw fail(`${what}: commit_object is not the commit ${block.commit}`);
  const text = Array.from(raw, (b) => String.fromCharCode(b)).join('');
  const cut = text.indexOf('\n\n');
  const headers = (cut < 0 ? text : text.slice(0, cut)).split('\n');
  const committer = headers.filter((h) => h.startsWith('committer '));
  let parts = [];
  if (committer.length === 1) {
    const line = committer[0], last = line.lastIndexOf(' '), prev = last > 0 ? line.lastIndexOf(' ', last - 1) : -1;
    parts = prev >= 0 ? [line.slice(0, prev), line.slice(prev + 1, last), line.slice(last + 1)] : [];
  }
  if (headers[0] !== `tree ${block.tree}` || parts.length !== 3 || !/^[0-9]+$/.test(parts[1]) || parts[1].length > 12)
    throw fail(`${what}: commit_object is not a commit of the tree ${block.tree}`);
  return BigInt(parts[1]) * 1000000n;
}

/** Evidence that stands alone in the block (`linked_by`, `via`): nothing but the evidence. */
function sole(item, what) {
  if (isObj(item) && !within(item, [...EVIDENCE, ...EVIDENCE_OPTIONAL])) throw fail(`${what}: evidence malformed`);
  return item;
}

/** A receipt answering with its subject's standing: `via` is this receipt, proven in the
 * registry as any deciding record is; the subject it names is whose standing decides. -> the receipt. */
async function via(item, key, registry, policy) {
  const [rec] = await evidence(sole(item, 'via'), registry, policy, 'via');
  if (rec.type !== 'conformance' || rec.id !== key) throw fail('via: not this conformance receipt');
  return rec;
}

/** A record the answer relies on: its signatures, its Git path from the anchored commit
 * tree, the commit's anchor (and a kill switch's receipt anchor). -> [record, its JCS bytes]. */
async function evidence(block, registry, policy, what) {
  if (!isObj(block) || !holds(block, EVIDENCE)) throw fail(`${what}: evidence malformed`);
  if (!isInt(block.seq) || typeof block.commit !== 'string' || typeof block.tree !== 'string') throw fail(`${what}: seq, commit, tree malformed`);
  if (has(block, 'commit_object')) await commitTime(block, what); // bound to the commit, wherever it is given
  const record = block.record;
  const lookup = await didDocuments(has(block, 'did_documents') ? block.did_documents : [], block.tree);
  let rec;
  try { rec = await checkRecord(record, { lookup }); } catch (e) {
    if (e instanceof OAPError) throw fail(`${what}: ${e.reason}`);
    throw e;
  }
  const content = jcsBytes(record);
  if (block.path !== rec.path) throw fail(`${what}: path is not the record's`);
  await verifyGitPath(block.tree, rec.path, block.git_path, content, fail);
  const signer = typeof registry === 'string' ? registry : registry.at(block.seq); // the key of that commit (lib/keyrotation.js)
  try {
    await verifyCommitAnchor(block.anchor, { commit: block.commit, tree: block.tree, seq: block.seq, registry: signer, policy });
    if (rec.type === 'kill_switch')
      await verifyReceiptAnchor(has(block, 'receipt_anchor') ? block.receipt_anchor : '', { receiptHash: await sha256(content), receiptId: rec.id, registry: signer, policy });
  } catch (e) {
    if (e instanceof OAPError) throw fail(e.reason);
    throw e;
  }
  rec.seq = block.seq; rec.commit = block.commit;
  return [rec, content];
}

/** The DID documents an answer carries for signers other than did:key, each proven to be in
 * the registry's tree at the record's commit: the lookup to check the record's signatures
 * with, as the registry checked them (null when there are none). */
async function didDocuments(items, tree) {
  if (!Array.isArray(items) || items.length > MAX_DIDS_PER_DOCUMENT * 8) throw fail('did_documents must be a list');
  if (!items.length) return null;
  const docs = [];
  for (const item of items) {
    if (!isObj(item) || !sameKeys(item, ['path', 'document', 'git_path'])) throw fail('a did_documents item is {path, document, git_path}');
    const doc = item.document, path = item.path;
    let info, content;
    try {
      info = typeof path === 'string' ? classify(path) : null;
      content = jcsBytes(doc);
    } catch (e) {
      if (e instanceof OAPError) throw fail(e.reason);
      throw e;
    }
    const did = isObj(doc) ? doc.id : undefined;
    if (info === null || info.what !== 'did_document' || typeof did !== 'string' || await idHash(did) !== info.hash
        || hex(await sha256(content)) !== info.contentHash)
      throw fail(`${path}: not the path of this DID document`);
    if (typeof tree !== 'string') throw fail('revocation: tree malformed');
    await verifyGitPath(tree, path, item.git_path, content, fail);
    docs.push([did, doc]);
  }
  const byDid = new Map();
  for (const [did, doc] of docs) {
    try { byDid.set(did, [...(byDid.get(did) || []), ...keysFromDocument(did, doc)]); } catch (e) {
      if (e instanceof OAPError) throw fail(e.reason);
      throw e;
    }
  }
  return (did) => {
    if (!byDid.has(did)) throw fail(`no DID document of ${did} in the answer`);
    return byDid.get(did);
  };
}

const EPOCH_PREFIX = 'urn:oap:key-event:';
/** statusverify.py token_parts: [principal, class, epoch] for a token status id
 * (`<principal>#<class>`, epoch null: the tokens issued before the principal's first recovery;
 * `<principal>#<class>@<recovery id>`: those issued since that recovery), else null. */
export function tokenParts(key) {
  const i = key.indexOf('#');
  if (i < 0) return null;
  const principal = key.slice(0, i), rest = key.slice(i + 1), j = rest.indexOf('@');
  const cls = j < 0 ? rest : rest.slice(0, j), epoch = j < 0 ? null : rest.slice(j + 1);
  if (!KILL_SWITCH_CLASSES.includes(cls) || !principal.startsWith('did:')) return null;
  if (epoch !== null && (!epoch.startsWith(EPOCH_PREFIX) || epoch === EPOCH_PREFIX)) return null;
  return [principal, cls, epoch];
}
/** (principal, true) for a token status id, else (key, false); a credential `vc <issuer> <id>`
 * is suspended while its issuer is: (issuer, false). */
function principalOf(key) {
  const parts = tokenParts(key);
  return parts ? [parts[0], true] : [credentialIssuer(key) || key, false];
}
/** statusverify.py _credential_issuer: the issuer DID of `vc <issuer> <id>`, else null. */
function credentialIssuer(key) {
  const i = key.indexOf(' ');
  if (i < 0 || key.slice(0, i) !== 'vc') return null;
  const rest = key.slice(i + 1), j = rest.indexOf(' ');
  const issuer = j < 0 ? '' : rest.slice(0, j);
  return j >= 0 && issuer.startsWith('did:') ? issuer : null;
}
const isRotation = (rec) => rec !== null && rec.type === 'key_event' && rec.body.event === 'rotate';

/** The record must be one that revokes `key`, at the time and for the reason claimed. */
function recordRevokes(rec, linked, key, reason, revokedAt) {
  let ok;
  if (rec.type === 'revocation') {
    const want = rec.kind === 'vc' ? vcStatusKey(rec.subject, rec.issuedBy) : rec.subject;
    // a credential falls with its issuer revoked for cause (its status lists are then all set)
    const falls = ['did', 'key'].includes(rec.kind) && credentialIssuer(key) === rec.subject && reason !== 'superseded';
    // a principal whose primary key is revoked for cause, with no controller left, is dead: its tokens fall with it
    const [principal, isClass] = principalOf(key);
    const primary = linked === null ? rec.subject === principal
      : isRotation(linked) && linked.subject === principal && linked.key === rec.subject;
    const gone = isClass && ['did', 'key'].includes(rec.kind) && !['superseded', 'loss_of_key'].includes(reason) && primary;
    ok = ((key === want || falls) && linked === null || gone) && reason === rec.body.reason && revokedAt === rec.effectiveAt;
  } else if (rec.type === 'kill_switch') { // the principal's tokens, of any epoch
    const [principal, isClass] = principalOf(key);
    ok = isClass && principal === rec.subject && reason === 'kill_switch' && revokedAt === rec.effectiveAt && linked === null;
  } else if (rec.type === 'conformance') {
    ok = key === rec.id && reason === 'expired' && revokedAt === rec.expiresAt && linked === null;
  } else if (isRotation(rec)) { // superseded: the subject's did:key, or the key of its previous rotation, is retired
    const retires = linked === null ? key === rec.subject && key.startsWith('did:key:')
      : isRotation(linked) && linked.subject === rec.subject && linked.key === key && rec.key !== key && linked.effectiveAt <= rec.effectiveAt;
    ok = retires && reason === 'superseded' && revokedAt === rec.effectiveAt;
  } else ok = false;
  if (!ok) throw fail('the record does not revoke this id at that time for that reason');
}

/** A recovery (rotate or resume) of the token class's principal, after the kill switch, that
 * opened a later token epoch than this id's. -> the status id of the tokens issued since it. */
function recordReinstates(rec, key, revokedAt, reinstatedAt) {
  const parts = tokenParts(key);
  const ok = parts !== null && rec.type === 'key_event' && RECOVERIES.includes(rec.body.event) && rec.subject === parts[0]
    && reinstatedAt === rec.effectiveAt && reinstatedAt > revokedAt && rec.id !== parts[2];
  if (!ok) throw fail('the record does not reinstate this id at that time');
  return `${parts[0]}#${parts[1]}@${rec.id}`;
}

/** A `suspend` of the principal, or (automatic suspension, §5.3) a loss_of_key revocation of
 * its key: the principal's did:key, or the key a rotation of it made its key. */
function recordSuspends(rec, linked, key, reason, suspendedAt) {
  const [principal] = principalOf(key);
  let ok;
  if (rec.type === 'key_event') {
    ok = rec.body.event === 'suspend' && rec.subject === principal && linked === null && suspendedAt === rec.effectiveAt
      && reason === (has(rec.body, 'reason') ? rec.body.reason : 'unspecified');
  } else if (rec.type === 'revocation') {
    const names = linked === null ? rec.subject === principal
      : isRotation(linked) && linked.subject === principal && linked.key === rec.subject;
    ok = names && rec.body.reason === 'loss_of_key' && reason === 'loss_of_key' && ['did', 'key'].includes(rec.kind) && suspendedAt >= rec.effectiveAt;
  } else ok = false;
  if (!ok) throw fail('the record does not suspend this id at that time for that reason');
}

/** Verify a saved status response (object or JSON text, read like Python's json.loads; pass
 * the text for exact parity: "4.0" is then a float, refused where an int is needed).
 * registry: the registry's did:key; policy: a TrustPolicy (lib/bundle.js) or a PolicySet
 * (lib/anchors.js) for its logs (optional: without it the anchors are bound to the statement
 * and records but their inclusion is not checked, and logChecked is false); id: the status id
 * asked about (records.js vcStatusKey for a credential), the answer must be about it (null:
 * not checked, the caller reads the result's id); now: Date; keys: the registry's verified key
 * rotations (lib/keyrotation.js chainOfDocument of GET /v1/key-rotations): when the pinned key is
 * one of them, the answer may be signed by it or a later key, each only for epochs made before it
 * was retired, and the records' anchors are checked against the key of their commit.
 * -> {id, status, thisUpdate, nextUpdate, epoch, logChecked, statement, history, revokedAt?,
 *     suspendedAt?, reinstatedAt?, reinstatedId?, reason?, record?, deciding?, linkedBy?,
 *     reinstatedBy?, via?, subject?, signer?} (via: a receipt that falls with its subject, which
 *     `subject` names, or whose level does not hold because of `signer`; reinstatedId: the status
 *     id the tokens issued since the recovery carry). */
export async function verifyStatus(resp, { registry, id = null, policy = null, now = new Date(), allowStale = false, keys = null }) {
  if (typeof resp === 'string' || resp instanceof Uint8Array) {
    try { resp = parseJSON(resp, { strict: false, floats: 'wrap' }); } catch (e) { throw fail(`status response is not JSON: ${e.reason}`); }
  }
  if (!isObj(resp)) throw fail('status response must be a JSON object');
  let signer = registry;
  if (keys !== null && keys.keys.includes(registry)) { // the registry rotated its key: follow from the pinned one
    const st0 = resp.epoch, named = isObj(st0) ? st0.registry : undefined, number0 = isObj(st0) ? st0.epoch : undefined;
    if (!isInt(number0)) throw fail('epoch statement: epoch and revoked_size must be integers');
    if (typeof named !== 'string' || !keys.maySign(named, number0, registry))
      throw fail(`the answer is signed by ${named === undefined ? 'None' : named}, not by ${registry} or a key it was rotated to (in force when the answer was made)`);
    signer = named;
  }
  let pub;
  try { pub = publicFromDidKey(signer); } catch (e) { throw fail(`registry key: ${e.reason}`); }
  await checkSigned(resp, pub, 'status response');
  const need = ['type', 'id', 'status', 'this_update', 'next_update', 'epoch', 'epoch_anchor', 'proof', 'signature'];
  if (resp.status === 'revoked') need.push('revocation');
  else if (resp.status === 'suspended') need.push('suspension');
  if (!sameKeys(resp, need) || resp.type !== 'oap-status-response' || !STATUSES.includes(resp.status)) throw fail('not an oap-status-response');
  const key = resp.id;
  if (typeof key !== 'string' || !key) throw fail('id must be a non-empty string');
  if (id !== null && key !== id) throw fail(`the answer is about ${key}, not ${id}`);
  const st = resp.epoch;
  if (!isObj(st) || st.type !== 'oap-status-epoch') throw fail('epoch statement missing');
  await checkSigned(st, pub, 'epoch statement');
  if (st.registry !== signer) throw fail('epoch statement names another registry');
  if (!sameJSON(st.this_update ?? null, resp.this_update) || !sameJSON(st.next_update ?? null, resp.next_update))
    throw fail('response times differ from the epoch statement');
  const thisUpdate = time(resp.this_update, 'this_update'), nextUpdate = time(resp.next_update, 'next_update');
  const number = st.epoch, size = st.revoked_size;
  if (!isInt(number) || !isInt(size) || size < 0) throw fail('epoch statement: epoch and revoked_size must be integers');
  if (typeof st.revoked_root !== 'string' || !/^sha256:[0-9a-fA-F]{64}$/.test(st.revoked_root))
    throw fail("revoked_root must be 'sha256:' followed by 64 hex digits");
  const root = Uint8Array.from(st.revoked_root.slice(7).match(/../g), (h) => parseInt(h, 16));
  try {
    await verifyReceiptAnchor(resp.epoch_anchor, { receiptHash: await sha256(jcsBytes(st)), receiptId: `urn:oap:status-epoch:${number}`, registry: signer, policy });
  } catch (e) {
    if (e instanceof StatusVerificationError) throw fail(`epoch anchor: ${e.reason}`);
    throw e;
  }
  const history = has(st, 'history') ? st.history : signer; // whose commits the records are in: a mirror answers for its upstream
  if (typeof history !== 'string' || !history.startsWith('did:key:')) throw fail('epoch statement: history must be the did:key of a registry');
  let out = {};
  if (resp.status === 'revoked' || resp.status === 'suspended')
    out = await checkStanding(resp, key, size, root, keys !== null && history === keys.registry ? keys : history, policy);
  else await verifyAbsence(resp.proof, key, size, root);
  const nowUs = dateToMicros(now);
  if (thisUpdate > nowUs + MAX_CLOCK_SKEW_US) throw fail('response is from the future (this_update after now)');
  if (nowUs >= nextUpdate && !allowStale) throw fail(`response is stale: next_update ${resp.next_update} has passed`);
  return { id: key, status: resp.status, thisUpdate: microsToDate(thisUpdate), nextUpdate: microsToDate(nextUpdate),
    epoch: number, logChecked: policy !== null, statement: st, history, ...out };
}
