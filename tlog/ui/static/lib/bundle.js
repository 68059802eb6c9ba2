// tlog-proof bundles (C2SP tlog-proof draft, c2sp.md §6) and the offline
// verifier of tlog/client/verifier.py (TrustPolicy), with the same checks,
// order and reasons:
//   1. the entry given must equal the bundle's `extra` entry, if both are present;
//   2. leaf hash = SHA-256(0x00 || entry) (or the leaf given must match the entry);
//   3. checkpoint signed by a log key of the policy (PolicyError otherwise);
//   4. checkpoint origin == that log key's name;
//   5. every policy witness that cosigned: its cosignature verifies (0x04, either key form);
//   6. the witness quorum is met;
//   7. RFC 9162 inclusion of the leaf at `index` under the checkpoint root.
import { b64enc, b64dec, b64decHash, utf8, fromUtf8, isWellFormed, bytesEqual } from './b64.js';
import { FormatError, InclusionProofError, PolicyError, SignatureError, UnknownKeyError, VerificationError, pyRepr as q, pySorted } from './errors.js';
import { EMPTY_ROOT, leafHash, verifyInclusion } from './merkle.js';
import { parseVkey, cosignerVerifier, openNote } from './note.js';
import { parseCheckpoint } from './checkpoint.js';
import { logCount, parsePolicy, quorumMet } from './policy.js';
import { verifyAnchoredWith } from './anchors.js';

export const HEADER = 'c2sp.org/tlog-proof@v1';
export const MAX_PROOF_HASHES = 63;
export const MAX_INDEX = (1n << 63n) - 1n;
export const MAX_BUNDLE_BYTES = 1 << 20;

/** Parse a .tlog-proof -> {index: BigInt, proof: [Uint8Array], checkpoint: note text, extra: bytes|null}.
 * Strict grammar (proofbundle.py parse_proof_bundle); verifies nothing. */
export function parseProofBundle(text) {
  if (text instanceof Uint8Array) {
    if (text.length > MAX_BUNDLE_BYTES) throw new FormatError('proof bundle larger than 1 MiB');
    text = fromUtf8(text, 'proof bundle');
  } else if (typeof text === 'string') {
    if (!isWellFormed(text)) throw new FormatError('proof bundle is not valid UTF-8');
    if (utf8(text).length > MAX_BUNDLE_BYTES) throw new FormatError('proof bundle larger than 1 MiB');
  } else throw new FormatError('proof bundle must be text');
  let pos = 0;
  const nextLine = (what) => {
    const end = text.indexOf('\n', pos);
    if (end < 0) throw new FormatError(`proof bundle truncated before ${what}`);
    const line = text.slice(pos, end);
    pos = end + 1;
    return line;
  };
  if (nextLine('header') !== HEADER) throw new FormatError(`proof bundle must start with ${q(HEADER)}`);
  let line = nextLine('index'), extra = null;
  if (line.startsWith('extra ')) {
    extra = b64dec(line.slice(6), 'extra');
    if (!extra.length) throw new FormatError('extra: empty');
    line = nextLine('index');
  }
  if (!line.startsWith('index ')) throw new FormatError("proof bundle: expected 'index <n>'");
  const digits = line.slice(6);
  if (!/^(?:0|[1-9][0-9]{0,18})$/.test(digits)) throw new FormatError('index: not a canonical decimal');
  const index = BigInt(digits);
  if (index > MAX_INDEX) throw new FormatError('index overflows 2^63-1');
  const proof = [];
  while ((line = nextLine('empty line')) !== '') {
    if (proof.length === MAX_PROOF_HASHES) throw new FormatError(`more than ${MAX_PROOF_HASHES} proof hashes`);
    proof.push(b64decHash(line, 'proof hash'));
  }
  const checkpoint = text.slice(pos);
  if (!checkpoint) throw new FormatError('proof bundle has no checkpoint');
  if (checkpoint.startsWith('\n')) throw new FormatError('checkpoint: empty origin line');
  if (!checkpoint.endsWith('\n')) throw new FormatError('checkpoint must end with a newline');
  return { index, proof, checkpoint, extra };
}

export function formatProofBundle(b) {
  const lines = [HEADER];
  if (b.extra) lines.push('extra ' + b64enc(b.extra));
  lines.push(`index ${b.index}`, ...b.proof.map(b64enc), '');
  return lines.join('\n') + '\n' + b.checkpoint;
}

/** A parsed tlog-policy with its keys resolved (verifier.py TrustPolicy). */
export class TrustPolicy {
  /** options.origin: by default (as verifier.py) the checkpoint origin must equal the log
   * key's name. c2sp.md §2 says verifiers must not assume that (sum.golang.org signs
   * "go.sum database tree", V3; the armored-witness log differs too, V5): pass the
   * expected origin string to pin it instead of the key name. */
  constructor(policy, logs, witnesses, { origin = null } = {}) {
    this.policy = policy; this.logs = logs; this.witnesses = witnesses; this.cache = new Map(); this.origin = origin;
  }
  static async fromText(text, options = {}) {
    const policy = parsePolicy(text);
    const logs = [];
    for (const l of policy.logs) logs.push(await parseVkey(l.vkey));
    if (!logs.length) throw new FormatError('policy names no log');
    const witnesses = new Map();
    for (const [name, w] of policy.witnesses) witnesses.set(name, [await cosignerVerifier(await parseVkey(w.vkey))]);
    return new TrustPolicy(policy, logs, witnesses, options);
  }
  static forLog(vkey, options = {}) { return TrustPolicy.fromText(`log ${vkey}\nquorum none\n`, options); }
  /** These logs' keys, no witnesses, and an entry counts once k of them hold it (`logs <k>`). */
  static forLogs(vkeys, k = 1, options = {}) {
    return TrustPolicy.fromText(vkeys.map((v) => `log ${v}\n`).join('') + 'quorum none\n' + (k > 1 ? `logs ${k}\n` : ''), options);
  }

  /** This policy, with entries required in at least k of its logs (never fewer than its own
   * `logs <k>`); PolicyError when it lists fewer than k logs (verifier.py requiring). */
  requiring(k) {
    if (k <= this.policy.logQuorum) return this;
    const n = logCount(this.policy);
    if (k > n) throw new PolicyError(`the policy lists ${n} log(s); anchors must be checked in ${k}`);
    const p = new TrustPolicy({ ...this.policy, logQuorum: k }, this.logs, this.witnesses, { origin: this.origin });
    p.cache = this.cache;
    return p;
  }

  /** An anchors file (or a single tlog-proof): every bundle against this policy, all for the
   * same entry, and at least `logs <k>` distinct logs among those that verify
   * (verifier.py verify_anchored) -> {entry, entries, failures: [[where, reason]], logs}. */
  verifyAnchored(data, { entry = null, leaf = null, readExtra = true } = {}) {
    return verifyAnchoredWith((b, o) => this.verifyBundle(b, o), this.policy.logQuorum, data, { entry, leaf, readExtra });
  }

  /** Verify a signed checkpoint note against the policy -> {checkpoint, logKey (vkey),
   * witnesses: Set of policy names, cosignatures: [{witness, keyName, timestamp: BigInt}]}. */
  async verifyCheckpoint(note) {
    const hit = this.cache.get(note);
    if (hit) return hit;
    let parsed, verified;
    try {
      ({ note: parsed, verified } = await openNote(note, this.logs));
    } catch (e) {
      if (e instanceof UnknownKeyError) throw new PolicyError('checkpoint is not signed by a log in the policy');
      if (e instanceof SignatureError) throw new PolicyError("the log's signature on the checkpoint does not verify");
      throw e;
    }
    const checkpoint = parseCheckpoint(parsed.text);
    if (checkpoint.size === 0n && !bytesEqual(checkpoint.root, EMPTY_ROOT)) // RFC 9162 §2.1.1: one empty root
      throw new PolicyError("a checkpoint of size 0 must carry the empty tree's root (SHA-256 of the empty string)");
    const logKey = verified[0].verifier;
    if (this.origin !== null) {
      if (checkpoint.origin !== this.origin) throw new PolicyError(`checkpoint origin ${q(checkpoint.origin)} is not the expected origin ${q(this.origin)}`);
    } else if (checkpoint.origin !== logKey.name)
      throw new PolicyError(`checkpoint origin ${q(checkpoint.origin)} does not match the log key ${q(logKey.name)}`);
    const cosigned = new Set(), cosignatures = [];
    for (const [wname, forms] of this.witnesses) {
      let got;
      try { got = await openNote(parsed, forms); } catch (e) {
        if (e instanceof UnknownKeyError) continue; // this witness did not cosign
        if (e instanceof SignatureError) throw new PolicyError(`cosignature of witness ${q(wname)} does not verify`);
        throw e;
      }
      cosigned.add(wname);
      for (const v of got.verified) cosignatures.push({ witness: wname, keyName: v.verifier.name, timestamp: v.timestamp });
    }
    if (!quorumMet(this.policy, cosigned)) {
      const have = pySorted(cosigned).join(', ') || 'none';
      throw new PolicyError(`witness quorum not met (valid cosignatures from: ${have})`);
    }
    const out = { checkpoint, logKey: logKey.vkey, witnesses: cosigned, cosignatures };
    if (this.cache.size > 1024) this.cache.clear();
    this.cache.set(note, out);
    return out;
  }

  /** Verify a .tlog-proof (text or parsed) -> {index, leafHash, entry, checkpoint: VerifiedCheckpoint}.
   * `entry` / `leaf` as in verifier.py verify_bundle. */
  async verifyBundle(bundle, { entry = null, leaf = null } = {}) {
    const b = typeof bundle === 'string' || bundle instanceof Uint8Array ? parseProofBundle(bundle) : bundle;
    if (entry !== null && !(entry instanceof Uint8Array)) throw new FormatError('the entry must be bytes');
    if (entry !== null && b.extra !== null && !bytesEqual(entry, b.extra))
      throw new VerificationError('the entry given differs from the entry in the bundle');
    entry = entry !== null ? entry : b.extra;
    if (leaf === null) {
      if (entry === null) throw new VerificationError('no entry: the bundle has no extra line and none was given');
      leaf = await leafHash(entry);
    } else {
      if (!(leaf instanceof Uint8Array) || leaf.length !== 32) throw new InclusionProofError('leaf hash is not 32 bytes');
      if (entry !== null && !bytesEqual(await leafHash(entry), leaf)) throw new VerificationError('leaf hash does not match the entry');
    }
    const vc = await this.verifyCheckpoint(b.checkpoint);
    await verifyInclusion(b.index, vc.checkpoint.size, leaf, b.proof, vc.checkpoint.root);
    return { index: b.index, leafHash: leaf, entry, checkpoint: vc };
  }
}

/** Age of each cosignature in seconds at `now` (a Date or POSIX seconds): for display.
 * The Python verifier does not judge ages; callers may (a cosignature only says the
 * witness had seen this tree by its timestamp). Negative ages mean a clock in the future. */
export function cosignatureAges(vc, now = Date.now() / 1000) {
  const t = typeof now === 'number' ? Math.floor(now) : Math.floor(now.getTime() / 1000);
  return vc.cosignatures.map((c) => ({ ...c, time: new Date(Number(c.timestamp) * 1000), ageSeconds: t - Number(c.timestamp) }));
}

/** Verify the cosignatures of one witness on a checkpoint note, without a policy:
 * returns [{name, keyId, timestamp, ageSeconds}] (UnknownKeyError if it did not cosign). */
export async function verifyWitnessCosignature(note, witnessVkey, now = Date.now() / 1000) {
  const v = await cosignerVerifier(await parseVkey(witnessVkey));
  const { note: parsed, verified } = await openNote(note, [v]);
  parseCheckpoint(parsed.text); // a cosignature only ever covers a checkpoint
  return verified.map((x) => ({ name: x.verifier.name, keyId: x.verifier.keyIdHex, timestamp: x.timestamp,
    ageSeconds: Math.floor(typeof now === 'number' ? now : now.getTime() / 1000) - Number(x.timestamp) }));
}
