// A verdict people can read: one headline (errors first and short), then the checklist of
// what was checked against which key. The element's data-state is the verdict: pass (only
// against a pinned policy), unpinned, incomplete (a signature could not be checked), fail,
// revoked, suspended, unknown, running or idle.
import { h, fill } from './dom.js';

const MARK = { pass: '✓', fail: '✗', warn: '!', info: '•', skip: '–', unpinned: '!', incomplete: '!', revoked: '⊘', suspended: '‖',
  unknown: '?', running: '…', idle: '' };
const SAID = { pass: 'passed', fail: 'failed', warn: 'warning', info: 'note', skip: 'not checked' };

/** Show `v` ({state, headline, summary?, checks?}) in the verdict element `target`. */
export function show(target, v) {
  const e = typeof target === 'string' ? document.getElementById(target) : target;
  e.dataset.state = v.state;
  const head = h('p', { class: 'headline' }, h('span', { class: 'mark', attrs: { 'aria-hidden': 'true' }, text: MARK[v.state] || '' }),
    h('strong', { text: v.headline }), v.summary ? [' ', h('span', { class: 'summary' }, v.summary)] : null);
  const list = v.checks && v.checks.length ? h('ul', { class: 'checks', attrs: { 'aria-label': 'checks' } },
    v.checks.map((c) => h('li', { data: { state: c.state, check: c.id || '' } },
      h('span', { class: 'mark', attrs: { 'aria-hidden': 'true' }, text: MARK[c.state] || '' }),
      h('span', { class: 'body' }, h('span', { class: 'sr-only', text: `${SAID[c.state] || c.state}: ` }),
        h('strong', { text: c.label }), c.detail && c.detail.length ? [' ', h('span', { class: 'detail' }, c.detail)] : null)))) : null;
  fill(e, head, list, v.extra || null);
  return e;
}

export const running = (target, text = 'checking…') => show(target, { state: 'running', headline: text });
export const idle = (target, text) => show(target, { state: 'idle', headline: text });
export const failed = (target, reason) => show(target, { state: 'fail', headline: `FAILED: ${reason}` });
