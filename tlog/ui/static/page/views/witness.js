// The witnesses and mirrors (?view=witness&w=<url>): the ones the log and its policy name,
// whether each cosigned the log's latest checkpoint; and one witness's or mirror's own view:
// the logs it follows (its latest cosigned checkpoint of each, checked here) and, for a
// witness, the requests it refused. A mirror's copy is checked as the Log view checks it: the
// log's key and the mirror's cosignature against the pin, and consistent with the log.
import * as oap from '../../lib/index.js';
import { $, h, rows, facts, time, value, rawLink, reasonOf } from '../dom.js';
import { show, failed, running, idle } from '../verdict.js';
import { app } from '../services.js';
import { get, trimUrl } from '../net.js';
import { href } from '../router.js';
import { currentHead } from '../head.js';
import { checkMirror } from './log.js';

const isoOf = (ts) => new Date(Number(ts) * 1000).toISOString().replace('.000Z', 'Z');
let generation = 0;

/** The witnesses the log names, then the mirrors its policy names (`mirror` lines with a URL). */
function cosigners(head) {
  const known = app.witnesses.map((w) => ({ ...w, key: w.name }));
  const pol = head && head.ctx && head.ctx.policy ? head.ctx.policy.policy : null;
  if (pol) for (const w of pol.witnesses.values()) {
    if (w.mirror && w.url && !known.some((k) => k.url === trimUrl(w.url))) known.push({ name: `mirror ${w.name}`, url: trimUrl(w.url), key: w.name });
  }
  return known;
}

export async function render(params) {
  const mine = ++generation;
  const head = app.log ? await currentHead() : null;
  const cos = new Map(((head && head.ctx && head.ctx.cosignatures) || []).map((c) => [c.witness, c]));
  const known = cosigners(head);
  const chosen = trimUrl(params.get('w') || app.witness);
  if (chosen && !known.some((w) => w.url === chosen)) known.push({ name: '(not named by the log)', url: chosen, key: null });
  rows('witness-list', known.map((w) => {
    const c = w.key === null ? null : cos.get(w.key);
    return { state: c && c.state === 'verified' ? (head.ctx.pinned ? 'pass' : 'unpinned') : '', cells: [w.name,
      h('a', { href: href({ view: 'witness', w: w.url }), text: w.url, attrs: w.url === chosen ? { 'aria-current': 'true' } : {} }),
      c && c.vkey ? value(c.vkey, `key of ${w.name}`) : '—',
      c ? (c.state === 'verified' ? ['cosigned, ', time(isoOf(c.ts))] : c.state === 'absent' ? 'no cosignature' : c.state) : 'not in the policy'] };
  }));
  if (!known.length) rows('witness-list', [['', 'the log names no witness; give one with ?witness=<url>', '', '']]);
  $('witness-refusals-box').hidden = false;
  if (!chosen) { idle('witness-verdict', 'no witness selected'); return; }
  running('witness-verdict');
  $('witness-name').textContent = `Witness at ${chosen}`;
  try {
    const info = await get(`${chosen}/v1/info`);
    if (mine !== generation) return;
    const mirror = info.kind === 'mirror';
    $('witness-name').textContent = `${mirror ? 'Mirror' : 'Witness'} at ${chosen}`;
    facts('witness-facts', [['name', info.name], ['key', value(info.verifier_key, `${mirror ? 'mirror' : 'witness'} key`)],
      mirror ? ['copies', 'the logs below, served as tlog-tiles (C2SP tlog-mirror): its cosignature says it stored every entry']
        : ['identity', info.identity ? value(info.identity, 'identity') : '—'],
      ['raw', rawLink(`${chosen}/v1/info`)]]);
    const out = [];
    let bad = 0;
    for (const l of info.logs) {
      if (l.size === null) { out.push([l.origin, 'never cosigned', '', '']); continue; }
      const name = l.url ? h('a', { href: href({ view: 'log', log: l.url }), text: l.origin }) : l.origin;
      if (mirror && l.monitoring_prefix && head && head.cp && head.cp.origin === l.origin) {
        // the loaded log's copy: checked as the Log view checks its mirrors (pin, consistency)
        const cell = h('div', { class: 'verdict compact', data: { state: 'running' } });
        out.push({ cells: [name, [String(l.size), l.next_entry !== undefined ? ` (${l.next_entry} stored)` : ''],
          l.cosigned_at ? time(isoOf(l.cosigned_at)) : '', cell] });
        checkMirror(trimUrl(l.monitoring_prefix), head, cell).then(() => { if (cell.dataset.state === 'fail') markBad(); });
        continue;
      }
      try { // the witness's (or mirror's) own copy: the log's signature and its cosignature, checked here
        const note = await get(`${chosen}${l.checkpoint_path}`, 'text');
        const logKey = await oap.parseVkey(l.vkey);
        const { note: parsed } = await oap.openNote(note, [logKey]);
        const cp = oap.parseCheckpoint(parsed.text);
        const [c] = await oap.verifyWitnessCosignature(note, info.verifier_key);
        out.push({ state: app.trust.pinFor(l.origin) ? 'pass' : 'unpinned', cells: [name, cp.size.toString(),
          time(isoOf(c.timestamp)), `verified: signed by ${logKey.name}, cosigned by ${c.name}`] });
      } catch (e) {
        bad++;
        out.push({ state: 'fail', cells: [l.origin, String(l.size), '', `FAILED: ${reasonOf(e)}`] });
      }
    }
    rows('witness-logs', out);
    $('witness-refusals-box').hidden = mirror; // a mirror keeps no list of refusals
    if (!mirror) {
      const ref = await get(`${chosen}/v1/refusals`);
      rows('witness-refusals', ref.refusals.map((x) => [time(x.time, { age: false }), x.origin ?? '', String(x.status), x.reason]));
    }
    // its own statement about itself: its cosignatures verify under the key it names; whether
    // that key is one to trust is the policy's business (Log view), so this is green only
    // when a pinned policy names the key
    const named = [];
    for (const l of info.logs) {
      const pin = app.trust.pinFor(l.origin);
      if (!pin) continue;
      for (const w of oap.parsePolicy(pin.text).witnesses.values())
        if (w.vkey === info.verifier_key) named.push(`${w.mirror ? 'mirror' : 'witness'} ${w.name} for ${l.origin}`);
    }
    const what = mirror ? `mirror ${info.name}: ${info.logs.length} log(s) copied` : `witness ${info.name}: ${info.logs.length} log(s) followed`;
    const verdict = () => ({ state: bad ? 'fail' : named.length ? 'pass' : 'info', headline: bad ? `FAILED: ${bad} log(s) did not verify` : what,
      summary: named.length ? `its cosignatures verified with its key, which the pinned policy names (${named.join(', ')})`
        : `its cosignatures checked against the key it names itself (${info.verifier_key}), which no pinned policy names` });
    function markBad() { if (mine === generation) { bad++; show('witness-verdict', verdict()); } }
    show('witness-verdict', verdict());
  } catch (e) {
    if (mine === generation) failed('witness-verdict', reasonOf(e));
  }
}
