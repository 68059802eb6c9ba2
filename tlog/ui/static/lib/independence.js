// When a peer witness (or an auditor) is independent of the implementation it vouches for
// (OAP-CORE-1.0 §31), mirroring tlog/formats/independence.py: W is not independent of S when
// (1) W is S; (2) a registry key event of one names the other, or both name one controller;
// (3) S's DID document names W, W's names S, or both name the same DID or URI; (4) W holds
// key material S's document lists; (5) both are did:web on the same host, or one host is a
// subdomain of the other. What the page can check offline is rules 1, 4 and 5 (the DIDs and
// the keys of the documents it was given), as a log or a peer witness does. The same rules
// decide when two witnesses are one party (parties): they count once toward a level.
import { InvalidInput, pySorted } from './errors.js';
import { hex } from './b64.js';
import { publicFromDidKey } from './didkey.js';
import { ED25519_CURVE, splitDidUrl, uncompressedPoint, keyMaterial } from './diddoc.js';

export const RELATIONSHIPS = ['verificationMethod', 'authentication', 'assertionMethod', 'keyAgreement',
  'capabilityInvocation', 'capabilityDelegation'];
const MAX_ITEMS = 64;
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const items = (v) => (Array.isArray(v) ? v : [v]).slice(0, MAX_ITEMS);

/** Python's urllib.parse.unquote: %XX sequences as UTF-8 (bad bytes as U+FFFD), others kept. */
export function unquote(text) {
  if (!text.includes('%')) return text;
  return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => new TextDecoder('utf-8', { fatal: false })
    .decode(Uint8Array.from(run.slice(1).split('%'), (h) => parseInt(h, 16))));
}

/** The host of a did:web, lowercased, without its port; null for other DIDs. */
export function webHost(did) {
  if (!did.startsWith('did:web:')) return null;
  const host = unquote(splitDidUrl(did)[0].slice('did:web:'.length).split(':')[0]).toLowerCase();
  if (host.startsWith('[')) return host.split(']')[0] + ']';
  return host.includes(':') ? host.slice(0, host.lastIndexOf(':')) : host;
}

function didOf(ref, did) {
  if (typeof ref !== 'string' || !ref) return null;
  return ref.startsWith('#') ? did : splitDidUrl(ref)[0];
}

/** The DIDs and URIs a DID document names (independence.py names_in_document). */
export function namesInDocument(did, doc) {
  if (!isObj(doc)) return new Set();
  const out = new Set([did]);
  const refs = [doc.id, ...items(doc.controller)];
  for (const rel of RELATIONSHIPS) {
    for (const m of items(doc[rel])) {
      if (isObj(m)) refs.push(m.id, ...items(m.controller)); else refs.push(m);
    }
  }
  for (const r of refs) { const d = didOf(r, did); if (d !== null) out.add(d); }
  for (const a of items(doc.alsoKnownAs)) if (typeof a === 'string' && a) out.add(a);
  return out;
}

function keysInDocument(doc) {
  const out = new Set();
  if (!isObj(doc)) return out;
  for (const rel of RELATIONSHIPS) for (const m of items(doc[rel])) {
    const got = keyMaterial(m);
    if (got) out.add(`${got[0]}:${hex(got[1])}`);
  }
  return out;
}

/** The facts of `did` (independence.py principal): its names, its key material, its controllers. */
export function principal(did, { documents = [], keys = [], controllers = [] } = {}) {
  const names = new Set([did]), material = new Set();
  if (did.startsWith('did:key:')) {
    try { material.add(`${ED25519_CURVE}:${hex(publicFromDidKey(did))}`); } catch (e) { if (!(e instanceof InvalidInput)) throw e; }
  }
  for (const doc of documents) {
    for (const n of namesInDocument(did, doc)) names.add(n);
    for (const k of keysInDocument(doc)) material.add(k);
  }
  for (const k of keys) {
    const pub = k.curve === ED25519_CURVE ? k.public : uncompressedPoint(k.curve, k.public);
    if (pub) material.add(`${k.curve}:${hex(pub)}`);
  }
  return { did, names, keys: material, controllers: new Set(controllers) };
}

const hostsOf = (p) => new Set([p.did, ...p.names, ...p.controllers].map(webHost).filter(Boolean));
const within = (child, parent) => child.endsWith('.' + parent);
const common = (a, b) => pySorted([...a].filter((x) => b.has(x)));

/** Why `other` is not independent of `subject` (one sentence naming the rule), or null. */
export function relation(subject, other, { name = 'the subject' } = {}) {
  const s = subject.did, o = other.did;
  if (o === s) return `it is ${name} itself`;
  if (subject.controllers.has(o)) return `it is a controller of ${name} (a registry key event names it)`;
  if (other.controllers.has(s)) return `${name} is a controller of it (a registry key event names ${name})`;
  const c = common(subject.controllers, other.controllers);
  if (c.length) return `it and ${name} have the same controller ${c[0]} (registry key events)`;
  if (subject.names.has(o)) return `${name}'s DID document names it (verification method, relationship, controller or alsoKnownAs)`;
  if (other.names.has(s)) return `its DID document names ${name}`;
  const shared = common(subject.names, other.names);
  if (shared.length) return `its DID document and ${name}'s both name ${shared[0]}`;
  if ([...subject.keys].some((k) => other.keys.has(k))) return `it holds a key that ${name}'s DID document lists (the same public key)`;
  for (const hs of pySorted(hostsOf(subject))) {
    for (const ho of pySorted(hostsOf(other))) {
      if (hs === ho) return `it is a did:web on ${name}'s host ${hs}`;
      if (within(ho, hs)) return `its did:web host ${ho} is a subdomain of ${name}'s host ${hs}`;
      if (within(hs, ho)) return `its did:web host ${ho} is a parent domain of ${name}'s host ${hs}`;
    }
  }
  return null;
}

/** independence.py parties: witnesses grouped into independent parties (two are one party
 * when `relation` holds between them, transitively) -> [parties (DIDs in the given order),
 * related pairs [a, b, why b is not independent of a]]. */
export function parties(members) {
  const root = members.map((_, i) => i);
  const find = (i) => { while (root[i] !== i) i = root[i]; return i; };
  const why = [];
  for (let j = 0; j < members.length; j++) {
    for (let i = 0; i < j; i++) {
      const rule = relation(members[i], members[j], { name: `the witness ${members[i].did}` });
      if (rule !== null) { why.push([members[i].did, members[j].did, rule]); root[find(j)] = find(i); }
    }
  }
  const groups = new Map();
  members.forEach((m, i) => { const r = find(i); if (!groups.has(r)) groups.set(r, []); groups.get(r).push(m.did); });
  return [[...groups.values()], why];
}
