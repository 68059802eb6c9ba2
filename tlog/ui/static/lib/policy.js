// C2SP tlog-policy draft (c2sp.md §6), mirroring tlog/formats/policy.py:
//   log <vkey> [<url>] | witness <name> <vkey> [<url>] | mirror <name> <vkey> [<url>]
//   group <name> <k|all|any> <member>... | quorum <name|none> | logs <k> | registry <did:key> [<url>]
//   "#" comments | blank lines
// `mirror` (an OAP extension, as in policy.py) is a witness line whose cosigner is a C2SP
// tlog-mirror: it counts in groups and the quorum as a witness does, and carries
// `mirror: true` so pages show its cosignature as a mirror's ("stored"). `registry` (an OAP
// extension, as in policy.py) pins an OAP registry's did:key: status answers are checked
// against it rather than against the key the registry names.
// Witnesses and groups share one namespace; a group or the quorum may only name
// things defined on preceding lines, so there are no cycles and `quorumMet`
// evaluates groups in definition order. Vkeys stay strings here (their shape
// is checked to spot duplicate keys); bundle.js turns them into verifiers.
import { b64dec, utf8, fromUtf8, isWellFormed, hex } from './b64.js';
import { FormatError, InvalidInput, pyRepr as q } from './errors.js';
import { publicFromDidKey } from './didkey.js';

export const NONE = 'none';
export const MAX_POLICY_BYTES = 64 * 1024;
const BAD_CHAR = /[\x00-\x08\x0b-\x1f\x7f]/; // allowed: tab, newline, 0x20-0x7E, >= 0x80

/** The key a vkey wraps, without name, key ID or type byte (tlog-policy duplicate rule). */
function keyMaterial(vkey) {
  const i = vkey.indexOf('+'), j = i < 0 ? -1 : vkey.indexOf('+', i + 1);
  if (j < 0 || i === 0 || !/^[0-9a-f]{8}$/.test(vkey.slice(i + 1, j))) throw new FormatError(`malformed vkey ${q(vkey)}`);
  const blob = b64dec(vkey.slice(j + 1), 'vkey');
  if (blob.length < 2) throw new FormatError(`malformed vkey ${q(vkey)}`);
  return hex(blob.subarray(1));
}
function addKey(seen, vkey, what) {
  const k = keyMaterial(vkey);
  if (seen.has(k)) throw new FormatError(`duplicate ${what} key ${q(vkey)}`);
  seen.add(k);
}
function addRegistry(seen, did) {
  try { publicFromDidKey(did); } catch (e) {
    if (e instanceof InvalidInput) throw new FormatError(`registry ${q(did)}: ${e.reason}`);
    throw e;
  }
  if (seen.has(did)) throw new FormatError(`duplicate registry ${q(did)}`);
  seen.add(did);
}
function checkName(name, defined) {
  if (name === NONE) throw new FormatError("'none' is predefined and cannot be redefined");
  if (defined.has(name)) throw new FormatError(`name ${q(name)} defined twice`);
}
/** One cosigner, one vote (policy.py _check_one_vote): refuse a group in which one cosigner
 * (a vkey's key name) could meet two members through two of its keys; a group of only that
 * cosigner's keys ("group w1 any w1-ed w1-pq") counts as the cosigner. */
function checkOneVote(witnesses, groups) {
  const who = new Map();
  for (const [n, w] of witnesses) who.set(n, new Map([[w.vkey.split('+', 1)[0], new Set([n])]]));
  for (const g of groups.values()) {
    const maps = g.members.map((m) => who.get(m));
    const cosigners = new Set(maps.flatMap((m) => [...m.keys()]));
    const alias = g.members.every((m) => witnesses.has(m)) && cosigners.size === 1;
    const merged = new Map();
    g.members.forEach((m, i) => {
      for (const [c, lines] of maps[i]) {
        const prev = merged.get(c);
        const same = prev && prev.size === lines.size && [...prev].every((x) => lines.has(x));
        if (!alias && prev && (!same || lines.size > 1)) {
          const keys = [...new Set([...prev, ...lines])].sort().join(', ');
          throw new FormatError(`group ${q(g.name)}: member ${q(m)} and another member can both be met by cosigner ${q(c)} ` +
            `(keys ${keys}), which would count it twice; list a cosigner's keys in one group ` +
            '(group <name> any <key1> <key2>) and use that group');
        }
        merged.set(c, new Set([...(prev ?? []), ...lines]));
      }
    });
    who.set(g.name, merged);
  }
}

function checkMembers(members, defined) {
  if (!members.length) throw new FormatError('group needs at least one member');
  if (new Set(members).size !== members.length) throw new FormatError('a group may list each member only once');
  for (const m of members) if (!defined.has(m)) throw new FormatError(`group member ${q(m)} is not defined on a preceding line`);
}

/** Parse a policy -> {logs:[{vkey,url}], witnesses: Map name->{name,vkey,url,mirror},
 * groups: Map name->{name,threshold,members}, quorum: name|null, logQuorum, registries:[{did,url}]}. FormatError names the line.
 * As in Python (a deliberate deviation from the draft): no quorum line means "quorum none",
 * unless the policy names witnesses or groups, which then is an error. */
export function parsePolicy(text) {
  if (text instanceof Uint8Array) {
    if (text.length > MAX_POLICY_BYTES) throw new FormatError('policy larger than 64 KiB');
    text = fromUtf8(text, 'policy');
  }
  if (typeof text !== 'string') throw new FormatError('policy must be text');
  if (text.length > MAX_POLICY_BYTES) throw new FormatError('policy larger than 64 KiB');
  if (!isWellFormed(text)) throw new FormatError('policy is not valid UTF-8');
  const logs = [], witnesses = new Map(), groups = new Map(), defined = new Map();
  const logKeys = new Set(), witnessKeys = new Set(), registries = [], registryDids = new Set();
  let quorum = null, quorumSeen = false, logQuorum = null;
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  lines.forEach((raw, n) => {
    try {
      if (BAD_CHAR.test(raw)) throw new FormatError('control character');
      const line = raw.replace(/^[ \t]+|[ \t]+$/g, '');
      if (!line || line.startsWith('#')) return;
      const [kw, ...args] = line.split(/[ \t]+/);
      if (kw === 'log') {
        if (args.length !== 1 && args.length !== 2) throw new FormatError("expected 'log <vkey> [<url>]'");
        addKey(logKeys, args[0], 'log');
        logs.push({ vkey: args[0], url: args[1] ?? null });
      } else if (kw === 'witness' || kw === 'mirror') {
        if (args.length !== 2 && args.length !== 3) throw new FormatError(`expected '${kw} <name> <vkey> [<url>]'`);
        checkName(args[0], defined);
        addKey(witnessKeys, args[1], kw);
        const w = { name: args[0], vkey: args[1], url: args[2] ?? null, mirror: kw === 'mirror' };
        witnesses.set(w.name, w); defined.set(w.name, w);
      } else if (kw === 'group') {
        if (args.length < 3) throw new FormatError("expected 'group <name> <k|all|any> <member>...'");
        const [name, k, ...members] = args;
        checkName(name, defined);
        checkMembers(members, defined);
        let threshold;
        if (k === 'all') threshold = members.length;
        else if (k === 'any') threshold = 1;
        else if (/^[1-9][0-9]{0,5}$/.test(k)) {
          threshold = Number(k);
          if (threshold > members.length) throw new FormatError(`threshold ${threshold} exceeds ${members.length} members`);
        } else throw new FormatError(`bad threshold ${q(k)}`);
        const g = { name, threshold, members };
        groups.set(name, g); defined.set(name, g);
      } else if (kw === 'quorum') {
        if (args.length !== 1) throw new FormatError("expected 'quorum <name|none>'");
        if (quorumSeen) throw new FormatError('more than one quorum line');
        quorumSeen = true;
        if (args[0] !== NONE) {
          if (!defined.has(args[0])) throw new FormatError(`quorum ${q(args[0])} is not defined on a preceding line`);
          quorum = args[0];
        }
      } else if (kw === 'logs') { // OAP extension (OAP-CORE-1.0 §19.3): anchored in k of the logs
        if (args.length !== 1 || !/^[1-9][0-9]{0,5}$/.test(args[0])) throw new FormatError("expected 'logs <k>' (k >= 1)");
        if (logQuorum !== null) throw new FormatError('more than one logs line');
        logQuorum = Number(args[0]);
      } else if (kw === 'registry') { // OAP extension: a pinned registry key
        if (args.length !== 1 && args.length !== 2) throw new FormatError("expected 'registry <did:key> [<url>]'");
        addRegistry(registryDids, args[0]);
        registries.push({ did: args[0], url: args[1] ?? null });
      } else throw new FormatError(`unknown keyword ${q(kw)}`);
    } catch (e) {
      if (e instanceof FormatError) { const err = new FormatError(`policy line ${n + 1}: ${e.reason}`); err.line = n + 1; throw err; }
      throw e;
    }
  });
  if ((witnesses.size || groups.size) && !quorumSeen)
    throw new FormatError("policy names witnesses but has no quorum line (write 'quorum none' to require none)");
  // log lines whose keys share a key name are one log's keys (a key rotation): counted once
  const origins = logCount({ logs });
  if (logQuorum !== null && logQuorum > origins)
    throw new FormatError(`logs ${logQuorum}: the policy lists only ${origins} log(s) (keys with one name are one log's)`);
  checkOneVote(witnesses, groups);
  return { logs, witnesses, groups, quorum, logQuorum: logQuorum || 1, registries };
}

/** How many logs a policy lists: `log` lines with one key name are one log's keys (policy.py log_count). */
export function logCount(policy) {
  return new Set(policy.logs.map((l) => l.vkey.split('+', 1)[0])).size;
}

/** True iff the verified witness names in `cosigned` satisfy the quorum (policy.py quorum_met).
 * Group names or unknown names in `cosigned` are ignored. No quorum is always met. */
export function quorumMet(policy, cosigned) {
  if (policy.quorum === null) return true;
  const met = new Set([...policy.witnesses.keys()].filter((n) => cosigned.has(n)));
  for (const g of policy.groups.values()) // definition order: members come first
    if (g.members.filter((m) => met.has(m)).length >= g.threshold) met.add(g.name);
  return met.has(policy.quorum);
}

/** Canonical text: logs, witnesses (and mirrors), groups, quorum ("all" when k == n, "any" when k == 1 < n). */
export function policyToText(p) {
  const j = (...xs) => xs.filter((x) => x !== null && x !== undefined).join(' ');
  const out = [];
  for (const l of p.logs) out.push(j('log', l.vkey, l.url));
  for (const r of p.registries || []) out.push(j('registry', r.did, r.url));
  for (const w of p.witnesses.values()) out.push(j(w.mirror ? 'mirror' : 'witness', w.name, w.vkey, w.url));
  for (const g of p.groups.values()) {
    const n = g.members.length, k = g.threshold === n ? 'all' : g.threshold === 1 ? 'any' : String(g.threshold);
    out.push(j('group', g.name, k, ...g.members));
  }
  out.push('quorum ' + (p.quorum ?? NONE));
  if ((p.logQuorum || 1) > 1) out.push(`logs ${p.logQuorum}`);
  return out.join('\n') + '\n';
}
