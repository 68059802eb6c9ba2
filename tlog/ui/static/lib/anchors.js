// One entry's proofs from several logs in one file (OAP-CORE-1.0 §19.3), mirroring
// tlog/formats/anchors.py (parse) and tlog/client/verifier.py verify_anchored (k of N):
//
//   {"type": "oap-anchors/v1", "anchored_in": ["<origin>", ...], "bundles": ["c2sp.org/tlog-proof@v1\n...", ...]}
//
// Each bundle is a complete C2SP tlog-proof; a single plain tlog-proof is accepted wherever
// an anchors file is (one log's anchor). `verifyAnchoredWith` counts the distinct logs whose
// proof verifies and requires k of them; one log being wrong or absent fails only when it
// leaves fewer than k. `PolicySet` gives the same checks over one pinned policy per log
// (each log may have its own witnesses), which a single tlog-policy cannot say.
import { FormatError, PolicyError, VerificationError, OAPError } from './errors.js';
import { bytesEqual, fromUtf8 } from './b64.js';
import { parseJSON } from './jcs.js';
import { HEADER, parseProofBundle } from './bundle.js';
import { parseNote } from './note.js';
import { parseCheckpoint } from './checkpoint.js';

export const ANCHORS_TYPE = 'oap-anchors/v1';
export const MAX_LOGS = 32;
export const MAX_ANCHORS_BYTES = 4 * (1 << 20); // 4 x MAX_BUNDLE_BYTES (a literal: bundle.js imports this module)
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const sameKeys = (obj, keys) => Object.keys(obj).length === keys.length && keys.every((k) => Object.hasOwn(obj, k));

/** The origin a bundle's checkpoint names (anchors.py _origin). */
export const bundleOrigin = (b) => parseCheckpoint(parseNote(b.checkpoint).text).origin;

// str.lstrip()'s whitespace (str.isspace), which is not JavaScript's \s
const PY_SPACE_THEN_BRACE = /^[\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*\{/;

/** An oap-anchors/v1 file (JSON), as opposed to a single tlog-proof (anchoring.py is_anchors_file). */
export function isAnchorsFile(data) {
  if (data instanceof Uint8Array) return data.length > 0 && /^[ \t\n\r\v\f]*\{/.test(String.fromCharCode(...data.subarray(0, 64)));
  return typeof data === 'string' && PY_SPACE_THEN_BRACE.test(data);
}

/** The bundles of an anchors file, or of a single tlog-proof (anchors.py parse_anchors);
 * FormatError otherwise. `anchored_in` must name each bundle's checkpoint origin, in order. */
export function parseAnchors(data) {
  if (data instanceof Uint8Array) {
    if (data.length > MAX_ANCHORS_BYTES) throw new FormatError(`anchors file larger than ${MAX_ANCHORS_BYTES} bytes`);
    try { data = fromUtf8(data, 'anchors file'); } catch { throw new FormatError('anchors file is not UTF-8'); }
  }
  if (typeof data !== 'string') throw new FormatError('neither a tlog-proof nor an anchors file (JSON)');
  if (data.length > MAX_ANCHORS_BYTES && [...data].length > MAX_ANCHORS_BYTES) throw new FormatError(`anchors file larger than ${MAX_ANCHORS_BYTES} bytes`);
  if (data.startsWith(HEADER)) return [parseProofBundle(data)];
  let obj;
  try { obj = parseJSON(data, { strict: false }); } catch { throw new FormatError('neither a tlog-proof nor an anchors file (JSON)'); }
  if (!isObj(obj) || obj.type !== ANCHORS_TYPE || !sameKeys(obj, ['type', 'anchored_in', 'bundles']))
    throw new FormatError(`an anchors file is {type: '${ANCHORS_TYPE}', anchored_in, bundles}`);
  const texts = obj.bundles, names = obj.anchored_in;
  if (!Array.isArray(texts) || !Array.isArray(names) || texts.length < 1 || texts.length > MAX_LOGS
      || names.length !== texts.length || !texts.every((t) => typeof t === 'string'))
    throw new FormatError(`anchors file: 1 to ${MAX_LOGS} bundles, each named in anchored_in`);
  return texts.map((text, i) => {
    let b;
    try { b = parseProofBundle(text); } catch (e) {
      if (e instanceof FormatError) throw new FormatError(`anchors file: bundle ${i}: ${e.reason}`);
      throw e;
    }
    if (bundleOrigin(b) !== names[i]) throw new FormatError(`anchors file: anchored_in[${i}] is not the origin of bundle ${i}`);
    return b;
  });
}

/** verifier.py _verify_anchored over any per-bundle verifier: `verifyBundle(b, {entry, leaf})`
 * -> {index, leafHash, entry, checkpoint: {checkpoint, logKey, ...}}, and `need` (k).
 * `readExtra: false` ignores the bundles' extra lines (a proof by another C2SP log, checked
 * against the entry or leaf hash the caller names), as verify_anchored(read_extra=False).
 * -> {entry, entries: [verified bundle, ...], failures: [[where, reason], ...], logs: [origin, ...]}. */
export async function verifyAnchoredWith(verifyBundle, need, data, { entry = null, leaf = null, readExtra = true } = {}) {
  const bundles = parseAnchors(data);
  const verified = [], failures = [], seenLogs = new Set();
  for (let i = 0; i < bundles.length; i++) {
    let v;
    const b = readExtra ? bundles[i] : { ...bundles[i], extra: null };
    try { v = await verifyBundle(b, { entry, leaf }); } catch (e) {
      if (e instanceof VerificationError || e instanceof FormatError) { failures.push([`bundle ${i}`, e.reason]); continue; }
      throw e;
    }
    if (entry === null) entry = v.entry;
    else if (v.entry !== null && !bytesEqual(v.entry, entry)) {
      failures.push([v.checkpoint.checkpoint.origin, 'anchors a different entry than the other bundles']);
      continue;
    }
    // one log, whichever of its keys signed (a key rotation's keys share the origin)
    if (seenLogs.has(v.checkpoint.checkpoint.origin)) {
      failures.push([v.checkpoint.checkpoint.origin, 'a second bundle from the same log counts once']);
      continue;
    }
    seenLogs.add(v.checkpoint.checkpoint.origin);
    verified.push(v);
  }
  if (verified.length < need) {
    const why = failures.map(([where, reason]) => `${where}: ${reason}`).join('; ');
    throw new PolicyError(`anchored in ${verified.length} log(s) of the policy, and it requires ${need}${why ? ` (${why})` : ''}`);
  }
  return { entry, entries: verified, failures, logs: verified.map((v) => v.checkpoint.checkpoint.origin) };
}

/** One policy per log, and k: what the page checks a registry's anchors with when each of
 * its logs is pinned on its own (each with its own witnesses). Answers like a TrustPolicy
 * (verifyCheckpoint, verifyBundle, verifyAnchored, policy.logQuorum), so the verifiers that
 * take a policy take this too. `logs`: [{origin, policy (a TrustPolicy), pinned, said}]. */
export class PolicySet {
  constructor(logs, k = 1) {
    if (!logs.length) throw new PolicyError('no log to check anchors against');
    if (k < 1 || k > logs.length) throw new PolicyError(`${logs.length} log(s) named; anchors must be checked in ${k}`);
    this.logs = logs;
    this.policy = { logQuorum: k };
  }

  /** The entry of the log `origin` names ({origin, policy, pinned, said}), or null. */
  logFor(origin) { return this.logs.find((l) => l.origin === origin) || null; }

  async verifyCheckpoint(note) {
    const origin = parseCheckpoint(parseNote(note).text).origin;
    const log = this.logFor(origin);
    if (!log) throw new PolicyError('checkpoint is not signed by a log in the policy');
    return log.policy.verifyCheckpoint(note);
  }

  async verifyBundle(bundle, opts = {}) {
    const b = typeof bundle === 'string' || bundle instanceof Uint8Array ? parseProofBundle(bundle) : bundle;
    let origin;
    try { origin = bundleOrigin(b); } catch (e) {
      if (e instanceof OAPError) throw new PolicyError('checkpoint is not signed by a log in the policy');
      throw e;
    }
    const log = this.logFor(origin);
    if (!log) throw new PolicyError('checkpoint is not signed by a log in the policy');
    return log.policy.verifyBundle(b, opts);
  }

  verifyAnchored(data, opts = {}) {
    return verifyAnchoredWith((b, o) => this.verifyBundle(b, o), this.policy.logQuorum, data, opts);
  }

  /** This set, with entries required in at least k of its logs (never fewer than its own k). */
  requiring(k) {
    if (k <= this.policy.logQuorum) return this;
    if (k > this.logs.length) throw new PolicyError(`the policy lists ${this.logs.length} log(s); anchors must be checked in ${k}`);
    return new PolicySet(this.logs, k);
  }
}

/** The text an anchors file's bundles come to, for display: [{origin, index, text}]. */
export function anchorsOf(data) {
  return parseAnchors(data).map((b) => ({ origin: bundleOrigin(b), index: b.index, bundle: b }));
}
