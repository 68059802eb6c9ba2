// Trust that the user controls. A result is green only when it was checked against a
// policy that was pinned: one the user pasted, loaded from a file or a URL, or accepted
// from a log on first use (TOFU), or one the operator shipped beside the page's files
// (trust.policy, worth what the page's own code is worth). A log's own /v1/policy is never
// more than "what the log says about itself".
//
// What this browser has seen is kept in localStorage: the pins per log origin, and per
// (origin, key) the last checkpoint seen and the sizes over time. Each new checkpoint is
// checked against the last one seen (checks.js, with a consistency proof from tiles);
// proof of an inconsistency is kept here as evidence until the user dismisses it.
import * as oap from '../lib/index.js';

const PREFIX = 'oap-explorer:v2:';
const MAX_SIZES = 500;

function load(name, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(PREFIX + name));
    return v && typeof v === 'object' ? v : fallback;
  } catch (_) { return fallback; }
}
function save(name, value) {
  try { localStorage.setItem(PREFIX + name, JSON.stringify(value)); } catch (_) { /* storage off or full */ }
}

/** How each kind of pin is named in verdicts. */
export const SOURCES = {
  pasted: 'the policy you pasted',
  file: 'the policy file you loaded',
  url: 'the policy you loaded from a URL',
  tofu: "the log's key, trusted on first use",
  operator: 'the policy shipped with this page by its operator',
};

/** The same, in a few words (the trust line under the navigation). */
export const SHORT = { pasted: 'your pasted policy', file: 'your policy file', url: 'your policy from a URL',
  tofu: 'trusted on first use', operator: "the operator's policy" };

/** The log keys (vkeys) a policy text names for `origin` (the key name is the origin). */
export function keysIn(text, origin) {
  try { return oap.parsePolicy(text).logs.map((l) => l.vkey).filter((k) => k.split('+')[0] === origin); } catch (_) { return []; }
}
export const originsIn = (text) => {
  try { return [...new Set(oap.parsePolicy(text).logs.map((l) => l.vkey.split('+')[0]))]; } catch (_) { return []; }
};

export class Trust {
  constructor() {
    this.pins = load('pins', {}); // origin -> {text, source, detail, at}
    this.seen = load('seen', {}); // origin -> vkey -> {first, last: {size, root, note, t}, sizes: [[t, size]], conflict}
    this.shipped = null; // {text, url, origins}
    this.policies = new Map(); // policy text -> Promise<TrustPolicy>
    this.events = new Map(); // alarms of this session (a key change), by id
    this.listeners = [];
  }

  onChange(fn) { this.listeners.push(fn); }
  emit() { for (const fn of this.listeners) fn(); }

  policyOf(text) {
    let p = this.policies.get(text);
    if (!p) {
      p = oap.TrustPolicy.fromText(text);
      p.catch(() => this.policies.delete(text));
      this.policies.set(text, p);
    }
    return p;
  }

  /** The operator's policy, shipped beside the page (`trust.policy`); absent is normal. */
  async loadShipped(url) {
    let r;
    try { r = await fetch(url, { cache: 'no-cache' }); } catch (_) { return null; }
    if (r.status !== 200) return null; // 204 from a service that ships none, 404 from a static host
    const text = await r.text();
    try { await this.policyOf(text); } catch (e) {
      this.events.set('shipped', { title: 'The trust policy shipped with this page does not parse',
        detail: `${url}: ${e.reason || e.message}. Nothing is checked against it.` });
      this.emit();
      return null;
    }
    this.shipped = { text, url, origins: originsIn(text) };
    this.emit();
    return this.shipped;
  }

  /** Pin a policy for every log it names; returns those origins. Throws if it does not parse. */
  async pin(text, source, detail = '') {
    await this.policyOf(text);
    const origins = originsIn(text);
    if (!origins.length) throw new Error('the policy names no log');
    const at = new Date().toISOString();
    for (const o of origins) this.pins[o] = { text, source, detail, at };
    save('pins', this.pins);
    for (const o of origins) this.events.delete(`key:${o}`);
    this.emit();
    return origins;
  }

  unpin(origin) {
    delete this.pins[origin];
    save('pins', this.pins);
    this.emit();
  }

  /** The pin that applies to a log origin: the user's own, else the operator's, else null. */
  pinFor(origin) {
    const own = this.pins[origin];
    if (own) return own;
    if (this.shipped && this.shipped.origins.includes(origin))
      return { text: this.shipped.text, source: 'operator', detail: this.shipped.url, at: null };
    return null;
  }

  async policyFor(origin) {
    const pin = this.pinFor(origin);
    return pin ? { pin, policy: await this.policyOf(pin.text) } : null;
  }

  /** Is `did` a registry key the pins of these log origins name (`registry` lines)? As
   * `oap-registry status --log-policy`: {pinned: the pin that names it} when one does;
   * {others: [dids]} when they name only other registries (the answer is then refused);
   * {} when they name none (the key the registry names itself: never green). */
  registryKey(did, origins) {
    const others = [];
    for (const o of origins) {
      const pin = this.pinFor(o);
      if (!pin) continue;
      let regs = [];
      try { regs = oap.parsePolicy(pin.text).registries; } catch (_) { regs = []; }
      if (regs.some((r) => r.did === did)) return { pinned: pin };
      for (const r of regs) if (!others.includes(r.did)) others.push(r.did);
    }
    return others.length ? { others } : {};
  }

  // --- what this browser has seen, per (origin, key) ---------------------------------------

  history(origin, vkey) { return (this.seen[origin] || {})[vkey] || null; }
  keysSeen(origin) { return Object.keys(this.seen[origin] || {}); }

  /** A checkpoint verified with `vkey` that is consistent with the last one seen (or the first). */
  record(origin, vkey, cp, note) {
    const byKey = (this.seen[origin] ??= {});
    const now = Date.now();
    const h = (byKey[vkey] ??= { first: now, last: null, sizes: [], conflict: null });
    const size = Number(cp.size);
    if (!h.last || cp.size >= BigInt(h.last.size)) {
      h.last = { size: cp.size.toString(), root: oap.b64enc(cp.root), note, t: now };
    }
    const prev = h.sizes[h.sizes.length - 1];
    if (!prev || prev[1] !== size) h.sizes.push([now, size]);
    if (h.sizes.length > MAX_SIZES) h.sizes.splice(0, h.sizes.length - MAX_SIZES);
    save('seen', this.seen);
  }

  /** Proof that a log showed two histories: kept until dismissed. */
  conflict(origin, vkey, evidence) {
    const byKey = (this.seen[origin] ??= {});
    const h = (byKey[vkey] ??= { first: Date.now(), last: null, sizes: [], conflict: null });
    if (!h.conflict) {
      h.conflict = { ...evidence, at: new Date().toISOString() };
      save('seen', this.seen);
      this.emit();
    }
  }

  dismissConflict(origin, vkey) {
    const h = this.history(origin, vkey);
    if (h) { h.conflict = null; save('seen', this.seen); }
    this.emit();
  }

  /** A key change seen in this session (the pinned or the last seen key differs). */
  keyChanged(origin, event) {
    const id = `key:${origin}`;
    const old = this.events.get(id);
    if (old && old.detail === event.detail) return;
    this.events.set(id, event);
    this.emit();
  }

  /** Every alarm to show: kept evidence of inconsistencies, then this session's events. */
  alarms() {
    const out = [];
    for (const [origin, byKey] of Object.entries(this.seen))
      for (const [vkey, h] of Object.entries(byKey))
        if (h && h.conflict) out.push({ kind: 'conflict', origin, vkey, ...h.conflict });
    for (const [id, e] of this.events) out.push({ kind: 'event', id, ...e });
    return out;
  }
  dismissEvent(id) { this.events.delete(id); this.emit(); }

  forgetHistory() {
    this.seen = {};
    save('seen', this.seen);
    this.emit();
  }
}
