// Runs cases made by the Python tests (tests/support/malformed.py, tests/ui/test_differential.py)
// through the browser's verifiers and answers each with the verdict in the Python form:
// {ok: true, result?} or {ok: false, error: <class>, message: <reason>}. An exception that is
// not the library's error type is reported as error "CRASH": the tests fail on it.
// Values arrive as JSON: {"$int": "<decimal>"} is a BigInt, {"$hex": "<hex>"} a Uint8Array.
// Shared by Node (differential.mjs) and the browser page (differential-page.js); no Node APIs.
import { OAPError } from '../../../tlog/ui/static/lib/errors.js';
import { hex, unhex } from '../../../tlog/ui/static/lib/b64.js';
import { verifyInclusion, verifyConsistency } from '../../../tlog/ui/static/lib/merkle.js';
import { parseProofBundle, TrustPolicy } from '../../../tlog/ui/static/lib/bundle.js';
import * as lib from '../../../tlog/ui/static/lib/index.js';

export function dec(v) {
  if (Array.isArray(v)) return v.map(dec);
  if (v && typeof v === 'object') {
    if (Object.keys(v).length === 1 && typeof v.$int === 'string') return BigInt(v.$int);
    if (Object.keys(v).length === 1 && typeof v.$hex === 'string') return unhex(v.$hex);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, dec(x)]));
  }
  return v;
}

export function enc(v) {
  if (typeof v === 'bigint') return { $int: v.toString() };
  if (v instanceof Uint8Array) return { $hex: hex(v) };
  if (Array.isArray(v)) return v.map(enc);
  if (v instanceof Set) return [...v].sort().map(enc);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, enc(x)]));
  return v;
}

const KINDS = {
  inclusion: (c) => verifyInclusion(c.index, c.size, c.leaf, c.proof, c.root),
  consistency: (c) => verifyConsistency(c.old, c.new, c.old_root, c.new_root, c.proof),
  bundle_parse: (c) => {
    const b = parseProofBundle(c.text);
    return { index: b.index, proof: b.proof, extra: b.extra };
  },
  bundle_verify: async (c) => {
    const policy = await TrustPolicy.fromText(c.policy);
    const v = await policy.verifyBundle(c.bundle, { entry: c.entry ?? null, leaf: c.leaf ?? null });
    return { index: v.index, leaf_hash: v.leafHash };
  },
  // receipt signatures (OAP-CORE-1.0 §19.1), per signature
  receipt_signatures: async (c) => {
    const report = await lib.verifyReceiptSignatures(c.receipt, { documents: c.documents ?? [], entry: c.entry ?? null });
    return report;
  },
  entry_signature: async (c) => lib.verifyEntrySignature(c.entry, { documents: c.documents ?? [] }),
  // registry status answers (registry/statusverify.py), records and conformance receipts
  status: async (c) => {
    const policy = c.policy === null ? null : await TrustPolicy.fromText(c.policy);
    const keys = c.rotations ? await lib.chainOfDocument(c.rotations) : null;
    const v = await lib.verifyStatus(c.text, { registry: c.registry, policy, now: new Date(c.now), allowStale: !!c.allow_stale, keys });
    const t = (d) => (d ? lib.formatUtc(lib.dateToMicros(d)) : null);
    return { id: v.id, status: v.status, epoch: Number(v.epoch), log_checked: v.logChecked, reason: v.reason ?? null,
      revoked_at: t(v.revokedAt), suspended_at: t(v.suspendedAt), reinstated_at: t(v.reinstatedAt), reinstated_id: v.reinstatedId ?? null, subject: v.subject ?? null, signer: v.signer ?? null };
  },
  time: (c) => lib.formatUtc(lib.parseUtc(c.text, 't')),
  record: async (c) => {
    const lookup = c.documents.length ? lib.lookupFrom(c.documents.map((d) => [d.id, d])) : null;
    const r = await lib.checkRecord(lib.parseJSON(c.text, { strict: false, floats: 'wrap' }), { lookup });
    return { type: r.type, id: r.id, path: r.path, subject: r.subject, issued_by: r.issuedBy, kind: r.kind, key: r.key };
  },
  conformance: async (c) => {
    const lookup = c.documents.length ? lib.lookupFrom(c.documents.map((d) => [d.id, d])) : null;
    const r = await lib.validateConformance(lib.parseJSON(c.text, { strict: false, floats: 'wrap' }), lib.parseUtc(c.now, 'now'), { lookup });
    return { id: r.id, subject: r.subject, level: r.level, witnesses: r.witnesses, form: r.form, auditor: r.audit ? r.audit.auditor : null };
  },
  // tlog-policy text (tlog.formats.policy): parsed, and written back canonically
  policy: async (c) => {
    const p = lib.parsePolicy(c.text);
    return { text: lib.policyToText(p), quorum: p.quorum, registries: p.registries.map((r) => [r.did, r.url]) };
  },
  anchored: async (c) => {
    const policy = await TrustPolicy.fromText(c.policy);
    const v = await policy.verifyAnchored(c.text, { entry: c.entry ?? null, leaf: c.leaf ?? null, readExtra: c.read_extra ?? true });
    return { logs: v.logs, failures: v.failures, index: Number(v.entries[0].index) };
  },
  eddsa_jcs_2022: async (c) => {
    const doc = lib.parseJSON(c.text, { strict: false, floats: 'wrap' });
    const key = await lib.verifyProof(doc, lib.proofsOf(doc)[c.index ?? 0], null);
    return { key: key.id };
  },
};

export async function runCases(cases) {
  const out = [];
  for (const raw of cases) {
    const c = dec(raw);
    const fn = KINDS[c.kind];
    try {
      if (!fn) throw new Error(`unknown case kind ${c.kind}`);
      const result = await fn(c);
      out.push(result === undefined ? { ok: true } : { ok: true, result: enc(result) });
    } catch (e) {
      if (e instanceof OAPError) out.push({ ok: false, error: e.name, message: e.reason });
      else out.push({ ok: false, error: 'CRASH', message: `${e && e.name}: ${e && e.message}` });
    }
  }
  return out;
}
