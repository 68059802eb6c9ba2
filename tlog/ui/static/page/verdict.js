// A verdict people can read: one headline (errors first and short), then the checklist of
// what was checked against which key. The element's data-state is the verdict: pass (only
// against a pinned policy), unpinned, incomplete (a signature could not be checked), fail,
// revoked, suspended, unknown, input (the input was wrong: nothing was checked), running or
// idle. The red ✗ (fail) is kept for evidence that was checked and did not hold; a mistake in
// what was typed or given (an index the log does not have, a string far too long, two bundles
// for one receipt) is said as such, never as a failed proof.
import { h, fill } from './dom.js';

const MARK = { pass: '✓', fail: '✗', input: '✎', warn: '!', info: '•', skip: '–', unpinned: '!', incomplete: '!', revoked: '⊘', suspended: '‖',
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

/** What was typed or given is wrong (not the evidence): shown with wrongInput, not failed. */
export class InputError extends Error {
  constructor(reason) { super(reason); this.reason = reason; this.input = true; }
}
export const wrongInput = (target, reason) => show(target, { state: 'input', headline: `NOT CHECKED: ${reason}`,
  summary: 'nothing was verified or refuted; this is about the input, not the log' });
/** `e` shown as what it is: an input mistake, or a failure. */
export const failedOrInput = (target, e, reasonOf) => (e && e.input ? wrongInput(target, e.reason) : failed(target, reasonOf(e)));

/** The longest query a page field takes: a DID is at most 256 characters (tlog.formats.did),
 * a hash 71, a receipt or record id far less than this. */
export const MAX_QUERY = 1024;
/** An InputError when `text` (what the user typed in `what`) is longer than `max` characters. */
export function checkLength(text, what, max = MAX_QUERY) {
  if (text.length > max) throw new InputError(`${what} is ${text.length.toLocaleString('en-US')} characters long; `
    + `it takes at most ${max.toLocaleString('en-US')}`);
}
