// Entries read the way any C2SP client reads them, from static files: entry bundles for the
// bytes, hash tiles for the proofs. Each entry of a page is verified against the checkpoint:
// its leaf hash is recomputed from its bytes and proven included with a proof built from the
// tiles. And how an entry is summed up in a list, with links to what it names.
import * as oap from '../lib/index.js';
import { TileTree } from '../lib/tilereader.js';
import { getOnce, tileFetcher } from './net.js';
import { h, value, reasonOf } from './dom.js';
import { href } from './router.js';

const WIDTH = 256n;

/** Entries lo..hi-1 of the tree of checkpoint `cp` (BigInt size and root), newest first:
 * [{index, bytes, entry (or null), error (or null)}], and whether the tiles lead to the root. */
export async function readEntries(logUrl, cp, lo, hi) {
  const size = cp.size;
  lo = BigInt(lo); hi = BigInt(hi);
  if (hi > size) hi = size;
  const out = [];
  if (lo >= hi) return { rows: out, rootOk: true };
  const full = size / WIDTH;
  const bundles = new Map();
  for (let n = lo / WIDTH; n <= (hi - 1n) / WIDTH; n++) {
    const width = n < full ? Number(WIDTH) : Number(size % WIDTH);
    const data = await getOnce(`${logUrl}/${oap.entriesPath(n, width)}`, 'bytes');
    const items = oap.parseEntryBundle(data);
    if (items.length !== width) throw new oap.FormatError(`entry bundle ${n} holds ${items.length} entries, not ${width}`);
    bundles.set(n, items);
  }
  const tree = new TileTree(size, tileFetcher(logUrl));
  const root = await tree.root();
  const rootOk = oap.bytesEqual(root, cp.root);
  for (let i = hi - 1n; i >= lo; i--) {
    const bytes = bundles.get(i / WIDTH)[Number(i % WIDTH)];
    const row = { index: i, bytes, entry: null, error: null };
    try {
      if (!rootOk) throw new oap.VerificationError("the log's tiles do not lead to the checkpoint root");
      await oap.verifyInclusion(i, size, await oap.leafHash(bytes), await tree.inclusionProof(i), cp.root);
    } catch (e) {
      row.error = reasonOf(e);
    }
    try { row.entry = (await oap.decodeEntry(bytes)).entry; } catch (e) { row.entry = null; row.decodeError = reasonOf(e); }
    out.push(row);
  }
  return { rows: out, rootOk };
}

// --- how entries are shown -------------------------------------------------------------------

export const entryLink = (index, text = String(index)) => h('a', { href: href({ view: 'entry', index: String(index) }), text });
export const signerLink = (did) => value(did, 'signer', { link: { href: href({ view: 'search', q: did }) } });
export const commitLink = (seq, commit, text) => h('a', { href: href({ view: 'commit', seq: String(seq), commit }), text });
export const principalLink = (id, text = id) => h('a', { href: href({ view: 'principal', id }), text, class: 'mono' });

/** What an entry anchors, as nodes with links. */
export function summary(entry) {
  if (!entry) return 'not an OAP entry';
  if (entry.type === 'receipt') {
    return [value(entry.receipt_hash, 'receipt hash', { link: { href: href({ view: 'search', q: entry.receipt_hash }) } }),
      entry.receipt_id ? [' ', h('span', { class: 'mono', text: entry.receipt_id })] : null];
  }
  if (entry.type === 'commitment') return value(entry.commitment, 'commitment');
  if (entry.type === 'registry') {
    return [commitLink(entry.seq, entry.commit, `registry commit ${entry.seq}`), ' ',
      value(String(entry.commit), 'commit')];
  }
  if (entry.type === 'conformance') return ['conformance receipt ', h('span', { class: 'mono', text: String(entry.receipt && entry.receipt.id) })];
  return entry.type;
}

export const signerOf = (entry) => (entry && typeof entry.signer === 'string' ? signerLink(entry.signer) : '');
export const claimedTime = (entry) => (entry && typeof entry.timestamp === 'string' ? entry.timestamp : null);
