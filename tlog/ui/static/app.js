// The explorer page: fetches what the services serve and verifies it here, with the
// verifiers of lib/ (WebCrypto only). Nothing is trusted because a service said it: a
// result is green only when the math held in this browser, and it names the keys it was
// checked against. DOM updates use textContent only: the page runs under a CSP with no
// inline code and Trusted Types.
import * as oap from './lib/index.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const here = location.protocol.startsWith('http') ? location.origin : '';
const POLL_MS = 5000;
const RECENT = 8; // latest entries listed in the log view
const state = { policy: null, policyText: '', sizes: [], sizesKey: '', logInfo: null, lastSize: null, lastNote: null,
  registryInfo: null, bundles: [] };

// --- small DOM helpers ----------------------------------------------------------------

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function verdict(id, stateName, text) {
  const v = $(id);
  v.dataset.state = stateName;
  v.textContent = text;
}
function facts(id, rows) {
  const dl = $(id);
  dl.replaceChildren();
  for (const [k, v] of rows) dl.append(el('dt', k), el('dd', v));
}
/** Table rows; a cell is text, or a DOM node (a button). */
function rowsInto(tableId, rows) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const cells of rows) {
    const tr = el('tr');
    for (const c of cells) {
      const td = el('td');
      if (c instanceof Node) td.append(c); else td.textContent = c === null || c === undefined ? '' : String(c);
      tr.append(td);
    }
    body.append(tr);
  }
}
function ago(seconds) {
  const s = Math.round(seconds), a = Math.abs(s);
  const t = a >= 86400 ? `${Math.floor(a / 86400)} d` : a >= 3600 ? `${Math.floor(a / 3600)} h`
    : a >= 60 ? `${Math.floor(a / 60)} min` : `${a} s`;
  return s >= 0 ? `${t} ago` : `in ${t}`;
}
const nowSeconds = () => Date.now() / 1000;
const reasonOf = (e) => (e && e.reason) || (e && e.message) || String(e);
const base = (id) => $(id).value.trim().replace(/\/+$/, '');
const pathPart = (s) => encodeURIComponent(s).replace(/%3A/gi, ':');

/** GET a URL; the error names the URL and, for an OAP error body, its code and message. */
async function get(url, kind = 'json') {
  let r;
  try { r = await fetch(url, { headers: kind === 'json' ? { Accept: 'application/json' } : {} }); } catch (e) {
    throw new Error(`cannot reach ${url} (${reasonOf(e)})`);
  }
  if (!r.ok) {
    let msg = `${r.status}`;
    try { const j = await r.json(); msg = `${r.status} ${j.error}: ${j.message}`; } catch (_) { /* not JSON */ }
    throw new Error(`${url}: ${msg}`);
  }
  if (kind === 'json') return r.json();
  if (kind === 'bytes') return new Uint8Array(await r.arrayBuffer());
  return r.text();
}

// --- the trust policy -------------------------------------------------------------------

async function currentPolicy() {
  const text = $('policy').value;
  if (text !== state.policyText || state.policy === null) {
    state.policy = null;
    state.policy = await oap.TrustPolicy.fromText(text);
    state.policyText = text;
  }
  return state.policy;
}
function policyKeys(p) {
  const logs = p.policy.logs.map((l) => l.vkey).join(', ');
  const ws = [...p.policy.witnesses.values()].map((w) => `${w.name} (${w.vkey})`);
  return `log key ${logs}; witnesses ${ws.length ? ws.join(', ') : 'none'}; quorum ${p.policy.quorum ?? 'none'}`;
}
/** A failure, with the keys it was checked against (when the policy parses). */
async function failure(e) {
  let keys = '';
  try { keys = ` (checked against ${policyKeys(await currentPolicy())})`; } catch (_) { /* no usable policy */ }
  return `FAILED: ${reasonOf(e)}${keys}`;
}
function setPolicy(text, source) {
  $('policy').value = text;
  $('policy').dataset.edited = '1';
  $('policy-source').textContent = source;
  recheck();
}
/** The checkpoint shown, checked again against the policy as it now reads. */
function recheck() {
  if (state.lastNote) showCheckpoint(state.lastNote).catch(async (e) => verdict('log-verdict', 'fail', await failure(e)));
}

// --- log view ---------------------------------------------------------------------------

async function loadLog() {
  const url = base('log-url');
  if (!url) return;
  try {
    state.logInfo = await get(`${url}/v1/info`);
    if (!$('policy').dataset.edited) {
      $('policy').value = await get(`${url}/v1/policy`, 'text');
      $('policy-source').textContent = `From ${url}/v1/policy. A log vouching for its own keys proves nothing: `
        + 'paste or drop a policy you got elsewhere to pin them.';
    }
    await showCheckpoint(await get(`${url}/checkpoint`, 'text'));
  } catch (e) {
    verdict('log-verdict', 'fail', await failure(e));
  }
}

/** Each policy witness's cosignature on a parsed note (valid, invalid or absent), and the
 * signature lines of keys the policy does not name (shown, not checked). */
async function cosignatureRows(parsed, p) {
  const rows = [], named = new Set();
  for (const v of p.logs) named.add(v.name + '\0' + v.keyIdHex);
  for (const [wname, forms] of p.witnesses) {
    for (const v of forms) named.add(v.name + '\0' + v.keyIdHex);
    const row = { witness: wname, keyName: forms[0].name, state: 'no cosignature', ts: null };
    try {
      row.ts = (await oap.openNote(parsed, forms)).verified[0].timestamp;
      row.state = 'verified';
    } catch (e) {
      if (e instanceof oap.SignatureError) row.state = 'INVALID';
      else if (!(e instanceof oap.UnknownKeyError)) row.state = `FAILED: ${reasonOf(e)}`;
    }
    rows.push(row);
  }
  for (const s of parsed.signatures) {
    if (named.has(s.name + '\0' + oap.hex(s.keyId))) continue;
    const ts = s.blob.length === 72 ? oap.cosignatureTimestamp(s.blob) : null;
    rows.push({ witness: '(not in the policy)', keyName: s.name, state: 'not checked', ts });
  }
  return rows;
}

async function showCheckpoint(note) {
  state.lastNote = note;
  const parsed = oap.parseNote(note);
  const cp = oap.parseCheckpoint(parsed.text);
  facts('log-facts', [['origin', cp.origin], ['size', cp.size.toString()], ['root', oap.b64enc(cp.root)],
    ['read', new Date().toISOString()]]);
  recordSize(cp);
  let p;
  try { p = await currentPolicy(); } catch (e) {
    verdict('log-verdict', 'fail', `FAILED: the trust policy does not parse: ${reasonOf(e)}`);
    return;
  }
  const rows = await cosignatureRows(parsed, p);
  const now = nowSeconds();
  rowsInto('cosignatures', rows.map((r) => [r.witness, r.keyName, r.state,
    r.ts === null ? '' : new Date(Number(r.ts) * 1000).toISOString(), r.ts === null ? '' : ago(now - Number(r.ts))]));
  const valid = new Set(rows.filter((r) => r.state === 'verified').map((r) => r.witness));
  const met = oap.quorumMet(p.policy, valid);
  const q = $('quorum');
  q.dataset.state = met ? 'pass' : 'fail';
  q.textContent = p.policy.quorum === null ? 'The policy requires no witness cosignature.'
    : `Quorum ${p.policy.quorum}: ${met ? 'met' : 'NOT met'} (valid cosignatures from: ${[...valid].sort().join(', ') || 'none'})`;
  try {
    const vc = await p.verifyCheckpoint(note);
    const ws = [...vc.witnesses].sort();
    verdict('log-verdict', 'pass', `VERIFIED checkpoint of size ${cp.size}: signed by the log key ${vc.logKey}; `
      + `witness quorum met (${ws.join(', ') || 'none required'})`);
  } catch (e) {
    verdict('log-verdict', 'fail', await failure(e));
  }
  if (state.lastSize !== cp.size) {
    state.lastSize = cp.size;
    showRecent(base('log-url'), cp.size).catch((e) => rowsInto('recent', [['', '', `FAILED: ${reasonOf(e)}`, '']]));
  }
}

// Size over time: the sizes this page has seen, kept in localStorage per log so that the
// graph grows across visits (best effort: storage may be off).
function recordSize(cp) {
  const key = `oap-explorer:sizes:${cp.origin}`;
  if (state.sizesKey !== key) {
    state.sizesKey = key;
    try { state.sizes = JSON.parse(localStorage.getItem(key) || '[]').filter((x) => x && typeof x.t === 'number'); } catch (_) {
      state.sizes = [];
    }
  }
  const size = Number(cp.size), last = state.sizes[state.sizes.length - 1];
  if (!last || last.size !== size) {
    state.sizes.push({ t: Date.now(), size });
    if (state.sizes.length > 1000) state.sizes.splice(0, state.sizes.length - 1000);
    try { localStorage.setItem(key, JSON.stringify(state.sizes)); } catch (_) { /* storage off or full */ }
  }
  drawGrowth();
}

function drawGrowth() {
  const c = $('growth'), g = c.getContext('2d'), pts = state.sizes;
  g.clearRect(0, 0, c.width, c.height);
  if (!pts.length) return;
  const left = 70, right = c.width - 10, top = 10, bottom = c.height - 22;
  const t0 = pts[0].t, t1 = Math.max(Date.now(), t0 + 1);
  const s0 = Math.min(...pts.map((p) => p.size)), s1 = Math.max(s0 + 1, ...pts.map((p) => p.size));
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (right - left);
  const y = (s) => bottom - ((s - s0) / (s1 - s0)) * (bottom - top);
  g.strokeStyle = '#cbd5e0';
  g.beginPath(); g.moveTo(left, top); g.lineTo(left, bottom); g.lineTo(right, bottom); g.stroke();
  g.fillStyle = '#4a5568';
  g.font = '11px sans-serif';
  g.fillText(String(s1), 4, top + 8);
  g.fillText(String(s0), 4, bottom);
  g.fillText(new Date(t0).toLocaleTimeString(), left, c.height - 6);
  const end = new Date(t1).toLocaleTimeString();
  g.fillText(end, right - g.measureText(end).width, c.height - 6);
  g.strokeStyle = '#2b6cb0';
  g.lineWidth = 2;
  g.beginPath();
  pts.forEach((p, i) => {
    if (i === 0) g.moveTo(x(p.t), y(p.size));
    else { g.lineTo(x(p.t), y(pts[i - 1].size)); g.lineTo(x(p.t), y(p.size)); } // a step: the size held until it grew
  });
  g.lineTo(x(t1), y(pts[pts.length - 1].size));
  g.stroke();
  g.fillStyle = '#2b6cb0';
  for (const p of pts) { g.beginPath(); g.arc(x(p.t), y(p.size), 3, 0, 2 * Math.PI); g.fill(); }
  $('growth-text').textContent = `${pts.length} size${pts.length === 1 ? '' : 's'} seen by this browser since `
    + `${new Date(t0).toLocaleString()}: from ${pts[0].size} to ${pts[pts.length - 1].size} entries (checked every ${POLL_MS / 1000} s)`;
}

function summary(entry) {
  if (entry.type === 'receipt') return `${entry.receipt_hash}${entry.receipt_id ? ' (' + entry.receipt_id + ')' : ''}`;
  if (entry.type === 'commitment') return entry.commitment;
  if (entry.type === 'registry') return `registry commit ${entry.seq} ${String(entry.commit).slice(0, 12)}`;
  if (entry.type === 'conformance') return `conformance receipt ${entry.receipt && entry.receipt.id}`;
  return '';
}

async function showRecent(url, size) {
  const rows = [];
  for (let i = Number(size) - 1; i >= 0 && i >= Number(size) - RECENT; i--) {
    const resp = await get(`${url}/v1/entries/${i}`);
    const button = el('button', 'verify');
    button.type = 'button';
    button.dataset.index = String(i);
    button.addEventListener('click', () => {
      for (const f of ['entry-leaf', 'entry-receipt-hash', 'entry-receipt']) $(f).value = '';
      $('entry-index').value = String(i);
      openView('entry');
      lookUpEntry();
    });
    rows.push([String(i), resp.entry.type, summary(resp.entry), button]);
  }
  rowsInto('recent', rows);
}

// --- entry view -------------------------------------------------------------------------

/** What `oap-log verify` says of an entry's own signature: checked for did:key signers. */
async function entrySignature(entry, bytes) {
  if (entry.type !== 'receipt' && entry.type !== 'registry') return null;
  const signer = String(entry.signer);
  if (!signer.startsWith('did:key:') && !signer.startsWith('ed25519:'))
    return `signed by ${signer}: not checked here (its DID document is needed)`;
  const canonical = await oap.canonicalEntry(entry); // checks the Ed25519 signature, as the log did
  if (!oap.bytesEqual(canonical, bytes)) throw new oap.VerificationError('the entry is not in its canonical form');
  return `signed by ${signer}`;
}

async function lookUpEntry() {
  const url = base('log-url');
  verdict('entry-verdict', 'running', 'checking…');
  $('entry-json').textContent = '';
  $('entry-proof').textContent = '';
  $('entry-hash').textContent = '';
  try {
    let index = $('entry-index').value.trim();
    const leaf = $('entry-leaf').value.trim();
    let rh = $('entry-receipt-hash').value.trim().toLowerCase();
    const receiptText = $('entry-receipt').value.trim();
    if (!index && !leaf && !rh && receiptText) {
      rh = (await oap.receiptHash(receiptText)).text;
      $('entry-hash').textContent = `receipt hash, computed here (RFC 8785 JCS + SHA-256): ${rh}`;
    }
    if (!index && leaf) index = String((await get(`${url}/v1/entries:lookup?leaf_hash=${encodeURIComponent(leaf)}`)).index);
    if (!index && rh) {
      const found = await get(`${url}/v1/entries:lookup?receipt_hash=${encodeURIComponent(rh)}`);
      index = String(found.receipts[0].index);
      if (found.receipts.length > 1)
        $('entry-hash').textContent += ` (also anchored at ${found.receipts.slice(1).map((r) => r.index).join(', ')})`;
    }
    if (!/^[0-9]+$/.test(index)) throw new Error('give an index, a leaf hash, a receipt hash or a receipt');
    const resp = await get(`${url}/v1/entries/${index}`);
    const checked = await oap.verifyEntryResponse(resp); // the leaf hash is recomputed from the bytes
    $('entry-json').textContent = JSON.stringify(resp.entry, null, 2);
    const proof = await get(`${url}/v1/proof/inclusion?index=${index}`);
    const bundle = {
      index: BigInt(index), proof: proof.inclusion_proof.map((h) => oap.b64decHash(h)),
      checkpoint: proof.checkpoint, extra: checked.bytes,
    };
    $('entry-proof').textContent = oap.formatProofBundle(bundle);
    const p = await currentPolicy();
    const v = await p.verifyBundle(bundle, { entry: checked.bytes });
    if (rh && (checked.entry.type !== 'receipt' || checked.entry.receipt_hash !== rh))
      throw new oap.VerificationError('the entry anchors a different receipt');
    const signed = await entrySignature(checked.entry, checked.bytes);
    const cp = v.checkpoint.checkpoint, ws = [...v.checkpoint.witnesses].sort();
    verdict('entry-verdict', 'pass', `VERIFIED: entry ${index} (leaf hash ${oap.b64enc(v.leafHash)}) is included in `
      + `${cp.origin} at size ${cp.size} (root ${oap.b64enc(cp.root)}); the checkpoint is signed by the log key `
      + `${v.checkpoint.logKey} and cosigned by ${ws.join(', ') || 'no witness (none required)'}`
      + `${signed ? '; ' + signed + (signed.includes('not checked') ? '' : ' (signature verified)') : ''}. `
      + `Checked against ${policyKeys(p)}.`);
  } catch (e) {
    verdict('entry-verdict', 'fail', await failure(e));
  }
}

// --- bundle check -----------------------------------------------------------------------

/** tlog/cli/main.py `_check_receipt`: the bundle anchors this receipt (or opens to it with the salt). */
async function checkReceipt(entryBytes, receiptText, saltText) {
  if (entryBytes === null) throw new oap.VerificationError('bundle carries no entry to compare with the receipt');
  const { entry } = await oap.decodeEntry(entryBytes);
  const digest = await oap.sha256(oap.jcsBytes(oap.parseJSON(receiptText)));
  if (saltText) {
    const salt = oap.unhex(String(JSON.parse(saltText).salt));
    const commitment = 'sha256:' + oap.hex(await oap.sha256(oap.concat(digest, salt)));
    if (entry.type !== 'commitment' || entry.commitment !== commitment)
      throw new oap.VerificationError('the commitment does not open to this receipt with this salt');
  } else if (entry.type !== 'receipt' || entry.receipt_hash !== 'sha256:' + oap.hex(digest)) {
    throw new oap.VerificationError('the bundle anchors a different receipt');
  }
}

/** `oap-log verify`'s "; signed by …" for an OAP entry that carries a signature. */
async function bundleSigner(entryBytes) {
  let entry;
  try { ({ entry } = await oap.decodeEntry(entryBytes)); } catch (_) { return ''; } // not an OAP entry
  if ((entry.type !== 'receipt' && entry.type !== 'registry') || typeof entry.signer !== 'string') return '';
  const signed = await entrySignature(entry, entryBytes);
  return signed ? '; ' + signed : '';
}

async function checkBundles() {
  verdict('bundle-verdict', 'running', 'checking…');
  const items = [...state.bundles];
  if ($('bundle-text').value.trim()) items.unshift({ name: 'pasted bundle', text: $('bundle-text').value });
  const receipt = $('bundle-receipt').value.trim(), salt = $('bundle-salt').value.trim();
  let p;
  try {
    if (!items.length) throw new Error('give a .tlog-proof bundle');
    if ((receipt || salt) && items.length !== 1) throw new Error('a receipt and a salt are checked against one bundle at a time');
    if (salt && !receipt) throw new Error('a salt opens a commitment to a receipt: give the receipt too');
    p = await currentPolicy();
  } catch (e) {
    verdict('bundle-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
    return;
  }
  const lines = [];
  let failures = 0;
  for (const item of items) {
    try {
      const v = await p.verifyBundle(item.text);
      if (receipt) await checkReceipt(v.entry, receipt, salt);
      const signed = v.entry === null ? '' : await bundleSigner(v.entry);
      const cp = v.checkpoint.checkpoint, wit = [...v.checkpoint.witnesses].sort().join(', ') || 'none required';
      lines.push(`OK   ${item.name}: index ${v.index} in ${cp.origin} at size ${cp.size} (witnesses: ${wit})${signed}`
        + (receipt ? `; ${salt ? 'the commitment opens to' : 'anchors'} the receipt given` : ''));
    } catch (e) {
      failures++;
      lines.push(`FAIL ${item.name}: ${reasonOf(e)}`);
    }
  }
  lines.push(`${items.length - failures} verified, ${failures} failed (checked against ${policyKeys(p)})`);
  verdict('bundle-verdict', failures ? 'fail' : 'pass', lines.join('\n'));
}

function showBundleList() {
  $('bundle-list').textContent = state.bundles.length
    ? `${state.bundles.length} file(s): ${state.bundles.map((b) => b.name).join(', ')}` : '';
}

/** Files dropped or chosen: bundles, receipts, salts and policies, told apart by name and content. */
async function takeFiles(files, fallback) {
  for (const f of files) {
    const text = await f.text();
    if (f.name.endsWith('.salt.json')) $('bundle-salt').value = text;
    else if (text.startsWith('c2sp.org/tlog-proof@v1\n')) state.bundles.push({ name: f.name, text });
    else if (f.name.endsWith('.policy') || /^(#.*\n|\s*\n)*log /.test(text)) setPolicy(text, `From the file ${f.name}.`);
    else if (f.name.endsWith('.json')) $(fallback === 'entry-receipt' ? 'entry-receipt' : 'bundle-receipt').value = text;
    else $(fallback).value = text;
  }
  showBundleList();
}

function droppable(zoneId, fallback) {
  const zone = $(zoneId);
  zone.addEventListener('dragover', (e) => e.preventDefault());
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    takeFiles([...e.dataTransfer.files], fallback);
  });
}

// --- registry view ----------------------------------------------------------------------

/** The log policy registry anchors are checked with: the loaded one when it is for the
 * registry's log, else the log key the registry names (no witness quorum then). */
async function registryPolicy(info) {
  if (!info.log) return { policy: null, said: 'no log: anchors not checked' };
  try {
    const p = await currentPolicy();
    if (p.logs.some((v) => v.vkey === info.log.vkey)) return { policy: p, said: policyKeys(p) };
  } catch (_) { /* no usable policy loaded */ }
  return { policy: await oap.TrustPolicy.forLog(info.log.vkey),
    said: `log key ${info.log.vkey} (from the registry; witness quorum not checked: load the log's policy)` };
}

async function loadRegistry() {
  const url = base('registry-url');
  if (!url) return;
  const info = state.registryInfo = await get(`${url}/v1/info`);
  facts('registry-facts', [['registry', `${info.name} (${info.mode})`], ['anchors signed by', info.registry],
    ['status answers signed by', info.status_service || 'no status service'],
    ['head', info.head ? `commit ${info.head.seq} ${info.head.commit}` : 'empty'],
    ['anchored in', info.log ? `${info.log.origin}${info.log.url ? ' at ' + info.log.url : ''}` : '']]);
  const { policy, said } = await registryPolicy(info);
  const data = await get(`${url}/v1/commits?limit=10`);
  const rows = [];
  for (const c of data.commits) {
    let check = 'not in the log yet';
    if (c.anchor !== null) {
      try {
        const index = await oap.verifyCommitAnchor(c.anchor, { commit: c.commit, tree: c.tree, seq: c.seq,
          registry: info.registry, policy });
        check = `verified in the log (index ${index})`;
      } catch (e) {
        check = `FAILED: ${reasonOf(e)}`;
      }
    }
    const recs = c.records.map((r) => `${r.type} ${r.id}`).join('\n')
      + (c.record_count > c.records.length ? `\n(+${c.record_count - c.records.length} more)` : '');
    rows.push([String(c.seq), c.time, c.commit.slice(0, 12), recs || (c.seq === 0 ? 'genesis' : 'anchor-only'),
      c.log_index === null ? '' : String(c.log_index), check]);
  }
  rowsInto('commits', rows);
  $('commits-note').textContent = `Each anchor: the registry's signature on (commit, tree, seq), and its inclusion `
    + `in the log, checked against ${said}.`;
}

async function showRecords(url, who) {
  const listed = await get(`${url}/v1/records?subject=${encodeURIComponent(who)}&limit=1`);
  if (!listed.total) { rowsInto('principal-records', [['', '', 'no record names it', '', '']]); return; }
  const rows = [];
  for (const item of (await get(`${url}/v1/subjects/${pathPart(who)}`)).records) {
    const body = item.record;
    let check;
    try {
      await oap.checkRecord(body);
      check = 'verified';
    } catch (e) {
      check = body.issued_by && !String(body.issued_by).startsWith('did:key:') ? 'needs its DID document' : `FAILED: ${reasonOf(e)}`;
    }
    const what = body.event || body.kind || body.level || '';
    rows.push([String(item.seq), `${item.type}${what ? ' ' + what : ''}`, item.id, body.issued_by || body.subject || '', check]);
  }
  rowsInto('principal-records', rows);
}

async function checkStatus() {
  const url = base('registry-url');
  verdict('status-verdict', 'running', 'checking…');
  facts('status-facts', []);
  try {
    if (!state.registryInfo) await loadRegistry();
    const info = state.registryInfo;
    const id = $('status-id').value.trim();
    if (!id) throw new Error('give a DID or a record id');
    const text = await get(`${url}/v1/status/${pathPart(id)}`, 'text');
    const { policy, said } = await registryPolicy(info);
    const v = await oap.verifyStatus(text, { registry: info.status_service, policy });
    const resp = JSON.parse(text);
    const now = nowSeconds(), thisU = v.thisUpdate.getTime() / 1000, nextU = v.nextUpdate.getTime() / 1000;
    verdict('status-verdict', v.status === 'good' ? 'pass' : v.status === 'revoked' ? 'revoked' : 'unknown',
      `${v.status.toUpperCase()} (verified): signed by the status key ${info.status_service}; epoch ${v.epoch} `
      + `anchored in the log, checked against ${said}; answered ${ago(now - thisU)}, fresh until ${resp.next_update} `
      + `(${nextU > now ? 'for another ' + ago(now - nextU).replace('in ', '') : 'STALE'})`);
    const rows = [['id', v.id], ['status', v.status], ['epoch', String(v.epoch)],
      ['answered', `${resp.this_update} (${ago(now - thisU)})`], ['fresh until', `${resp.next_update} (${ago(now - nextU)})`]];
    if (v.status === 'revoked') rows.push(['revoked at', resp.revocation.revoked_at], ['reason', String(v.reason)]);
    facts('status-facts', rows);
    await showRecords(url, id);
  } catch (e) {
    verdict('status-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
  }
}

// --- witness view -----------------------------------------------------------------------

async function loadWitness() {
  const url = base('witness-url');
  if (!url) return;
  try {
    const info = await get(`${url}/v1/info`);
    const now = nowSeconds(), rows = [];
    let bad = 0;
    for (const l of info.logs) {
      if (l.size === null) { rows.push([l.origin, 'never cosigned', '', '', '']); continue; }
      // the witness's own view: the log's signature and this witness's cosignature, checked here
      try {
        const note = await get(`${url}${l.checkpoint_path}`, 'text');
        const logKey = await oap.parseVkey(l.vkey);
        const { note: parsed } = await oap.openNote(note, [logKey]);
        const cp = oap.parseCheckpoint(parsed.text);
        const [c] = await oap.verifyWitnessCosignature(note, info.verifier_key);
        rows.push([l.origin, cp.size.toString(), new Date(Number(c.timestamp) * 1000).toISOString(),
          ago(now - Number(c.timestamp)), `verified: signed by ${logKey.name}, cosigned by ${c.name}`]);
      } catch (e) {
        bad++;
        rows.push([l.origin, String(l.size), '', '', `FAILED: ${reasonOf(e)}`]);
      }
    }
    rowsInto('witness-logs', rows);
    const ref = await get(`${url}/v1/refusals`);
    rowsInto('witness-refusals', ref.refusals.map((r) => [r.time, r.origin ?? '', String(r.status), r.reason]));
    verdict('witness-verdict', bad ? 'fail' : 'pass', `witness ${info.name}: ${info.logs.length} log(s) followed; `
      + `cosignatures checked against its key ${info.verifier_key}${bad ? `; ${bad} FAILED` : ''}`);
  } catch (e) {
    verdict('witness-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
  }
}

// --- wiring -----------------------------------------------------------------------------

/** Which service serves this page (when no URL was given): a log, a registry or a witness. */
async function ownService() {
  if (!here || params.has('log') || params.has('registry') || params.has('witness')) return null;
  try {
    const info = await get(`${here}/v1/info`);
    if ('published' in info) return { log: here, view: 'log' };
    if ('status_service' in info) return { registry: here, log: info.log && info.log.url ? info.log.url : '', view: 'registry' };
    if ('identity' in info && Array.isArray(info.logs))  // and the log it follows, if only one
      return { witness: here, log: info.logs.length === 1 && info.logs[0].url ? info.logs[0].url : '', view: 'witness' };
  } catch (_) { /* a static host without ?log= */ }
  return null;
}

const VIEWS = ['log', 'entry', 'bundle', 'registry', 'witness'];
let defaultView = 'log';

/** One view at a time, named by the URL's #fragment (links to a view keep working). */
function showView() {
  const name = VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : defaultView;
  for (const v of VIEWS) {
    $(v).hidden = v !== name;
    if (v === name) $(`nav-${v}`).setAttribute('aria-current', 'page'); else $(`nav-${v}`).removeAttribute('aria-current');
  }
}
function openView(name) {
  if (location.hash !== '#' + name) location.hash = name; // hashchange shows it
  showView();
}

let poller = null;

/** (Re)load every service named in the URL fields, and keep the log's checkpoint fresh. */
async function loadAll() {
  state.lastSize = null;
  state.registryInfo = null;
  if (poller !== null) { clearInterval(poller); poller = null; }
  if (base('log-url')) {
    await loadLog();
    poller = setInterval(() => {
      get(`${base('log-url')}/checkpoint`, 'text').then(showCheckpoint)
        .catch(async (e) => verdict('log-verdict', 'fail', await failure(e)));
    }, POLL_MS);
  }
  if (base('registry-url'))
    await loadRegistry().catch((e) => { $('commits-note').textContent = `FAILED: ${reasonOf(e)}`; });
  if (base('witness-url')) await loadWitness();
}

async function main() {
  const own = (await ownService()) || {};
  // a link to an entry (?index=) or a status (?id=) opens that view
  defaultView = params.get('index') ? 'entry' : params.get('id') ? 'registry' : own.view || 'log';
  showView();
  window.addEventListener('hashchange', showView);
  $('log-url').value = params.get('log') || own.log || '';
  $('registry-url').value = params.get('registry') || own.registry || '';
  $('witness-url').value = params.get('witness') || own.witness || '';
  $('policy').addEventListener('input', () => {
    $('policy').dataset.edited = '1';
    $('policy-source').textContent = 'Edited here.';
    recheck();
  });
  $('services').addEventListener('submit', (e) => {
    e.preventDefault();
    // the URL says which services the page shows: it can be bookmarked, or shared from a static host
    const q = new URLSearchParams();
    for (const k of ['log', 'registry', 'witness']) if (base(`${k}-url`)) q.set(k, base(`${k}-url`));
    history.replaceState(null, '', `${location.pathname}?${q}${location.hash}`);
    loadAll();
  });
  $('entry-form').addEventListener('submit', (e) => { e.preventDefault(); lookUpEntry(); });
  $('bundle-check').addEventListener('click', () => checkBundles());
  $('bundle-files').addEventListener('change', (e) => { state.bundles = []; takeFiles([...e.target.files], 'bundle-text'); });
  $('registry-form').addEventListener('submit', (e) => { e.preventDefault(); checkStatus(); });
  droppable('receipt-drop', 'entry-receipt');
  droppable('bundle-drop', 'bundle-text');
  droppable('policy-drop', 'policy');
  if (params.get('index')) $('entry-index').value = params.get('index');
  if (params.get('id')) $('status-id').value = params.get('id');
  await loadAll();
  if (params.get('index') && base('log-url')) await lookUpEntry();
  if (params.get('id') && base('registry-url')) await checkStatus();
  document.body.dataset.ready = '1';
}
main().catch((e) => { document.body.dataset.ready = 'error'; verdict('log-verdict', 'fail', `FAILED: ${reasonOf(e)}`); });
