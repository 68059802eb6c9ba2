// The log's latest checkpoint, checked when the page opens and every few seconds after:
// against the pinned policy (or, unpinned, the log's own), and against the last checkpoint
// this browser saw from that log (consistency, from tiles). Views read app.head.
import * as oap from '../lib/index.js';
import { app } from './services.js';
import { get } from './net.js';
import { CHECKPOINT_CHECKS, checkpointContext, verdictOf } from './checks.js';

export const POLL_MS = 5000;
const listeners = [];
let pending = null, poller = null;

export function onHead(fn) { listeners.push(fn); }

/** Read and judge the log's checkpoint now (one read at a time); listeners hear of a change. */
export function refreshHead({ force = false } = {}) {
  if (!app.log) return Promise.resolve(null);
  if (pending) return pending;
  pending = (async () => {
    try {
      const note = await get(`${app.log}/checkpoint`, 'text');
      if (!force && app.head && app.head.note === note && !app.head.error) return app.head;
      const ctx = await checkpointContext(app.trust, note, { served: app.served, logUrl: app.log, live: true,
        servedKey: app.logInfo ? app.logInfo.verifier_key : null });
      const verdict = await verdictOf(CHECKPOINT_CHECKS, ctx,
        `checkpoint of ${ctx.cp.origin} at size ${ctx.cp.size}`);
      app.head = { note, ctx, verdict, cp: ctx.cp, at: new Date(), error: null };
    } catch (e) {
      app.head = { note: null, ctx: null, verdict: null, cp: null, at: new Date(), error: e };
    } finally {
      pending = null;
    }
    for (const fn of listeners) fn(app.head);
    return app.head;
  })();
  return pending;
}

/** The latest head, read first if none was. */
export async function currentHead() {
  return app.head || refreshHead();
}

/** A head the views can verify against: checked (pinned or not), and not failed. */
export const usable = (head) => head && head.ctx && !head.ctx.cpError;

export function startPolling() {
  if (poller !== null) clearInterval(poller);
  poller = app.log ? setInterval(() => { refreshHead(); }, POLL_MS) : null;
}

export const rootText = (cp) => oap.b64enc(cp.root);
