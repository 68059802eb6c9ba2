// Browse the log's entries, newest first, a page at a time (?view=entries&before=N): read from
// entry bundles and hash tiles only, and each entry proven included in the checkpoint.
import { $, h, rows, fill, reasonOf, time } from '../dom.js';
import { show, failed, running, wrongInput } from '../verdict.js';
import { app } from '../services.js';
import { currentHead } from '../head.js';
import { readEntries, entryLink, summary, signerOf, claimedTime } from '../entrydata.js';
import { href, go } from '../router.js';
import { extend } from '../checks.js';

export const PAGE = 100n;

export function init() {
  $('entries-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const at = $('entries-at').value.trim();
    if (!/^[0-9]{1,19}$/.test(at)) { wrongInput('entries-verdict', 'give an index (a decimal number)'); return; }
    go({ view: 'entries', before: (BigInt(at) + 1n).toString() });
  });
}

function pager(id, before, size) {
  const links = [];
  const link = (text, b, rel) => h('a', { href: href({ view: 'entries', before: b === null ? null : b.toString() }), text, rel });
  if (before < size) links.push(link('« Newest', null), ' ', link('‹ Newer', before + PAGE >= size ? null : before + PAGE, 'prev'), ' ');
  const lo = before > PAGE ? before - PAGE : 0n;
  links.push(h('span', { class: 'range', text: before > 0n ? `entries ${lo}–${before - 1n} of ${size}` : 'no entries' }));
  if (lo > 0n) links.push(' ', link('Older ›', lo, 'next'), ' ', link('Oldest »', size < PAGE ? size : PAGE));
  fill(id, links);
}

export async function render(params) {
  if (!app.log) { wrongInput('entries-verdict', 'no log to read: give its URL (Trust, Services)'); return; }
  running('entries-verdict', 'reading entry bundles and tiles…');
  const head = await currentHead();
  if (!head || head.error) { failed('entries-verdict', head ? reasonOf(head.error) : 'no checkpoint'); return; }
  const size = head.cp.size;
  let before = size;
  const raw = params.get('before');
  if (raw !== null) {
    if (!/^[0-9]{1,19}$/.test(raw)) { wrongInput('entries-verdict', 'before must be a decimal index'); return; }
    before = BigInt(raw) < size ? BigInt(raw) : size;
  }
  const lo = before > PAGE ? before - PAGE : 0n;
  pager('entries-pager', before, size);
  pager('entries-pager-bottom', before, size);
  try {
    const { rows: got, rootOk } = await readEntries(app.log, head.cp, lo, before);
    rows('entries-table', got.map((x) => ({ state: x.error ? 'fail' : '', cells: [entryLink(x.index), x.entry ? x.entry.type : '?',
      x.error ? `FAILED: ${x.error}` : summary(x.entry), signerOf(x.entry), claimedTime(x.entry) ? time(claimedTime(x.entry), { age: false }) : '—'] })));
    const bad = got.filter((x) => x.error);
    const range = got.length ? `entries ${lo}–${before - 1n}` : 'no entries';
    const v = extend(head.verdict, [
      { id: 'tiles', state: rootOk ? 'pass' : 'fail', label: 'tiles', detail: [rootOk ? `lead to the root of size ${size}` : 'do not lead to the checkpoint root'] },
      { id: 'inclusion', state: bad.length ? 'fail' : 'pass', label: `inclusion of ${got.length - bad.length} of ${got.length} entries`,
        detail: [bad.length ? `entry ${bad[0].index}: ${bad[0].error}` : 'each leaf hash recomputed from its bytes, each proof built from the tiles'] },
    ], `${range} of ${head.cp.origin} (size ${size})`);
    show('entries-verdict', v);
    $('entries-table').dataset.first = got.length ? got[got.length - 1].index.toString() : '';
  } catch (e) {
    failed('entries-verdict', reasonOf(e));
  }
}
