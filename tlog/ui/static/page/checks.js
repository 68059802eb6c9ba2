// Verdicts as tables of checks. A check is {id, label, when(ctx)?, run(ctx)} and returns one
// result {state: pass|fail|warn|info|skip, label, detail} or a list of them; a table is an
// array of checks, run in order over one context. What a result shows is its table: a new
// kind of signature (ML-DSA cosignatures, a mirror's cosignature, each signature of a
// receipt) or a new registry status is a row added to a table, not a new page.
//
// The overall verdict still comes from the verifier library (lib/): a checkpoint passes only
// when TrustPolicy.verifyCheckpoint passes, an entry only when verifyBundle does. The rows
// say which part held and which did not, against which key; failures are listed first.
import * as oap from '../lib/index.js';
import { TileTree } from '../lib/tilereader.js';
import { h, value, time, ago, reasonOf } from './dom.js';
import { tileFetcher } from './net.js';
import { SOURCES, keysIn } from './trust.js';
import { href } from './router.js';
import { signatureRow, receiptRows } from './signatures.js';

export const PASS = 'pass', FAIL = 'fail', WARN = 'warn', INFO = 'info', SKIP = 'skip';
export const UNPINNED_WORDS = 'consistent with what the log says about itself, not checked against a key you trust';

const r = (state, label, ...detail) => ({ state, label, detail });
const isoOf = (ts) => new Date(Number(ts) * 1000).toISOString().replace('.000Z', 'Z');

/** Run a table of checks; a check that throws is a failed row with the reason. */
export async function runChecks(table, ctx) {
  const out = [];
  for (const check of table) {
    if (check.when && !check.when(ctx)) continue;
    try {
      const got = await check.run(ctx);
      if (got) out.push(...(Array.isArray(got) ? got : [got]).map((x) => ({ id: check.id, ...x })));
    } catch (e) {
      out.push({ id: check.id, state: FAIL, label: check.label, detail: [reasonOf(e)] });
    }
  }
  return out;
}

/** The verdict of a list of results: fail if any failed or the library refused (`error`);
 * incomplete when a signature could not be checked (a row marked `incomplete`: `oap-log
 * verify`'s exit 3); otherwise pass only when pinned; errors first. */
export function judge(results, { pinned, error = null, summary = '' }) {
  const order = { fail: 0, warn: 1, pass: 2, info: 3, skip: 4 };
  const checks = [...results].sort((a, b) => order[a.state] - order[b.state]);
  if (error && !checks.some((c) => c.state === FAIL))
    checks.unshift({ id: 'verifier', state: FAIL, label: 'verification', detail: [reasonOf(error)] });
  const failed = checks.find((c) => c.state === FAIL);
  if (failed) {
    const why = failed.detail.filter((d) => typeof d === 'string').join(' ') || failed.label;
    const text = !why || why === failed.label ? failed.label : why.toLowerCase().startsWith(failed.label.toLowerCase()) ? why : `${failed.label}: ${why}`;
    return { state: 'fail', headline: `FAILED: ${text}`, checks, summary };
  }
  const open = checks.filter((c) => c.incomplete);
  if (open.length) {
    return { state: 'incomplete', checks, summary: pinned ? summary : `${summary}${summary ? '; ' : ''}NOT PINNED: ${UNPINNED_WORDS}`,
      headline: `INCOMPLETE: ${open.length} signature(s) could not be checked here, so this is not verified` };
  }
  if (!pinned) return { state: 'unpinned', headline: `NOT PINNED: ${UNPINNED_WORDS}`, checks, summary };
  return { state: 'pass', headline: 'VERIFIED', checks, summary };
}

/** A verdict with more results added (an entry page or a lookup on top of the checkpoint's). */
export function extend(base, extra, summary = '') {
  return judge([...extra, ...(base.checks || [])], { pinned: base.state !== 'unpinned' && !String(base.summary || '').includes('NOT PINNED'), summary });
}

// --- the checkpoint context ------------------------------------------------------------------

/** The policy a mirror's copy of a log is checked with (docs/architecture.md §3.7): a mirror
 * serves the log's checkpoint with its own cosignature, not the witnesses', so the witness
 * quorum is not what it can meet. From the policy `text` (the pin, else the log's own): its log
 * keys, and its `mirror` lines for this mirror (those whose URL is where `url`, the mirror's
 * copy, lives; else every one), one of which must have cosigned. A policy with no mirror line
 * requires the log's signature alone (and the page proves the copy consistent with the log).
 * -> {text, names: the mirrors it requires, one of}. */
export function mirrorPolicy(text, url) {
  const p = oap.parsePolicy(text), copy = String(url || '').replace(/\/+$/, '');
  const mirrors = [...p.witnesses.values()].filter((w) => w.mirror);
  const here = mirrors.filter((w) => w.url && (copy === w.url.replace(/\/+$/, '') || copy.startsWith(w.url.replace(/\/+$/, '') + '/')));
  const chosen = here.length ? here : mirrors;
  let group = 'any-mirror';
  while (chosen.some((w) => w.name === group)) group += '-';
  const derived = { logs: p.logs, witnesses: new Map(chosen.map((w) => [w.name, w])), registries: [], logQuorum: 1,
    groups: chosen.length > 1 ? new Map([[group, { name: group, threshold: 1, members: chosen.map((w) => w.name) }]]) : new Map(),
    quorum: chosen.length > 1 ? group : chosen.length ? chosen[0].name : null };
  return { text: oap.policyToText(derived), names: chosen.map((w) => w.name) };
}

/** Everything the checkpoint checks read: the note, the policy it is checked against (the pin
 * for its origin, else the log's own `served` policy text), and where to read tiles from.
 * `mirror`: the URL of a mirror's copy whose checkpoint this is (checked with mirrorPolicy). */
export async function checkpointContext(trust, note, { served = null, logUrl = null, live = false, servedKey = null, mirror = null } = {}) {
  const parsed = oap.parseNote(note);
  const cp = oap.parseCheckpoint(parsed.text);
  const trusted = await trust.policyFor(cp.origin);
  let policy = trusted ? trusted.policy : null, servedError = null, mirrors = null;
  if (!policy && served) {
    try { policy = await trust.policyOf(served); } catch (e) { servedError = e; }
  }
  if (policy && mirror !== null) {
    const derived = mirrorPolicy(trusted ? trusted.pin.text : served, mirror);
    policy = await trust.policyOf(derived.text);
    mirrors = derived.names;
  }
  const ctx = { trust, note, parsed, cp, origin: cp.origin, pin: trusted ? trusted.pin : null, pinned: !!trusted,
    policy, served, servedError, logUrl, live, servedKey, signerKey: null, vc: null, cpError: null, vcError: null, mirrors };
  if (policy) {
    try { ctx.vc = await policy.verifyCheckpoint(note); } catch (e) { ctx.cpError = e; }
  } else {
    ctx.cpError = new oap.PolicyError(`no policy names the log ${cp.origin}: pin one (Trust)`);
  }
  ctx.vcError = ctx.cpError;
  return ctx;
}

const trustRow = {
  id: 'trust', label: 'trust',
  run(ctx) {
    const asMirror = ctx.mirrors === null ? '' : ctx.mirrors.length
      ? `; a mirror's copy: its log key and the cosignature of ${ctx.mirrors.length > 1 ? 'one of ' : ''}mirror ${ctx.mirrors.join(', ')}`
      : "; a mirror's copy: the log key alone (the policy names no mirror)";
    if (ctx.pinned) {
      const p = ctx.pin;
      return r(PASS, 'pinned', `checked against ${SOURCES[p.source] || p.source}`, p.detail ? ` (${p.detail})` : '',
        p.at ? [', pinned ', time(p.at, { age: false })] : '', asMirror);
    }
    if (!ctx.policy) return r(FAIL, 'no trusted policy', `no policy names the log ${ctx.origin}`,
      ctx.servedError ? ` (and the log's own policy does not parse: ${reasonOf(ctx.servedError)})` : '');
    return r(WARN, 'not pinned', `${UNPINNED_WORDS}${asMirror}. `, h('a', { href: href({ view: 'trust' }), text: 'Pin a policy' }));
  },
};

const logSignature = {
  id: 'log-signature', label: 'log signature',
  when: (ctx) => !!ctx.policy,
  async run(ctx) {
    try {
      const { verified } = await oap.openNote(ctx.parsed, ctx.policy.logs);
      ctx.signerKey = verified[0].verifier.vkey;
      return r(PASS, 'log signature', 'against key ', value(ctx.signerKey, 'log key'));
    } catch (e) {
      const keys = ctx.policy.logs.map((v) => value(v.vkey, 'log key'));
      if (e instanceof oap.UnknownKeyError) return r(FAIL, 'log signature', 'not signed by a log key of the policy; it names ', keys);
      if (e instanceof oap.SignatureError) return r(FAIL, 'log signature', "the log's signature does not verify against ", keys);
      throw e;
    }
  },
};

const originCheck = {
  id: 'origin', label: 'origin',
  when: (ctx) => !!ctx.signerKey,
  run(ctx) {
    const name = ctx.signerKey.split('+')[0];
    const expect = ctx.policy.origin ?? name;
    return ctx.cp.origin === expect ? r(PASS, 'origin', ctx.cp.origin)
      : r(FAIL, 'origin', `checkpoint origin ${ctx.cp.origin} is not the log key's name ${expect}`);
  },
};

/** Each policy witness's (and mirror's) cosignature (valid, invalid or absent) and the
 * signature lines of keys the policy does not name (shown, not checked): ctx.cosignatures, for
 * the table too. A mirror's row says so (`mirror`): its cosignature also means "stored". */
async function cosignatureRows(ctx) {
  const p = ctx.policy, rows = [], named = new Set();
  for (const v of p.logs) named.add(v.name + '\0' + v.keyIdHex);
  for (const [wname, forms] of p.witnesses) {
    for (const v of forms) named.add(v.name + '\0' + v.keyIdHex);
    const w = p.policy.witnesses.get(wname);
    const row = { witness: wname, keyName: forms[0].name, vkey: w.vkey, mirror: !!w.mirror, state: 'absent', ts: null };
    try {
      row.ts = (await oap.openNote(ctx.parsed, forms)).verified[0].timestamp;
      row.state = 'verified';
    } catch (e) {
      if (e instanceof oap.SignatureError) { row.state = 'invalid'; row.reason = reasonOf(e); } else if (!(e instanceof oap.UnknownKeyError)) { row.state = 'invalid'; row.reason = reasonOf(e); }
    }
    rows.push(row);
  }
  for (const s of ctx.parsed.signatures) {
    if (named.has(s.name + '\0' + oap.hex(s.keyId))) continue;
    const ts = s.blob.length === 72 ? oap.cosignatureTimestamp(s.blob) : null;
    rows.push({ witness: null, keyName: s.name, vkey: null, state: 'not in the policy', ts });
  }
  ctx.cosignatures = rows;
  return rows;
}

const cosignatures = {
  id: 'cosignatures', label: 'cosignatures',
  when: (ctx) => !!ctx.policy,
  async run(ctx) {
    const rows = await cosignatureRows(ctx);
    const pol = ctx.policy.policy, total = pol.witnesses.size;
    const valid = new Set(rows.filter((x) => x.state === 'verified').map((x) => x.witness));
    const names = oap.pySorted(valid);
    const word = { verified: '✓', absent: 'none', invalid: '✗ invalid' };
    const who = (x) => (x.mirror ? `mirror ${x.witness}` : x.witness);
    const detail = rows.filter((x) => x.witness !== null).map((x) => h('span', { class: 'cosig', data: { state: x.state, kind: x.mirror ? 'mirror' : 'witness' },
      title: x.ts !== null ? `${who(x)}: ${x.state}, ${x.mirror ? 'stored and cosigned' : 'cosigned'} ${isoOf(x.ts)}` : `${who(x)}: ${x.state}` },
    `${who(x)} ${word[x.state] || x.state}`, x.ts !== null && x.state === 'verified' ? ` ${ago(Date.now() / 1000 - Number(x.ts))}` : '',
    x.reason ? ` (${x.reason})` : ''));
    const bad = rows.filter((x) => x.state === 'invalid');
    if (bad.length) return r(FAIL, `cosignature of ${bad.map((x) => x.witness).join(', ')} does not verify`, ...detail);
    if (pol.quorum === null) {
      return r(total ? PASS : INFO, total ? `cosignatures ${valid.size} of ${total} (${names.join(', ') || 'none'})` : 'cosignatures',
        'the policy requires no witness', total ? '; ' : '', ...detail);
    }
    const met = oap.quorumMet(pol, valid);
    return r(met ? PASS : FAIL, `cosignatures ${valid.size} of ${total}${names.length ? ` (${names.join(', ')})` : ''}`,
      `quorum ${pol.quorum} ${met ? 'met' : 'NOT met'}; `, ...detail);
  },
};

const keyContinuity = {
  id: 'key', label: 'log key continuity',
  run(ctx) {
    const seen = ctx.trust.keysSeen(ctx.origin);
    const current = ctx.signerKey || ctx.servedKey;
    if (ctx.pin && ctx.servedKey) {
      const pinnedKeys = keysIn(ctx.pin.text, ctx.origin);
      if (pinnedKeys.length && !pinnedKeys.includes(ctx.servedKey)) {
        const detail = `${SOURCES[ctx.pin.source] || ctx.pin.source} names ${pinnedKeys.join(', ')} for ${ctx.origin}; `
          + `the log now says its key is ${ctx.servedKey}`;
        ctx.trust.keyChanged(ctx.origin, { title: `KEY CHANGED for ${ctx.origin}`, detail });
        return r(FAIL, 'log key changed', 'pinned ', pinnedKeys.map((k) => value(k, 'pinned key')), '; the log now says ',
          value(ctx.servedKey, 'new key'));
      }
    }
    if (!current) return null;
    const others = seen.filter((k) => k !== current);
    if (!others.length) {
      const h0 = ctx.trust.history(ctx.origin, current);
      return h0 ? r(PASS, 'same log key as before', 'seen by this browser since ', time(new Date(h0.first).toISOString()))
        : r(INFO, 'first visit', 'this browser has not seen this log before');
    }
    const last = others.map((k) => ({ k, t: (ctx.trust.history(ctx.origin, k).last || {}).t || 0 })).sort((a, b) => b.t - a.t)[0];
    if (ctx.pinned) return r(INFO, 'other keys seen before', `this browser also saw ${ctx.origin} signed by `, value(last.k, 'other key'));
    const detail = `${ctx.origin} was signed by ${last.k} when this browser last saw it`
      + `${last.t ? ' (' + ago((Date.now() - last.t) / 1000) + ')' : ''}; now by ${current}`;
    ctx.trust.keyChanged(ctx.origin, { title: `KEY CHANGED for ${ctx.origin}`, detail });
    return r(FAIL, 'log key changed', 'last seen with ', value(last.k, 'previous key'), ', now ', value(current, 'new key'));
  },
};

/** Proof, from the log's tiles, that `older` ({size, root}) is a prefix of `newer`: the tiles
 * must lead to newer's signed root, and the consistency proof built from them must verify. */
export async function proveConsistent(logUrl, older, newer) {
  if (older.size === newer.size) {
    if (!oap.bytesEqual(older.root, newer.root)) throw new oap.ConsistencyProofError(`two different roots for size ${newer.size}`);
    return;
  }
  const tree = new TileTree(newer.size, tileFetcher(logUrl));
  const root = await tree.root();
  if (!oap.bytesEqual(root, newer.root)) {
    const e = new oap.VerificationError(`the log's tiles do not lead to the root of size ${newer.size}`);
    e.tiles = true;
    throw e;
  }
  await oap.verifyConsistency(older.size, newer.size, older.root, newer.root, await tree.consistencyProof(older.size));
}

const consistency = {
  id: 'consistency', label: 'consistency with what this browser saw',
  when: (ctx) => !!ctx.signerKey && !ctx.cpError,
  async run(ctx) {
    const hist = ctx.trust.history(ctx.origin, ctx.signerKey);
    const last = hist && hist.last;
    const record = () => { if (ctx.live) ctx.trust.record(ctx.origin, ctx.signerKey, ctx.cp, ctx.note); };
    if (!last) {
      record();
      return r(INFO, 'consistency', 'first checkpoint of this log seen by this browser: later ones are checked against it');
    }
    const seen = { size: BigInt(last.size), root: oap.b64decHash(last.root) }, now = { size: ctx.cp.size, root: ctx.cp.root };
    const when = ago((Date.now() - last.t) / 1000);
    const evidence = (reason) => ctx.trust.conflict(ctx.origin, ctx.signerKey, { reason, earlier: last.note, later: ctx.note });
    if (!ctx.logUrl) {
      if (seen.size === now.size && !oap.bytesEqual(seen.root, now.root)) {
        evidence(`two different roots for size ${now.size}`);
        return r(FAIL, 'INCONSISTENT', `this checkpoint and the one seen ${when} have different roots for size ${now.size}`);
      }
      return r(SKIP, 'consistency', `not checked: no log to read tiles from (last seen size ${seen.size}, ${when})`);
    }
    const [older, newer] = now.size >= seen.size ? [seen, now] : [now, seen];
    try {
      await proveConsistent(ctx.logUrl, older, newer);
    } catch (e) {
      if (e instanceof oap.ConsistencyProofError) {
        evidence(reasonOf(e));
        return r(FAIL, 'INCONSISTENT', `the log has shown two different histories: size ${seen.size} seen ${when} and size `
          + `${now.size} now cannot both be true (${reasonOf(e)})`);
      }
      if (now.size < seen.size && ctx.live) {
        evidence(`the log went back from size ${seen.size} to ${now.size} and cannot prove the two consistent (${reasonOf(e)})`);
        return r(FAIL, 'INCONSISTENT', `the log went back from size ${seen.size} (seen ${when}) to ${now.size}, and its tiles `
          + `cannot prove the two consistent: ${reasonOf(e)}`);
      }
      if (e.tiles) return r(FAIL, 'tiles', reasonOf(e));
      return r(WARN, 'consistency', `not checked: ${reasonOf(e)}`);
    }
    record();
    if (now.size < seen.size) {
      return ctx.live ? r(WARN, 'older checkpoint', `size ${now.size} is older than the size ${seen.size} seen ${when} (consistent with it)`)
        : r(PASS, 'consistency', `a consistency proof (from tiles) shows size ${now.size} is a prefix of size ${seen.size}, seen ${when}`);
    }
    return r(PASS, 'consistency', now.size === seen.size ? `same tree as seen ${when}`
      : `a consistency proof (from tiles) shows size ${seen.size}, seen ${when}, is a prefix of size ${now.size}`);
  },
};

/** The checks of a checkpoint, in the order shown (failures are sorted first). */
export const CHECKPOINT_CHECKS = [trustRow, logSignature, originCheck, cosignatures, keyContinuity, consistency];

// --- entries and bundles ------------------------------------------------------------------------

/** `oap-log verify`'s entry signature (receipt and registry entries): a did:key offline,
 * another DID with the DID document the entry keeps, else one the user pinned; null for the
 * unsigned types. A verified signature must also leave the entry in its canonical form. */
export async function entrySignature(entry, bytes, documents = []) {
  if (entry.type !== 'receipt' && entry.type !== 'registry') return null;
  return oap.verifyEntrySignature(bytes, { documents });
}
const inclusion = {
  id: 'inclusion', label: 'inclusion proof',
  when: (ctx) => !!ctx.bundle,
  async run(ctx) {
    const b = ctx.bundle;
    await oap.verifyInclusion(b.index, ctx.cp.size, ctx.leafHash, b.proof, ctx.cp.root);
    return r(PASS, 'inclusion proof', `entry ${b.index} is in the tree of size ${ctx.cp.size} (root `, value(oap.b64enc(ctx.cp.root), 'root'), ')');
  },
};

const entryDecoded = {
  id: 'entry', label: 'entry',
  when: (ctx) => ctx.entryBytes !== null && ctx.entryBytes !== undefined,
  async run(ctx) {
    try { ctx.entry = (await oap.decodeEntry(ctx.entryBytes)).entry; } catch (e) {
      ctx.entry = null;
      return r(INFO, 'entry', `not an OAP entry (${reasonOf(e)}): only its inclusion is checked`);
    }
    return null;
  },
};

const entrySignatureRow = {
  id: 'entry-signature', label: 'entry signature',
  when: (ctx) => !!ctx.entry,
  async run(ctx) {
    const s = await entrySignature(ctx.entry, ctx.entryBytes, ctx.documents || []);
    if (!s) return null;
    ctx.entrySignature = s;
    return signatureRow(s, { what: 'entry signature', id: 'entry-signature' });
  },
};

const receiptMatch = {
  id: 'receipt', label: 'receipt',
  when: (ctx) => !!(ctx.receiptHash || ctx.receiptText),
  async run(ctx) {
    const entry = ctx.entry;
    if (!entry) throw new oap.VerificationError('no entry to compare with the receipt');
    let want = ctx.receiptHash;
    if (ctx.receiptText) {
      const digest = await oap.sha256(oap.jcsBytes(oap.parseJSON(ctx.receiptText)));
      if (ctx.saltText) { // a Privileged Mode commitment opens to the receipt with its salt
        const salt = oap.unhex(String(JSON.parse(ctx.saltText).salt));
        const commitment = 'sha256:' + oap.hex(await oap.sha256(oap.concat(digest, salt)));
        if (entry.type !== 'commitment' || entry.commitment !== commitment)
          throw new oap.VerificationError('the commitment does not open to this receipt with this salt');
        ctx.receiptAnchored = true;
        return r(PASS, 'commitment', 'opens to the receipt given, with its salt');
      }
      want = 'sha256:' + oap.hex(digest);
    }
    if (entry.type !== 'receipt' || entry.receipt_hash !== want)
      throw new oap.VerificationError('the bundle anchors a different receipt');
    ctx.receiptAnchored = true;
    return r(PASS, 'receipt', 'the entry anchors the receipt given (', value(want, 'receipt hash'), ')');
  },
};

/** Every signature the receipt carries (OAP-CORE-1.0 §19.1), each a row: `oap-log verify --receipt`. */
const receiptSignatures = {
  id: 'receipt-signatures', label: 'receipt signatures',
  when: (ctx) => !!ctx.receiptText && !!ctx.receiptAnchored,
  async run(ctx) {
    const report = await oap.verifyReceiptSignatures(ctx.receiptText, { documents: ctx.documents || [], entry: ctx.entryBytes });
    ctx.receiptReport = report;
    return receiptRows(report);
  },
};

/** The checks of an entry with its inclusion proof (a lookup, or a .tlog-proof bundle). */
export const ENTRY_CHECKS = [...CHECKPOINT_CHECKS, entryDecoded, inclusion, entrySignatureRow, receiptMatch, receiptSignatures];

/** A bundle's context: its checkpoint's, plus the bundle and its entry. */
export async function bundleContext(trust, bundle, opts = {}) {
  const b = typeof bundle === 'string' ? oap.parseProofBundle(bundle) : bundle;
  const entryBytes = opts.entry ?? b.extra;
  const ctx = await checkpointContext(trust, b.checkpoint, opts);
  ctx.bundle = b;
  ctx.entryBytes = entryBytes;
  ctx.leafHash = entryBytes ? await oap.leafHash(entryBytes) : null;
  ctx.receiptHash = opts.receiptHash || null;
  ctx.receiptText = opts.receiptText || null;
  ctx.saltText = opts.saltText || null;
  ctx.documents = opts.documents || [];
  if (ctx.policy && !ctx.cpError) {
    try { ctx.verified = await ctx.policy.verifyBundle(b, { entry: entryBytes }); } catch (e) { ctx.vcError = e; }
  }
  return ctx;
}

/** Run `table` over `ctx` and judge it. */
export async function verdictOf(table, ctx, summary = '') {
  const results = await runChecks(table, ctx);
  return judge(results, { pinned: ctx.pinned, error: ctx.vcError, summary });
}
