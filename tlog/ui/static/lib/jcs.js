// RFC 8785 JSON Canonicalization Scheme (JCS) and the strict JSON reader it is
// fed from, mirroring tlog/formats/canonical.py `jcs`, tlog/formats/strict.py
// `loads_json` and tlog/formats/entries.py `receipt_hash` (OAP-CORE-1.0 §19.1:
// receipt_hash = "sha256:" + hex(SHA-256(JCS(receipt)))).
//
// JSON.parse cannot be used: it silently rounds integers beyond 2^53 (Python
// keeps them exact, then JCS refuses them), lets "__proto__" through as a
// prototype, and keeps duplicate keys. `parseJSON` keeps integers exact (a
// BigInt when unsafe) so the verdicts match Python's.
import { InvalidInput, pyRepr } from './errors.js';
import { utf8, fromUtf8, isWellFormed, hex } from './b64.js';
import { sha256 } from './merkle.js';

export const DEFAULT_MAX_DEPTH = 16;
export const DEFAULT_MAX_ITEMS = 65536;
const INT64_MIN = -(2n ** 63n), INT64_MAX = 2n ** 63n - 1n;
const JCS_INT = 2n ** 53n - 1n;

/** A number written with a fraction or exponent, kept apart from integers when
 * parseJSON is asked to (floats: 'wrap'): Python's json.loads gives such a literal a
 * float type even when it is integral ("3.0"), and the registry checks refuse floats
 * where integers are required. jcs() serializes it as the plain number. */
export class JSONFloat {
  constructor(value) { this.value = value; }
}

function setKey(obj, k, v) { Object.defineProperty(obj, k, { value: v, enumerable: true, writable: true, configurable: true }); }

/** Parse JSON text or UTF-8 bytes.
 * strict (default; strict.py loads_json): no fraction/exponent numbers, no NaN/Infinity,
 *   no duplicate keys, integers within signed 64-bit, no lone surrogates, depth <= 16,
 *   at most 65,536 items (values and keys).
 * strict:false (Python json.loads): floats allowed, duplicate keys (last wins), NaN and
 *   Infinity literals read as numbers (jcs then refuses them); with floats: 'wrap', numbers
 *   with a fraction or exponent come back as JSONFloat. Integers stay exact either way. */
export function parseJSON(input, { strict = true, floats = 'number', maxDepth = strict ? DEFAULT_MAX_DEPTH : 1000, maxItems = strict ? DEFAULT_MAX_ITEMS : Infinity } = {}) {
  const s = input instanceof Uint8Array ? fromUtf8(input, 'JSON body') : input;
  if (typeof s !== 'string') throw new InvalidInput('JSON must be text');
  let i = 0, items = 0;
  const fail = (msg) => { throw new InvalidInput(`malformed JSON: ${msg} at char ${i}`); };
  const ws = () => { while (i < s.length && ' \t\n\r'.includes(s[i])) i++; };
  const count = () => { if (++items > maxItems) throw new InvalidInput(`JSON body has more than ${maxItems} items (values and keys)`); };
  const str = () => {
    i++; // opening quote
    let out = '';
    for (;;) {
      if (i >= s.length) fail('unterminated string');
      const c = s.charCodeAt(i);
      if (c === 0x22) { i++; return out; }
      if (c < 0x20) fail('invalid control character');
      if (c !== 0x5c) { out += s[i++]; continue; }
      const e = s[i + 1];
      i += 2;
      if (e === 'u') {
        const h = s.slice(i, i + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(h)) fail('invalid \\u escape');
        out += String.fromCharCode(parseInt(h, 16)); i += 4;
      } else {
        const m = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }[e];
        if (m === undefined) fail('invalid escape');
        out += m;
      }
    }
  };
  const num = () => {
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(s.slice(i, i + 4096));
    if (!m) fail('expecting value');
    i += m[0].length;
    if (m[1] || m[2]) {
      if (strict) throw new InvalidInput(`floating-point numbers are not allowed: ${m[0].slice(0, 40)}`);
      return floats === 'wrap' ? new JSONFloat(Number(m[0])) : Number(m[0]);
    }
    const v = BigInt(m[0]);
    if (strict && (v < INT64_MIN || v > INT64_MAX)) throw new InvalidInput('integer out of the signed 64-bit range');
    return v >= -JCS_INT && v <= JCS_INT ? Number(v) : v;
  };
  const value = (depth) => {
    ws();
    count();
    const c = s[i];
    if (c === '{' || c === '[') {
      if (depth >= maxDepth) throw new InvalidInput(`JSON nested deeper than ${maxDepth} levels`);
      i++; ws();
      if (c === '[') {
        const arr = [];
        if (s[i] === ']') { i++; return arr; }
        for (;;) {
          arr.push(value(depth + 1)); ws();
          if (s[i] === ',') { i++; continue; }
          if (s[i] === ']') { i++; return arr; }
          fail("expecting ',' delimiter");
        }
      }
      const obj = {}, seen = new Set();
      if (s[i] === '}') { i++; return obj; }
      for (;;) {
        ws();
        if (s[i] !== '"') fail('expecting property name enclosed in double quotes');
        count();
        const k = str(); ws();
        if (s[i] !== ':') fail("expecting ':' delimiter");
        i++;
        const v = value(depth + 1);
        if (seen.has(k) && strict) throw new InvalidInput(`duplicate key in JSON object: ${pyRepr(k)}`);
        seen.add(k); setKey(obj, k, v); ws();
        if (s[i] === ',') { i++; continue; }
        if (s[i] === '}') { i++; return obj; }
        fail("expecting ',' delimiter");
      }
    }
    if (c === '"') {
      const v = str();
      if (strict && !isWellFormed(v)) throw new InvalidInput('text is not valid Unicode (lone surrogate)');
      return v;
    }
    for (const [lit, v] of [['true', true], ['false', false], ['null', null], ['NaN', NaN], ['Infinity', Infinity], ['-Infinity', -Infinity]]) {
      if (s.startsWith(lit, i)) {
        if (typeof v === 'number' && strict) throw new InvalidInput(`${lit} is not valid JSON`);
        i += lit.length; return v;
      }
    }
    return num();
  };
  if (s.charCodeAt(0) === 0xfeff) throw new InvalidInput('malformed JSON: unexpected UTF-8 BOM');
  const out = value(0);
  ws();
  if (i !== s.length) fail('extra data');
  if (strict) checkKeys(out);
  return out;
}

function checkKeys(v) { // lone surrogates in keys (values were checked as read)
  if (Array.isArray(v)) v.forEach(checkKeys);
  else if (v && typeof v === 'object') for (const k of Object.keys(v)) {
    if (!isWellFormed(k)) throw new InvalidInput('text is not valid Unicode (lone surrogate)');
    checkKeys(v[k]);
  }
}

/** RFC 8785 canonical JSON text of a value: null, booleans, finite numbers (ES6
 * Number-to-String, §3.2.2.3), BigInts within ±(2^53-1), well-formed strings (§3.2.2.2),
 * arrays, plain objects (keys sorted by UTF-16 code units, §3.2.3). InvalidInput otherwise. */
export function jcs(v) {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'boolean': return v ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(v)) throw new InvalidInput(`value has no RFC 8785 canonical form: ${v} is not representable in JCS`);
      return String(v); // ES6 Number.prototype.toString: exactly RFC 8785's serialization; -0 -> "0"
    case 'bigint':
      if (v < -JCS_INT || v > JCS_INT) throw new InvalidInput('integer outside the RFC 8785 (I-JSON) range ±(2**53 - 1)');
      return v.toString();
    case 'string':
      if (!isWellFormed(v)) throw new InvalidInput('value has no RFC 8785 canonical form: lone surrogate');
      return JSON.stringify(v); // escapes exactly ", \, \b \f \n \r \t and \u00xx for other C0 controls
    case 'object': {
      if (v instanceof JSONFloat) return jcs(v.value);
      if (Array.isArray(v)) return '[' + v.map(jcs).join(',') + ']';
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) break;
      const keys = Object.keys(v).sort(); // default sort = UTF-16 code unit order
      return '{' + keys.map((k) => jcs(k) + ':' + jcs(v[k])).join(',') + '}';
    }
  }
  throw new InvalidInput(`value has no RFC 8785 canonical form: ${typeof v}`);
}

export const jcsBytes = (v) => utf8(jcs(v));

/** OAP receipt hash (entries.py receipt_hash; read strictly like `oap-log add RECEIPT`):
 * input is JSON text/bytes or an already parsed object. Returns {digest, text: "sha256:<hex>", canonical}. */
export async function receiptHash(input) {
  const obj = typeof input === 'string' || input instanceof Uint8Array ? parseJSON(input) : input;
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw new InvalidInput('a receipt must be a JSON object');
  const canonical = jcsBytes(obj);
  const digest = await sha256(canonical);
  return { digest, text: 'sha256:' + hex(digest), canonical };
}
