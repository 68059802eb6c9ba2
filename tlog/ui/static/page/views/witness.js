// The witnesses (?view=witness&witness=<url>): the ones the log names, whether each cosigned
// the log's latest checkpoint; and one witness's own view: the logs it follows (its latest
// cosigned checkpoint of each, checked here) and the requests it refused.
import * as oap from '../../lib/index.js';
import { $, h, rows, facts, time, value, rawLink, reasonOf } from '../dom.js';
import { show, failed, running, idle } from '../verdict.js';
import { app } from '../services.js';
import { get, trimUrl } from '../net.js';
import { href } from '../router.js';
import { currentHead } from '../head.js';

const isoOf = (ts) => new Date(Number(ts) * 1000).toISOString().replace('.000Z', 'Z');
let generation = 0;

export async function render(params) {
  const mine = ++generation;
  const head = app.log ? await currentHead() : null;
  const cos = new Map(((head && head.ctx && head.ctx.cosignatures) || []).map((c) => [c.witness, c]));
  const known = [...app.witnesses];
  const chosen = trimUrl(params.get('w') || app.witness);
  if (chosen && !known.some((w) => w.url === chosen)) known.push({ name: '(not named by the log)', url: chosen });
  rows('witness-list', known.map((w) => {
    const c = cos.get(w.name);
    return { state: c && c.state === 'verified' ? (head.ctx.pinned ? 'pass' : 'unpinned') : '', cells: [w.name,
      h('a', { href: href({ view: 'witness', w: w.url }), text: w.url, attrs: w.url === chosen ? { 'aria-current': 'true' } : {} }),
      c && c.vkey ? value(c.vkey, `key of ${w.name}`) : '—',
      c ? (c.state === 'verified' ? ['cosigned, ', time(isoOf(c.ts))] : c.state === 'absent' ? 'no cosignature' : c.state) : 'not in the policy'] };
  }));
  if (!known.length) rows('witness-list', [['', 'the log names no witness; give one with ?witness=<url>', '', '']]);
  if (!chosen) { idle('witness-verdict', 'no witness selected'); return; }
  running('witness-verdict');
  $('witness-name').textContent = `Witness at ${chosen}`;
  try {
    const info = await get(`${chosen}/v1/info`);
    if (mine !== generation) return;
    facts('witness-facts', [['name', info.name], ['key', value(info.verifier_key, 'witness key')], ['identity', info.identity ? value(info.identity, 'identity') : '—'],
      ['raw', rawLink(`${chosen}/v1/info`)]]);
    const out = [];
    let bad = 0;
    for (const l of info.logs) {
      if (l.size === null) { out.push([l.origin, 'never cosigned', '', '']); continue; }
      try { // the witness's own copy: the log's signature and this witness's cosignature, checked here
        const note = await get(`${chosen}${l.checkpoint_path}`, 'text');
        const logKey = await oap.parseVkey(l.vkey);
        const { note: parsed } = await oap.openNote(note, [logKey]);
        const cp = oap.parseCheckpoint(parsed.text);
        const [c] = await oap.verifyWitnessCosignature(note, info.verifier_key);
        out.push({ state: app.trust.pinFor(l.origin) ? 'pass' : 'unpinned', cells: [l.url ? h('a', { href: href({ view: 'log', log: l.url }), text: l.origin }) : l.origin, cp.size.toString(),
          time(isoOf(c.timestamp)), `verified: signed by ${logKey.name}, cosigned by ${c.name}`] });
      } catch (e) {
        bad++;
        out.push({ state: 'fail', cells: [l.origin, String(l.size), '', `FAILED: ${reasonOf(e)}`] });
      }
    }
    rows('witness-logs', out);
    const ref = await get(`${chosen}/v1/refusals`);
    rows('witness-refusals', ref.refusals.map((x) => [time(x.time, { age: false }), x.origin ?? '', String(x.status), x.reason]));
    // a witness's own statement about itself: its cosignatures verify under the key it names;
    // whether that key is one to trust is the policy's business (Log view), so this is never green
    const named = [];
    for (const l of info.logs) {
      const pin = app.trust.pinFor(l.origin);
      if (!pin) continue;
      for (const w of oap.parsePolicy(pin.text).witnesses.values()) if (w.vkey === info.verifier_key) named.push(`${w.name} for ${l.origin}`);
    }
    show('witness-verdict', { state: bad ? 'fail' : named.length ? 'pass' : 'info', headline: bad ? `FAILED: ${bad} log(s) did not verify`
      : `witness ${info.name}: ${info.logs.length} log(s) followed`, summary: named.length
      ? `its cosignatures verified with its key, which the pinned policy names (witness ${named.join(', ')})`
      : `its cosignatures checked against the key it names itself (${info.verifier_key}), which no pinned policy names` });
  } catch (e) {
    if (mine === generation) failed('witness-verdict', reasonOf(e));
  }
}
