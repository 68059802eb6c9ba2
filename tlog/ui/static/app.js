// The explorer page: fetches what the services serve and verifies it here, with the
// verifiers of lib/ (WebCrypto only). DOM updates use textContent only: the page runs
// under a CSP with no inline code and Trusted Types.
import * as oap from './lib/index.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const here = location.protocol.startsWith('http') ? location.origin : '';
const state = { policy: null, policyText: '', sizes: [], logInfo: null, registryInfo: null };

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
  for (const [k, v] of rows) { dl.append(el('dt', k), el('dd', v)); }
}
function rowsInto(tableId, rows) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const cells of rows) {
    const tr = el('tr');
    for (const c of cells) tr.append(el('td', c));
    body.append(tr);
  }
}
function ago(seconds) {
  const s = Math.round(seconds), a = Math.abs(s);
  const t = a >= 86400 ? `${Math.floor(a / 86400)} d` : a >= 3600 ? `${Math.floor(a / 3600)} h`
    : a >= 60 ? `${Math.floor(a / 60)} min` : `${a} s`;
  return s >= 0 ? `${t} ago` : `in ${t}`;
}
const reasonOf = (e) => (e && e.reason) || (e && e.message) || String(e);
const base = (id) => $(id).value.trim().replace(/\/+$/, '');

async function get(url, kind = 'json') {
  const r = await fetch(url, { headers: kind === 'json' ? { Accept: 'application/json' } : {} });
  if (!r.ok) {
    let msg = `${r.status}`;
    try { const j = await r.json(); msg = `${r.status} ${j.error}: ${j.message}`; } catch (_) { /* not JSON */ }
    throw new Error(`${url}: ${msg}`);
  }
  if (kind === 'json') return r.json();
  if (kind === 'bytes') return new Uint8Array(await r.arrayBuffer());
  return r.text();
}

// --- policy -------------------------------------------------------------------------

async function currentPolicy() {
  const text = $('policy').value;
  if (text !== state.policyText || state.policy === null) {
    state.policy = await oap.TrustPolicy.fromText(text);
    state.policyText = text;
  }
  return state.policy;
}
function policyKeys(p) {
  const logs = p.policy.logs.map((l) => l.vkey).join(', ');
  const ws = [...p.policy.witnesses.keys()];
  return `log key ${logs}; witnesses ${ws.length ? ws.join(', ') : 'none'}; quorum ${p.policy.quorum ?? 'none'}`;
}

// --- log view -----------------------------------------------------------------------

async function loadLog() {
  const url = base('log-url');
  try {
    state.logInfo = await get(`${url}/v1/info`);
    if (!$('policy').dataset.edited) {
      try { $('policy').value = await get(`${url}/v1/policy`, 'text'); } catch (_) {
        $('policy').value = `log ${state.logInfo.verifier_key}\nquorum none\n`;
      }
    }
    const note = await get(`${url}/checkpoint`, 'text');
    await showCheckpoint(note);
  } catch (e) {
    verdict('log-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
  }
}

async function showCheckpoint(note) {
  let vc;
  const parsed = oap.parseNote(note);
  const cp = oap.parseCheckpoint(parsed.text);
  facts('log-facts', [['origin', cp.origin], ['size', cp.size.toString()], ['root', oap.b64enc(cp.root)]]);
  try {
    const p = await currentPolicy();
    vc = await p.verifyCheckpoint(note);
    const ws = [...vc.witnesses].sort();
    verdict('log-verdict', 'pass', `VERIFIED checkpoint of size ${cp.size}: signed by the log key ${vc.logKey}; `
      + `witness quorum met (${ws.join(', ') || 'none required'})`);
    rowsInto('cosignatures', oap.cosignatureAges(vc).map((c) => [c.witness, c.keyName, c.time.toISOString(), ago(c.ageSeconds)]));
  } catch (e) {
    verdict('log-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
    rowsInto('cosignatures', parsed.signatures.map((s) => [s.name, '(not verified)', '', '']));
  }
  const last = state.sizes[state.sizes.length - 1];
  if (!last || last.size !== cp.size) state.sizes.push({ t: Date.now(), size: cp.size });
  if (state.sizes.length > 500) state.sizes.shift();
  drawGrowth();
}

function drawGrowth() {
  const c = $('growth'), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  const pts = state.sizes;
  if (!pts.length) return;
  const t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1);
  const maxS = Number(pts[pts.length - 1].size) || 1;
  g.strokeStyle = '#2b6cb0';
  g.lineWidth = 2;
  g.beginPath();
  pts.forEach((p, i) => {
    const x = 5 + ((p.t - t0) / (t1 - t0)) * (c.width - 10);
    const y = c.height - 5 - (Number(p.size) / maxS) * (c.height - 10);
    if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
  });
  g.stroke();
  $('growth-text').textContent = `${pts.length} sizes seen since this page opened: from ${pts[0].size} to ${pts[pts.length - 1].size}`;
}

// --- entry view ---------------------------------------------------------------------

async function lookUpEntry() {
  const url = base('log-url');
  verdict('entry-verdict', 'running', 'checking…');
  $('entry-json').textContent = '';
  $('entry-proof').textContent = '';
  try {
    let index = $('entry-index').value.trim();
    const leaf = $('entry-leaf').value.trim();
    let rh = $('entry-receipt-hash').value.trim();
    const receiptText = $('entry-receipt').value.trim();
    if (!index && !leaf && !rh && receiptText) {
      rh = (await oap.receiptHash(receiptText)).text;
      $('entry-receipt-hash').value = rh;
    }
    if (!index && leaf) index = String((await get(`${url}/v1/entries:lookup?leaf_hash=${encodeURIComponent(leaf)}`)).index);
    if (!index && rh) {
      const found = await get(`${url}/v1/entries:lookup?receipt_hash=${encodeURIComponent(rh)}`);
      if (!found.receipts.length) throw new Error(`no receipt entry anchors ${rh}`);
      index = String(found.receipts[0].index);
    }
    if (!/^[0-9]+$/.test(index)) throw new Error('give an index, a leaf hash, a receipt hash or a receipt');
    const resp = await get(`${url}/v1/entries/${index}`);
    const checked = await oap.verifyEntryResponse(resp);
    const entry = oap.b64dec(resp.entry_cbor, 'entry_cbor');
    $('entry-json').textContent = JSON.stringify(resp.entry, null, 2);
    const proof = await get(`${url}/v1/proof/inclusion?index=${index}`);
    const bundle = {
      index: BigInt(index), proof: proof.inclusion_proof.map((h) => oap.b64decHash(h)),
      checkpoint: proof.checkpoint, extra: entry,
    };
    $('entry-proof').textContent = oap.formatProofBundle(bundle);
    const p = await currentPolicy();
    const v = await p.verifyBundle(bundle, { entry });
    if (rh && checked.entry.type === 'receipt' && checked.entry.receipt_hash !== rh) throw new Error('the entry anchors another receipt');
    const cp = v.checkpoint.checkpoint;
    verdict('entry-verdict', 'pass', `VERIFIED: entry ${index} (leaf hash ${oap.b64enc(v.leafHash)}) is included in `
      + `${cp.origin} at size ${cp.size} (root ${oap.b64enc(cp.root)}); checked against ${policyKeys(p)}; `
      + `cosigned by ${[...v.checkpoint.witnesses].sort().join(', ') || 'no witness (none required)'}`);
  } catch (e) {
    verdict('entry-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
  }
}

// --- bundle check -------------------------------------------------------------------

async function checkBundle() {
  verdict('bundle-verdict', 'running', 'checking…');
  try {
    const p = await currentPolicy();
    const v = await p.verifyBundle($('bundle-text').value);
    const receipt = $('bundle-receipt').value.trim();
    if (receipt) {
      if (v.entry === null) throw new oap.VerificationError('bundle carries no entry to compare with the receipt');
      const { entry } = await oap.decodeEntry(v.entry);
      const rh = (await oap.receiptHash(receipt)).text;
      if (entry.type !== 'receipt' || entry.receipt_hash !== rh) throw new oap.VerificationError('the bundle anchors a different receipt');
    }
    const cp = v.checkpoint.checkpoint;
    verdict('bundle-verdict', 'pass', `OK: index ${v.index} in ${cp.origin} at size ${cp.size} `
      + `(witnesses: ${[...v.checkpoint.witnesses].sort().join(', ') || 'none required'})${receipt ? '; anchors the receipt given' : ''}`);
  } catch (e) {
    verdict('bundle-verdict', 'fail', `FAIL: ${reasonOf(e)}`);
  }
}

function droppable(zoneId, targetId) {
  const zone = $(zoneId);
  zone.addEventListener('dragover', (e) => e.preventDefault());
  zone.addEventListener('drop', async (e) => {
    e.preventDefault();
    const files = [...e.dataTransfer.files];
    for (const f of files) {
      const text = await f.text();
      const target = f.name.endsWith('.json') && zoneId === 'bundle-drop' ? 'bundle-receipt' : targetId;
      $(target).value = text;
    }
  });
}

// --- registry view ------------------------------------------------------------------

async function registryPolicy(info) {
  if (state.logInfo && info.log && state.logInfo.verifier_key === info.log.vkey) return currentPolicy();
  return info.log ? oap.TrustPolicy.forLog(info.log.vkey) : null;
}

async function loadRegistry() {
  const url = base('registry-url');
  state.registryInfo = await get(`${url}/v1/info`);
  const info = state.registryInfo;
  const head = info.head ? info.head.seq : -1;
  const policy = await registryPolicy(info);
  const rows = [];
  for (let seq = head; seq >= 0 && seq > head - 5; seq--) {
    try {
      const text = await get(`${url}/v1/anchors/${seq}`, 'text');
      const b = oap.parseProofBundle(text);
      const { entry } = await oap.decodeEntry(b.extra);
      const index = await oap.verifyCommitAnchor(text, { commit: entry.commit, tree: entry.tree, seq: entry.seq, registry: info.registry, policy });
      rows.push([String(seq), entry.commit.slice(0, 12), String(index), 'verified in the log']);
    } catch (e) {
      rows.push([String(seq), '', '', `FAILED: ${reasonOf(e)}`]);
    }
  }
  rowsInto('commits', rows);
}

async function showRecords(url, who) {
  const r = await fetch(`${url}/v1/subjects/${encodeURIComponent(who).replace(/%3A/gi, ':')}`);
  if (r.status === 404) { rowsInto('principal-records', []); return; }
  if (!r.ok) throw new Error(`${url}/v1/subjects: ${r.status}`);
  const rows = [];
  for (const item of (await r.json()).records) {
    const body = item.record;
    let check;
    try {
      await oap.checkRecord(body);
      check = 'verified';
    } catch (e) {
      check = body.issued_by && !body.issued_by.startsWith('did:key:') ? 'needs its DID document' : `FAILED: ${reasonOf(e)}`;
    }
    const what = body.event || body.kind || body.level || '';
    rows.push([String(item.seq), `${item.type}${what ? ' ' + what : ''}`, item.id, body.issued_by || body.subject || '', check]);
  }
  rowsInto('principal-records', rows);
}

async function checkStatus() {
  const url = base('registry-url');
  verdict('status-verdict', 'running', 'checking…');
  try {
    if (!state.registryInfo) await loadRegistry();
    const info = state.registryInfo;
    const id = $('status-id').value.trim();
    if (!id) throw new Error('give a DID or a record id');
    const resp = await get(`${url}/v1/status/${encodeURIComponent(id).replace(/%3A/gi, ':')}`);
    const v = await oap.verifyStatus(resp, { registry: info.status_service, policy: await registryPolicy(info) });
    const now = Date.now() / 1000;
    const thisU = Number(v.thisUpdate) / 1e6, nextU = Number(v.nextUpdate) / 1e6;
    verdict('status-verdict', v.status === 'good' ? 'pass' : v.status === 'revoked' ? 'revoked' : 'unknown',
      `${v.status.toUpperCase()} (verified): signed by the status key ${info.status_service}; `
      + `log anchors ${v.logChecked ? 'verified' : 'not checked'}; fresh until ${resp.next_update} (${ago(now - nextU)})`);
    const rows = [['id', v.id], ['epoch', String(v.epoch)], ['answered', `${resp.this_update} (${ago(now - thisU)})`],
      ['fresh until', `${resp.next_update} (${ago(now - nextU)})`]];
    if (v.status === 'revoked') rows.push(['revoked at', resp.revocation.revoked_at], ['reason', String(v.reason)]);
    facts('status-facts', rows);
    await showRecords(url, id);
  } catch (e) {
    verdict('status-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
  }
}

// --- witness view -------------------------------------------------------------------

async function loadWitness() {
  const url = base('witness-url');
  try {
    const info = await get(`${url}/v1/info`);
    const now = Date.now() / 1000;
    rowsInto('witness-logs', info.logs.map((l) => [l.origin, l.size ?? 'never cosigned',
      l.cosigned_at ? new Date(l.cosigned_at * 1000).toISOString() : '', l.cosigned_at ? ago(now - l.cosigned_at) : '']));
    const ref = await get(`${url}/v1/refusals`);
    rowsInto('witness-refusals', ref.refusals.map((r) => [r.time, r.origin ?? '', String(r.status), r.reason]));
    verdict('witness-verdict', 'pass', `witness ${info.name}: ${info.logs.length} log(s) followed; verifier key ${info.verifier_key}`);
  } catch (e) {
    verdict('witness-verdict', 'fail', `FAILED: ${reasonOf(e)}`);
  }
}

// --- wiring -------------------------------------------------------------------------

async function main() {
  $('log-url').value = params.get('log') || here;
  $('registry-url').value = params.get('registry') || here;
  $('witness-url').value = params.get('witness') || here;
  $('policy').addEventListener('input', () => { $('policy').dataset.edited = '1'; });
  $('log-form').addEventListener('submit', (e) => { e.preventDefault(); loadLog(); });
  $('entry-form').addEventListener('submit', (e) => { e.preventDefault(); lookUpEntry(); });
  $('bundle-check').addEventListener('click', () => checkBundle());
  $('registry-form').addEventListener('submit', (e) => { e.preventDefault(); checkStatus(); });
  $('witness-form').addEventListener('submit', (e) => { e.preventDefault(); loadWitness(); });
  droppable('receipt-drop', 'entry-receipt');
  droppable('bundle-drop', 'bundle-text');
  if (params.get('index')) $('entry-index').value = params.get('index');
  // Which services answer here: load what there is.
  const kind = await get(`${$('log-url').value}/v1/info`).then((i) => i, () => null);
  if (kind && 'verifier_key' in kind && 'published' in kind) {
    await loadLog();
    setInterval(() => { get(`${base('log-url')}/checkpoint`, 'text').then(showCheckpoint, () => {}); }, 5000);
    if (params.get('index')) await lookUpEntry();
  }
  if (params.get('registry') || (kind && 'status_service' in kind)) loadRegistry().catch(() => {});
  if (params.get('witness') || (kind && 'identity' in kind)) await loadWitness();
  document.body.dataset.ready = '1';
}
main().catch((e) => { document.body.dataset.ready = 'error'; verdict('log-verdict', 'fail', `FAILED: ${reasonOf(e)}`); });
