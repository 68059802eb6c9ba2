// Reads from the services. An error names the URL and, for an OAP error body, its code and
// message. Immutable answers (entries, full tiles, entry bundles) are kept for the session
// so that paging back and forth costs nothing.
import { reasonOf } from './dom.js';

const immutable = new Map();
const MAX_KEPT = 2000;

/** GET `url` as json, text or bytes. `fresh`: revalidate with the server (Cache-Control:
 * no-cache), for answers that may be cached until they expire but can change before (a
 * status answer or a status list after a kill switch, §6.1 Freshness). */
export async function get(url, kind = 'json', { fresh = false } = {}) {
  let r;
  try {
    r = await fetch(url, { headers: kind === 'json' ? { Accept: 'application/json' } : {}, referrerPolicy: 'no-referrer',
      ...(fresh ? { cache: 'no-cache' } : {}) });
  } catch (e) {
    throw new Error(`cannot reach ${url} (${reasonOf(e)})`);
  }
  if (!r.ok) {
    let msg = `HTTP ${r.status}`, code = null, said = null;
    try {
      const j = await r.json();
      if (j && j.error) { msg = `HTTP ${r.status} ${j.error}: ${j.message}`; code = String(j.error); said = String(j.message); }
    } catch (_) { /* not JSON */ }
    const err = new Error(`${url}: ${msg}`);
    err.status = r.status;
    err.code = code; // the OAP error code (App. B), and the service's own sentence
    err.said = said;
    throw err;
  }
  if (kind === 'json') return r.json();
  if (kind === 'bytes') return new Uint8Array(await r.arrayBuffer());
  return r.text();
}

/** GET once per session: for answers that never change (a tile, an entry). */
export function getOnce(url, kind = 'json') {
  let p = immutable.get(url);
  if (!p) {
    if (immutable.size > MAX_KEPT) immutable.clear();
    p = get(url, kind);
    p.catch(() => immutable.delete(url));
    immutable.set(url, p);
  }
  return p;
}

/** A tile reader's fetch for the log at `base`: full tiles are immutable; partial ones are
 * too (a partial tile of width W never changes; a wider one has another path). */
export const tileFetcher = (base) => (path) => getOnce(`${base}/${path}`, 'bytes');

export const trimUrl = (u) => String(u || '').trim().replace(/\/+$/, '');
/** A DID or id in a URL path: percent-encoded, colons kept (as the services route them). */
export const pathPart = (s) => encodeURIComponent(s).replace(/%3A/gi, ':');
