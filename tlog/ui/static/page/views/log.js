// The log view: its checkpoint checked (against the pinned policy, and against what this
// browser saw before), each witness's cosignature, its size over time, its neighbours
// (registry, witnesses, mirrors) and its latest entries.
import * as oap from '../../lib/index.js';
import { $, h, facts, rows, value, time, rawLink, copyButton, downloadButton, fill, reasonOf, ago } from '../dom.js';
import { show, failed, running } from '../verdict.js';
import { app } from '../services.js';
import { currentHead, usable, POLL_MS } from '../head.js';
import { readEntries, entryLink, summary, signerOf } from '../entrydata.js';
import { get } from '../net.js';
import { href } from '../router.js';
import { CHECKPOINT_CHECKS, checkpointContext, verdictOf, proveConsistent } from '../checks.js';

const RECENT = 10;
const isoOf = (ts) => new Date(Number(ts) * 1000).toISOString().replace('.000Z', 'Z');
let recentFor = null;

export async function render() {
  if (!app.log) {
    failed('log-verdict', app.logError ? reasonOf(app.logError) : 'no log: give its URL (Trust, Services)');
    return;
  }
  const head = await currentHead();
  showHead(head);
}

/** Redraw from the latest head (also called by the poller). */
export function showHead(head) {
  if (!head) return;
  if (head.error) { failed('log-verdict', reasonOf(head.error)); return; }
  const { ctx, verdict, cp, note } = head;
  show('log-verdict', verdict);
  facts('log-facts', [
    ['origin', cp.origin], ['size', cp.size.toString()], ['root', value(oap.b64enc(cp.root), 'root hash')],
    ['log key', ctx.signerKey ? value(ctx.signerKey, 'log key') : app.logInfo ? value(app.logInfo.verifier_key, 'log key') : null],
    ['read', time(head.at.toISOString())],
    ['writes', writesFact(app.logInfo)],
  ]);
  fill('log-links', rawLink(`${app.log}/checkpoint`, 'raw checkpoint'), ' ', rawLink(`${app.log}/v1/info`, 'raw info'), ' ',
    copyButton(note, 'checkpoint'), ' ', downloadButton(note, 'checkpoint.txt', 'download checkpoint'));
  rows('cosignatures', (ctx.cosignatures || []).map((c) => ({
    state: c.state === 'verified' ? (ctx.pinned ? 'pass' : 'unpinned') : c.state === 'invalid' ? 'fail' : 'idle',
    kind: c.mirror ? 'mirror' : 'witness',
    cells: [c.witness === null ? '(not in the policy)' : c.mirror ? `mirror ${c.witness}` : c.witness,
      c.vkey ? value(c.vkey, `key of ${c.witness}`) : c.keyName,
      c.state === 'verified' ? (c.mirror ? 'verified (stored the entries)' : 'verified') : c.state === 'invalid' ? `INVALID${c.reason ? ': ' + c.reason : ''}` : c.state === 'absent' ? 'no cosignature' : 'not checked',
      c.ts === null ? '' : time(isoOf(c.ts))],
  })));
  drawGrowth(ctx);
  neighbours(head);
  if (recentFor !== note) {
    recentFor = note;
    showRecent(head).catch((e) => rows('recent', [['', '', `FAILED: ${reasonOf(e)}`, '']]));
  }
}

async function showRecent(head) {
  if (!usable(head)) { rows('recent', [['', '', 'the checkpoint did not verify: entries not shown', '']]); return; }
  const size = head.cp.size;
  const lo = size > BigInt(RECENT) ? size - BigInt(RECENT) : 0n;
  const { rows: got } = await readEntries(app.log, head.cp, lo, size);
  rows('recent', got.map((x) => ({ state: x.error ? 'fail' : '', cells: [entryLink(x.index), x.entry ? x.entry.type : '?',
    x.error ? `FAILED: ${x.error}` : summary(x.entry), signerOf(x.entry)] })));
}

/** The registry, the witnesses and the mirrors the log names, each with a link and a status. */
function neighbours(head) {
  const list = [];
  if (app.registry) list.push({ state: '', cells: ['registry', h('a', { href: href({ view: 'registry' }), text: app.registry }), 'see Registry'] });
  else list.push({ state: '', cells: ['registry', '—', 'the log names no registry'] });
  const cos = new Map(((head.ctx && head.ctx.cosignatures) || []).map((c) => [c.witness, c.state]));
  for (const w of app.witnesses) {
    const st = cos.get(w.name);
    list.push({ state: st === 'verified' ? (head.ctx.pinned ? 'pass' : 'unpinned') : '', cells: [`witness ${w.name}`,
      h('a', { href: href({ view: 'witness', w: w.url }), text: w.url }),
      st === 'verified' ? 'cosigned this checkpoint' : st === 'absent' ? 'no cosignature on this checkpoint' : st || 'not in the policy'] });
  }
  if (!app.witnesses.length) list.push({ state: '', cells: ['witnesses', '—', 'the log names no witness'] });
  for (const m of app.mirrors) {
    const cell = h('div', { class: 'verdict compact', data: { state: 'running' } });
    list.push({ state: '', cells: ['mirror', h('a', { href: m, text: m, target: '_blank', rel: 'noopener noreferrer' }), cell] });
    checkMirror(m, head, cell);
  }
  rows('neighbours', list);
}

/** A mirror's checkpoint: the log's signature and the mirror's cosignature, against the same
 * pin (checks.js mirrorPolicy: not the witnesses' quorum, which a mirror's copy does not
 * carry), and a consistency proof between the two, built from the tiles of the larger tree. */
export async function checkMirror(url, head, cell) {
  running(cell);
  try {
    const note = await get(`${url}/checkpoint`, 'text');
    const ctx = await checkpointContext(app.trust, note, { served: app.served, logUrl: url, live: false, mirror: url });
    const v = await verdictOf(CHECKPOINT_CHECKS, ctx, `mirror at size ${ctx.cp.size}`);
    if (v.state !== 'fail' && usable(head)) {
      const a = { size: ctx.cp.size, root: ctx.cp.root }, b = { size: head.cp.size, root: head.cp.root };
      try {
        await (a.size <= b.size ? proveConsistent(app.log, a, b) : proveConsistent(url, b, a));
        v.checks.push({ id: 'mirror-consistency', state: 'pass', label: 'consistent with the log', detail: [`sizes ${a.size} and ${b.size}`] });
      } catch (e) {
        v.checks.unshift({ id: 'mirror-consistency', state: 'fail', label: 'consistent with the log', detail: [reasonOf(e)] });
        v.state = 'fail';
        v.headline = `FAILED: the mirror and the log disagree: ${reasonOf(e)}`;
      }
    }
    show(cell, v);
  } catch (e) {
    failed(cell, reasonOf(e));
  }
}

// Size over time: the sizes this browser saw for this (origin, key), kept across visits.
function drawGrowth(ctx) {
  const c = $('growth'), g = c.getContext('2d');
  const hist = ctx.signerKey ? app.trust.history(ctx.origin, ctx.signerKey) : null;
  const pts = hist ? hist.sizes.map(([t, size]) => ({ t, size })) : [];
  g.clearRect(0, 0, c.width, c.height);
  if (!pts.length) { $('growth-text').textContent = 'no verified checkpoint seen yet'; return; }
  const css = getComputedStyle(document.documentElement);
  const fg = css.getPropertyValue('--muted').trim() || '#4a5568', line = css.getPropertyValue('--accent').trim() || '#2b6cb0';
  const grid = css.getPropertyValue('--border').trim() || '#cbd5e0';
  const left = 70, right = c.width - 10, top = 10, bottom = c.height - 22;
  const t0 = pts[0].t, t1 = Math.max(Date.now(), t0 + 1);
  const s0 = Math.min(...pts.map((p) => p.size)), s1 = Math.max(s0 + 1, ...pts.map((p) => p.size));
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (right - left);
  const y = (s) => bottom - ((s - s0) / (s1 - s0)) * (bottom - top);
  g.strokeStyle = grid;
  g.beginPath(); g.moveTo(left, top); g.lineTo(left, bottom); g.lineTo(right, bottom); g.stroke();
  g.fillStyle = fg;
  g.font = '11px sans-serif';
  g.fillText(String(s1), 4, top + 8);
  g.fillText(String(s0), 4, bottom);
  g.fillText(new Date(t0).toLocaleTimeString(), left, c.height - 6);
  const end = new Date(t1).toLocaleTimeString();
  g.fillText(end, right - g.measureText(end).width, c.height - 6);
  g.strokeStyle = line;
  g.lineWidth = 2;
  g.beginPath();
  pts.forEach((p, i) => {
    if (i === 0) g.moveTo(x(p.t), y(p.size));
    else { g.lineTo(x(p.t), y(pts[i - 1].size)); g.lineTo(x(p.t), y(p.size)); } // a step: the size held until it grew
  });
  g.lineTo(x(t1), y(pts[pts.length - 1].size));
  g.stroke();
  g.fillStyle = line;
  for (const p of pts) { g.beginPath(); g.arc(x(p.t), y(p.size), 3, 0, 2 * Math.PI); g.fill(); }
  $('growth-text').textContent = `${pts.length} size${pts.length === 1 ? '' : 's'} of ${ctx.origin} (key ${ctx.signerKey.split('+').slice(0, 2).join('+')}) `
    + `seen by this browser since ${new Date(t0).toISOString().replace(/\.\d+Z$/, 'Z')} (${ago((Date.now() - t0) / 1000)}): `
    + `from ${pts[0].size} to ${pts[pts.length - 1].size} entries, each new size proven consistent with the last (checked every ${POLL_MS / 1000} s)`;
}

// Whether the log takes entries, as its /v1/info says (unsigned: the registry's signed log list
// is the record a client follows, docs/architecture.md §3.8, §6.2); no row when it says nothing.
function writesFact(info) {
  if (!info || (!info.frozen && !info.accept_from && !info.accept_until)) return undefined;
  const successor = info.successor ? `; successor ${info.successor}` : '';
  if (info.frozen) return `FROZEN: this checkpoint is the last one it signs${successor}`;
  return `a temporal shard: entries from ${info.accept_from || 'its start'} until ${info.accept_until || 'further notice'}${successor}`;
}
