// Log anchors checked in the page: one .tlog-proof, or an oap-anchors/v1 file with one proof
// per log of which k must hold (OAP-CORE-1.0 §19.3). Each log's proof is checked against that
// log's pin (else, for the loaded log, what it says about itself; else the key a registry
// names for it: never green), so every log is one row of the checklist; a log whose proof
// fails does not count, and the verdict fails only when fewer than k count
// (TrustPolicy.verify_anchored). And the policy a registry's anchors are checked with.
import * as oap from '../lib/index.js';
import { app } from './services.js';
import { ENTRY_CHECKS, bundleContext, verdictOf, judge } from './checks.js';

/** One proof's verdict: against the pin for its log (or its fallback), consistent with what
 * this browser saw of that log when it is the loaded log. -> {origin, ctx, v}. */
export async function bundleVerdict(b, { table = ENTRY_CHECKS, fallback = null, extra = {}, ...opts } = {}) {
  const origin = oap.bundleOrigin(b);
  const ours = app.logInfo && app.logInfo.origin === origin;
  const ctx = await bundleContext(app.trust, b, { served: ours ? app.served : null, logUrl: ours ? app.log : null, ...opts });
  const alt = !ctx.pinned && fallback ? await fallback(origin) : null;
  if (alt && (!ctx.policy || ctx.servedError)) { // the registry's word for that log's key: unpinned
    ctx.policy = alt;
    try {
      ctx.vc = await alt.verifyCheckpoint(b.checkpoint); ctx.cpError = null; ctx.vcError = null;
      ctx.verified = await alt.verifyBundle(b, { entry: ctx.entryBytes });
    } catch (e) { ctx.vcError = e; ctx.cpError = ctx.cpError || e; }
  }
  Object.assign(ctx, extra);
  return { origin, ctx, v: await verdictOf(table, ctx, `index ${b.index} in ${origin} at size ${ctx.cp.size}`) };
}

const LOG_ROWS = ['trust', 'log-signature', 'origin', 'cosignatures', 'key', 'consistency', 'inclusion'];

/** An anchors file: each log's proof a row, k of them required (k: at least `k`, and the
 * largest `logs <k>` of the pins involved). The entry's own rows (signatures, receipt, a
 * commit's binding) come from the first log that counts. -> a verdict ({state, headline,
 * checks, summary}) with `logs`: [{origin, index, counted, v}]. */
export async function anchorsVerdict(text, { k = 1, ...opts } = {}) {
  const parts = oap.parseAnchors(text);
  const done = [];
  for (const b of parts) done.push({ ...(await bundleVerdict(b, opts)), index: b.index });
  for (const d of done) if (d.ctx.pinned && d.ctx.policy) k = Math.max(k, d.ctx.policy.policy.logQuorum || 1);
  const seen = new Set(), counted = [];
  const rows = done.map((d, i) => {
    const ok = d.v.state !== 'fail' && !!d.ctx.signerKey && !seen.has(d.ctx.signerKey);
    if (ok) { seen.add(d.ctx.signerKey); counted.push(d); }
    d.counted = ok;
    const why = d.v.state === 'fail' ? d.v.headline.replace(/^FAILED: /, '') : 'a second proof from the same log counts once';
    return { id: 'anchor-log', state: ok ? (d.ctx.pinned ? 'pass' : 'warn') : 'warn', label: `log ${i + 1} of ${done.length}: ${d.origin}`,
      detail: [ok ? `entry ${d.index} is in the tree of size ${d.ctx.cp.size}${d.ctx.pinned ? ', checked against your pin' : ', NOT against a pinned key'}`
        : `does not count: ${why}`] };
  });
  const logs = done.map((d) => ({ origin: d.origin, index: d.index, counted: d.counted, v: d.v, ctx: d.ctx }));
  if (counted.length < k) {
    const v = judge([{ id: 'anchors', state: 'fail', label: `anchored in ${counted.length} log(s), and ${k} are required`,
      detail: [done.filter((d) => !d.counted).map((d) => `${d.origin}: ${d.v.headline}`).join('; ')] }, ...rows], { pinned: false });
    return { ...v, logs };
  }
  const rest = counted[0].v.checks.filter((c) => !LOG_ROWS.includes(c.id));
  const v = judge([{ id: 'anchors', state: 'pass', label: `anchored in ${counted.length} of ${done.length} logs (${k} required)`,
    detail: [counted.map((d) => `${d.origin} (entry ${d.index})`).join(', ')] }, ...rows, ...rest],
  { pinned: counted.every((d) => d.ctx.pinned), summary: `${counted.length} of ${done.length} logs hold it, ${k} required` });
  return { ...v, logs };
}

/** A .tlog-proof or an anchors file, whichever `text` is. */
export async function anchorVerdict(text, opts = {}) {
  if (!text.startsWith('c2sp.org/tlog-proof@v1\n') && oap.isAnchorsFile(text)) return anchorsVerdict(text, opts);
  const { k, ...rest } = opts;
  const d = await bundleVerdict(oap.parseProofBundle(text), rest);
  return { ...d.v, logs: [{ origin: d.origin, index: d.ctx.bundle.index, counted: d.v.state !== 'fail', v: d.v, ctx: d.ctx }] };
}

// --- a registry's logs ----------------------------------------------------------------------

/** The logs a registry anchors in and k, from its /v1/info (oap-registry/1: `log`; /2: `logs`
 * and `anchor_quorum`). */
export function registryLogs(info) {
  const logs = Array.isArray(info.logs) && info.logs.length ? info.logs : info.log ? [info.log] : [];
  return { logs, k: Number.isInteger(info.anchor_quorum) && info.anchor_quorum > 0 ? info.anchor_quorum : 1 };
}

/** The key a registry names for one of its logs, as an unpinned policy (never green). */
export function registryFallback(info) {
  const { logs } = registryLogs(info);
  return async (origin) => {
    const l = logs.find((x) => x.origin === origin);
    return l ? oap.TrustPolicy.forLog(l.vkey) : null;
  };
}

/** What a registry's anchors are checked with: per log, its pin, else the loaded log's own
 * policy, else the key the registry names (unpinned); k of them required (the genesis's k).
 * `statusAnswers`: for a status answer, which carries no genesis, at least 2 of the logs when
 * there are several, as `oap-registry status` requires (registry.statusverify.anchor_policy):
 * the k a registry declares can only raise it.
 * -> {policy (a TrustPolicy for one log, a PolicySet for several), pinned, said, logs, k}. */
export async function registryPolicy(info, { statusAnswers = false } = {}) {
  const named = registryLogs(info);
  const logs = named.logs, k = statusAnswers ? Math.max(named.k, Math.min(2, logs.length)) : named.k;
  if (!logs.length) return { policy: null, pinned: false, said: 'no log: anchors not checked', logs, k };
  const entries = [];
  for (const l of logs) {
    const pin = await app.trust.policyFor(l.origin);
    if (pin) { entries.push({ origin: l.origin, policy: pin.policy, pinned: true, said: 'your pin' }); continue; }
    let own = null;
    if (app.logInfo && app.logInfo.origin === l.origin && app.served) {
      try { own = await app.trust.policyOf(app.served); } catch (_) { own = null; }
    }
    entries.push(own ? { origin: l.origin, policy: own, pinned: false, said: "the log's own policy" }
      : { origin: l.origin, policy: await oap.TrustPolicy.forLog(l.vkey), pinned: false, said: `the log key the registry names (${l.vkey})` });
  }
  const pinned = entries.every((e) => e.pinned);
  if (entries.length === 1) {
    const e = entries[0];
    return { policy: e.policy, pinned, said: e.pinned ? 'the pinned policy' : e.said, logs, k };
  }
  const said = pinned ? `the pinned policies of ${entries.map((e) => e.origin).join(' and ')}, ${k} of ${entries.length} required`
    : `${entries.map((e) => `${e.origin}: ${e.said}`).join('; ')} (${k} of ${entries.length} required)`;
  return { policy: new oap.PolicySet(entries, Math.min(k, entries.length)), pinned, said, logs, k };
}
