// Bundle check: `oap-log verify` in the page, one verdict per file. Files chosen or dropped
// are listed (each can be removed; Clear empties everything) and checked only when asked.
// A file is a .tlog-proof or an oap-anchors/v1 file (one proof per log: k of them must hold,
// k from the pinned policies' `logs <k>`); with a receipt, each of its signatures is a row
// (OK / INCOMPLETE / FAILED, as `oap-log verify` exits 0 / 3 / 1); DID documents pasted here
// stand for `--did-document`.
import * as oap from '../../lib/index.js';
import { $, h, fill, reasonOf } from '../dom.js';
import { show, running, idle, wrongInput, checkLength } from '../verdict.js';
import { app } from '../services.js';
import { anchorVerdict } from '../anchoring.js';

const files = []; // [{name, text}]
const MAX_TEXT = 1024 * 1024; // characters of a pasted bundle, receipt, salt or DID documents

/** Is `text` a .tlog-proof or an anchors file at all (its evidence is then checked, and may fail)? */
const isProofFile = (text) => text.startsWith('c2sp.org/tlog-proof@v1\n') || (oap.isAnchorsFile(text) && text.includes('oap-anchors/v1'));

export function init() {
  $('bundle-files').addEventListener('change', async (e) => { await take([...e.target.files]); e.target.value = ''; });
  $('bundle-check').addEventListener('click', () => { check(); });
  $('bundle-clear').addEventListener('click', clearAll);
  const zone = $('bundle-drop');
  zone.addEventListener('dragover', (e) => e.preventDefault());
  zone.addEventListener('drop', (e) => { e.preventDefault(); take([...e.dataTransfer.files]); });
}

export function render() { list(); }

function clearAll() {
  files.length = 0;
  for (const id of ['bundle-text', 'bundle-receipt', 'bundle-salt', 'bundle-dids']) $(id).value = '';
  app.documents = [];
  list();
  fill('bundle-results');
  idle('bundle-verdict', 'no bundle checked');
}

function list() {
  fill('bundle-list', files.map((f, i) => h('li', {}, h('span', { class: 'mono', text: f.name }), ' ',
    h('button', { type: 'button', class: 'small', text: 'remove', attrs: { 'aria-label': `remove ${f.name}` },
      on: { click: () => { files.splice(i, 1); list(); } } }))));
}

/** Files chosen or dropped: bundles, receipts and salts, told apart by name and content. */
async function take(chosen) {
  const notes = [];
  for (const f of chosen) {
    const text = await f.text();
    if (f.name.endsWith('.salt.json')) $('bundle-salt').value = text;
    else if (isProofFile(text)) files.push({ name: f.name, text });
    else if (f.name.endsWith('.did.json') || /"@context"[\s\S]*"verificationMethod"/.test(text)) $('bundle-dids').value += (($('bundle-dids').value.trim() ? '\n' : '') + text.trim());
    else if (f.name.endsWith('.json')) $('bundle-receipt').value = text;
    else if (f.name.endsWith('.policy') || /^(#.*\n|\s*\n)*log /.test(text)) notes.push(`${f.name} is a policy: pin it under Trust`);
    else notes.push(`${f.name} is not a .tlog-proof bundle`);
  }
  list();
  if (notes.length) idle('bundle-verdict', notes.join('; '));
}

/** The DID documents pasted (one JSON object, a list, or several objects one after another). */
export function documentsIn(text) {
  const t = text.trim();
  if (!t) return [];
  const out = [];
  for (const part of t.startsWith('[') ? [t] : t.split(/\n(?=\{)/)) {
    const v = oap.parseJSON(part, { strict: false });
    for (const d of Array.isArray(v) ? v : [v]) {
      if (!d || typeof d !== 'object' || typeof d.id !== 'string') throw new Error('a DID document is a JSON object with an id');
      out.push(d);
    }
  }
  return out;
}

async function verdict(item, receiptText, saltText, documents) {
  return anchorVerdict(item.text, { receiptText, saltText, documents });
}

/** What was given, before anything is checked: a mistake here is said as one (wrongInput),
 * never as a failed proof. -> the reason, or null. */
function inputMistake(items, receipt, salt) {
  try {
    for (const [id, what] of [['bundle-text', 'the pasted bundle'], ['bundle-receipt', 'the receipt'], ['bundle-salt', 'the salt'],
      ['bundle-dids', 'the DID documents']]) checkLength($(id).value, what, MAX_TEXT);
  } catch (e) { return e.reason; }
  if (!items.length) return 'give a .tlog-proof bundle (or an .anchors.json file) to check';
  if ((receipt || salt) && items.length !== 1)
    return `a receipt and a salt are checked against one bundle at a time, and ${items.length} are given: remove all but the one that anchors it`;
  if (salt && !receipt) return 'a salt opens a commitment to a receipt: give the receipt too';
  const pasted = items.find((x) => x.name === 'pasted bundle');
  if (pasted && !isProofFile(pasted.text)) return 'the pasted text is not a .tlog-proof bundle (its first line must be c2sp.org/tlog-proof@v1) nor an anchors file';
  for (const [text, what] of [[receipt, 'the receipt'], [salt, 'the salt file']]) {
    if (!text) continue;
    try { oap.parseJSON(text, { strict: false }); } catch (e) { return `${what} is not JSON: ${reasonOf(e)}`; }
  }
  return null;
}

async function check() {
  running('bundle-verdict');
  const items = [...files];
  if ($('bundle-text').value.trim()) items.unshift({ name: 'pasted bundle', text: $('bundle-text').value });
  const receipt = $('bundle-receipt').value.trim(), salt = $('bundle-salt').value.trim();
  const mistake = inputMistake(items, receipt, salt);
  if (mistake) { fill('bundle-results'); wrongInput('bundle-verdict', mistake); return; }
  let documents;
  try { documents = documentsIn($('bundle-dids').value); } catch (e) { fill('bundle-results'); wrongInput('bundle-verdict', `the DID documents: ${reasonOf(e)}`); return; }
  app.documents = documents;
  const out = [];
  const box = fill('bundle-results');
  for (const item of items) {
    const card = h('div', { class: 'verdict', data: { state: 'running', file: item.name }, attrs: { role: 'status' } });
    box.append(h('article', { class: 'result' }, h('h2', { class: 'file', text: item.name }), card));
    let v;
    try { v = await verdict(item, receipt || null, salt || null, documents); } catch (e) {
      v = { state: 'fail', headline: `FAILED: ${reasonOf(e)}`, checks: [] };
    }
    show(card, v);
    out.push(v.state);
  }
  const n = (st) => out.filter((s) => s === st).length;
  const bad = n('fail'), open = n('incomplete'), unpinned = n('unpinned');
  show('bundle-verdict', {
    state: bad ? 'fail' : open ? 'incomplete' : unpinned ? 'unpinned' : 'pass',
    headline: `${out.length - bad - open} verified, ${bad} failed${open ? `, ${open} not fully checked` : ''}`
      + `${unpinned ? ` (${unpinned} not against a pinned policy)` : ''}`,
  });
}
