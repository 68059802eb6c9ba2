// Bundle check: `oap-log verify` in the page, one verdict per file. Files chosen or dropped
// are listed (each can be removed; Clear empties everything) and checked only when asked.
import * as oap from '../../lib/index.js';
import { $, h, fill, reasonOf } from '../dom.js';
import { show, failed, running, idle } from '../verdict.js';
import { app } from '../services.js';
import { ENTRY_CHECKS, bundleContext, verdictOf } from '../checks.js';

const files = []; // [{name, text}]

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
  for (const id of ['bundle-text', 'bundle-receipt', 'bundle-salt']) $(id).value = '';
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
    else if (text.startsWith('c2sp.org/tlog-proof@v1\n')) files.push({ name: f.name, text });
    else if (f.name.endsWith('.json')) $('bundle-receipt').value = text;
    else if (f.name.endsWith('.policy') || /^(#.*\n|\s*\n)*log /.test(text)) notes.push(`${f.name} is a policy: pin it under Trust`);
    else notes.push(`${f.name} is not a .tlog-proof bundle`);
  }
  list();
  if (notes.length) idle('bundle-verdict', notes.join('; '));
}

/** The verdict of one bundle, against the pin for its log (or, for the loaded log only,
 * what it says about itself), and consistent with what this browser saw of that log. */
async function verdict(item, receiptText, saltText) {
  const b = oap.parseProofBundle(item.text);
  const origin = oap.parseCheckpoint(oap.parseNote(b.checkpoint).text).origin;
  const ours = app.logInfo && app.logInfo.origin === origin;
  const ctx = await bundleContext(app.trust, b, { served: ours ? app.served : null, logUrl: ours ? app.log : null,
    receiptText, saltText });
  return verdictOf(ENTRY_CHECKS, ctx, `index ${b.index} in ${origin} at size ${ctx.cp.size}`);
}

async function check() {
  running('bundle-verdict');
  const items = [...files];
  if ($('bundle-text').value.trim()) items.unshift({ name: 'pasted bundle', text: $('bundle-text').value });
  const receipt = $('bundle-receipt').value.trim(), salt = $('bundle-salt').value.trim();
  if (!items.length) { failed('bundle-verdict', 'give a .tlog-proof bundle'); return; }
  if ((receipt || salt) && items.length !== 1) { failed('bundle-verdict', 'a receipt and a salt are checked against one bundle at a time'); return; }
  if (salt && !receipt) { failed('bundle-verdict', 'a salt opens a commitment to a receipt: give the receipt too'); return; }
  const out = [];
  const box = fill('bundle-results');
  for (const item of items) {
    const card = h('div', { class: 'verdict', data: { state: 'running', file: item.name }, attrs: { role: 'status' } });
    box.append(h('article', { class: 'result' }, h('h2', { class: 'file', text: item.name }), card));
    let v;
    try { v = await verdict(item, receipt || null, salt || null); } catch (e) {
      v = { state: 'fail', headline: `FAILED: ${reasonOf(e)}`, checks: [] };
    }
    show(card, v);
    out.push(v.state);
  }
  const bad = out.filter((s) => s === 'fail').length, unpinned = out.filter((s) => s === 'unpinned').length;
  show('bundle-verdict', {
    state: bad ? 'fail' : unpinned ? 'unpinned' : 'pass',
    headline: `${out.length - bad} verified, ${bad} failed${unpinned ? ` (${unpinned} not against a pinned policy)` : ''}`,
  });
}
