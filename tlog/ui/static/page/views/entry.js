// One entry (?view=entry&index=N, &leaf=…, &receipt_hash=…): looked up, its inclusion proof
// fetched, and every part checked here: the leaf hash recomputed from its bytes, the proof,
// the checkpoint against the pinned policy, the entry's own signature.
import * as oap from '../../lib/index.js';
import { $, h, facts, fill, value, time, rawLink, copyButton, downloadButton, reasonOf } from '../dom.js';
import { show, running, idle, wrongInput, failedOrInput, checkLength, InputError } from '../verdict.js';
import { app } from '../services.js';
import { get, getOnce } from '../net.js';
import { go, href } from '../router.js';
import { ENTRY_CHECKS, bundleContext, verdictOf } from '../checks.js';
import { signerLink, commitLink, entryLink } from '../entrydata.js';
import { showConformance } from '../conformance.js';

const FIELDS = { index: 'entry-index', leaf: 'entry-leaf', receipt_hash: 'entry-receipt-hash' };
let generation = 0;
let pasted = null; // {hash, text}: a receipt pasted here; its signatures are checked when its entry is shown
const MAX_RECEIPT = 1024 * 1024; // characters of a pasted receipt.json

/** A lookup in the log whose 404 or 400 means the input names nothing the log holds (an index
 * past its size, a hash no entry has) or is malformed: said as an input mistake, not a failure. */
async function lookup(url, what, once = false) {
  try { return await (once ? getOnce(url) : get(url)); } catch (e) {
    if (e.status === 404) throw new InputError(e.said ? `${what} (${e.said})` : what);
    if (e.status === 400 && e.code === 'invalid_input') throw new InputError(e.said || 'the log refused this query as malformed');
    throw e;
  }
}

export function init() {
  $('entry-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const q = { view: 'entry' };
    for (const [k, id] of Object.entries(FIELDS)) if ($(id).value.trim()) q[k] = $(id).value.trim();
    const receipt = $('entry-receipt').value.trim();
    try { // a mistake in what was typed is said here, and never put in the page's URL
      for (const [k, what] of [['index', 'the index'], ['leaf', 'the leaf hash'], ['receipt_hash', 'the receipt hash']])
        if (q[k]) checkLength(q[k], what);
      checkLength(receipt, 'the receipt', MAX_RECEIPT);
    } catch (err) { wrongInput('entry-verdict', err.reason); return; }
    if (!q.index && !q.leaf && !q.receipt_hash && receipt) {
      try {
        q.receipt_hash = (await oap.receiptHash(receipt)).text;
        pasted = { hash: q.receipt_hash, text: receipt };
        $('entry-hash').textContent = `receipt hash, computed here (RFC 8785 JCS + SHA-256): ${q.receipt_hash}`;
      } catch (err) {
        wrongInput('entry-verdict', `the receipt does not parse: ${reasonOf(err)}`);
        return;
      }
    } else {
      $('entry-hash').textContent = '';
    }
    if (Object.keys(q).length === 1) { wrongInput('entry-verdict', 'give an index, a leaf hash, a receipt hash or a receipt'); return; }
    go(q);
  });
}

function clear() {
  $('entry-body').hidden = true; // no empty headings over a result that is not there
  facts('entry-facts', []);
  for (const id of ['entry-json', 'entry-proof', 'entry-links', 'entry-proof-actions', 'entry-conformance']) fill(id);
}

export async function render(params) {
  const mine = ++generation;
  for (const [k, id] of Object.entries(FIELDS)) $(id).value = params.get(k) || '';
  clear();
  const index0 = params.get('index'), leaf = params.get('leaf'), rh = params.get('receipt_hash');
  if (!index0 && !leaf && !rh) { idle('entry-verdict', 'nothing looked up'); return; }
  if (!app.log) { wrongInput('entry-verdict', 'no log to look in: give its URL (Trust, Services)'); return; }
  running('entry-verdict');
  const url = app.log;
  try {
    for (const [v, what] of [[index0, 'the index'], [leaf, 'the leaf hash'], [rh, 'the receipt hash']]) if (v) checkLength(v, what);
    let index = index0, also = [];
    if (!index && leaf) index = String((await lookup(`${url}/v1/entries:lookup?leaf_hash=${encodeURIComponent(leaf)}`, 'the log holds no entry with this leaf hash')).index);
    if (!index && rh) {
      const found = await lookup(`${url}/v1/entries:lookup?receipt_hash=${encodeURIComponent(rh)}`, 'the log holds no entry anchoring this receipt hash');
      index = String(found.receipts[0].index);
      also = found.receipts.slice(1).map((x) => x.index);
    }
    if (!/^(0|[1-9][0-9]{0,18})$/.test(index)) throw new InputError(`an index is a decimal number with no sign or leading zero, not ${JSON.stringify(index)}`);
    const resp = await lookup(`${url}/v1/entries/${index}`, 'the log holds no such entry', true);
    const checked = await oap.verifyEntryResponse(resp); // the leaf hash is recomputed from the bytes
    const proof = await get(`${url}/v1/proof/inclusion?index=${index}`);
    if (mine !== generation) return;
    const bundle = { index: BigInt(index), proof: proof.inclusion_proof.map((x) => oap.b64decHash(x)), checkpoint: proof.checkpoint, extra: checked.bytes };
    const receiptText = rh && pasted && pasted.hash === rh.toLowerCase() ? pasted.text : null;
    const ctx = await bundleContext(app.trust, bundle, { entry: checked.bytes, served: app.served, logUrl: url, live: true,
      servedKey: app.logInfo ? app.logInfo.verifier_key : null, receiptHash: rh && !receiptText ? rh.toLowerCase() : null,
      receiptText, documents: app.documents });
    const v = await verdictOf(ENTRY_CHECKS, ctx, `entry ${index} is in ${ctx.cp.origin} at size ${ctx.cp.size}`);
    if (mine !== generation) return;
    show('entry-verdict', v);
    $('entry-body').hidden = false;
    const entry = checked.entry, text = oap.formatProofBundle(bundle);
    facts('entry-facts', [
      ['index', String(index)], ['type', entry.type], ['leaf hash', value(oap.b64enc(checked.leafHash), 'leaf hash')],
      ['logged at', resp.logged_at ? time(resp.logged_at) : h('span', { class: 'muted', text: 'the log records no time for this entry type' })],
      ['claimed time', entry.timestamp ? [time(entry.timestamp, { age: false }), ' (the receipt\'s own claim, not checked)'] : undefined],
      ['signer', typeof entry.signer === 'string' ? signerLink(entry.signer) : undefined],
      ['receipt hash', entry.receipt_hash ? value(entry.receipt_hash, 'receipt hash') : undefined],
      ['receipt id', entry.receipt_id || undefined],
      ['commitment', entry.commitment ? value(entry.commitment, 'commitment') : undefined],
      ['registry commit', entry.type === 'registry' ? [commitLink(entry.seq, entry.commit, `seq ${entry.seq}`), ' ', value(entry.commit, 'commit')] : undefined],
      ['also anchored at', also.length ? also.map((i, k) => [k ? ', ' : '', entryLink(i)]) : undefined],
    ]);
    fill('entry-links', rawLink(`${url}/v1/entries/${index}`, 'raw entry'), ' ', rawLink(`${url}/v1/proof/inclusion?index=${index}`, 'raw proof'), ' ',
      h('a', { href: href({ view: 'entries', before: (BigInt(index) + 1n).toString() }), text: 'its neighbours' }));
    $('entry-json').textContent = JSON.stringify(resp.entry, null, 2);
    if (entry.type === 'conformance' && entry.receipt) await showConformance('entry-conformance', entry.receipt, { documents: app.documents });
    else fill('entry-conformance');
    $('entry-proof').textContent = text;
    fill('entry-proof-actions', copyButton(text, 'proof bundle'), ' ', downloadButton(text, `entry-${index}.tlog-proof`, 'download .tlog-proof'));
  } catch (e) {
    if (mine === generation) failedOrInput('entry-verdict', e, reasonOf);
  }
}
