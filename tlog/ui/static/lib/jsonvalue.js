// The entry data model every signed OAP object must stay in (tlog/formats/canonical.py
// check_json_value, same reasons): objects with text keys, arrays, text (valid Unicode),
// integers within signed 64 bits, booleans, null; at most 16 nested containers. Floats are
// refused: values parsed with parseJSON(..., {floats: 'wrap'}) keep "3.0" apart from 3.
import { InvalidInput } from './errors.js';
import { JSONFloat } from './jcs.js';
import { isWellFormed } from './b64.js';

export const DEFAULT_MAX_DEPTH = 16;
const INT_MIN = -(2n ** 63n), INT_MAX = 2n ** 63n - 1n;
const isInt = (v) => (typeof v === 'number' && Number.isInteger(v)) || typeof v === 'bigint';
const inRange = (v) => { const b = BigInt(v); return b >= INT_MIN && b <= INT_MAX; };
const where = (path) => path;
const isPlainScalar = (v) => typeof v === 'string' || typeof v === 'boolean' || isInt(v);

function text(s, path) {
  if (!isWellFormed(s)) throw new InvalidInput(`${where(path)}: text is not valid Unicode (lone surrogate)`);
}

function check(obj, depthLeft, path) {
  if (obj === null || typeof obj === 'boolean') return;
  if (typeof obj === 'string') { text(obj, path); return; }
  if (isInt(obj)) {
    if (!inRange(obj)) throw new InvalidInput(`${where(path)}: integer out of the signed 64-bit range`);
    return;
  }
  if (Array.isArray(obj) || (obj && typeof obj === 'object' && !(obj instanceof JSONFloat) && !(obj instanceof Uint8Array))) {
    if (depthLeft <= 0) throw new InvalidInput(`${where(path)}: nested deeper than allowed`);
    if (!Array.isArray(obj)) {
      for (const [key, value] of Object.entries(obj)) {
        text(key, path);
        if (value === null || isPlainScalar(value)) {
          if (isInt(value) && !inRange(value)) throw new InvalidInput(`${path}.${key}: integer out of the signed 64-bit range`);
          if (typeof value === 'string') text(value, `${path}.${key}`);
          continue;
        }
        check(value, depthLeft - 1, `${path}.${key}`);
      }
    } else if (obj.length) {
      const kinds = new Set(obj.map((v) => (isInt(v) ? 'int' : typeof v === 'string' ? 'str' : 'other')));
      if (kinds.size === 1 && kinds.has('int')) {
        if (!obj.every(inRange)) throw new InvalidInput(`${where(path)}: integer out of the signed 64-bit range`);
        return;
      }
      if (kinds.size === 1 && kinds.has('str') && obj.every(isWellFormed)) return;
      obj.forEach((v, i) => check(v, depthLeft - 1, `${path}[${i}]`));
    }
    return;
  }
  if (obj instanceof JSONFloat || typeof obj === 'number') throw new InvalidInput(`${where(path)}: floating-point numbers are not allowed`);
  if (obj instanceof Uint8Array) throw new InvalidInput(`${where(path)}: byte strings are not allowed`);
  throw new InvalidInput(`${where(path)}: values of type ${typeof obj} are not allowed`);
}

/** InvalidInput unless `obj` is in the entry data model (canonical.py check_json_value). */
export function checkJsonValue(obj, maxDepth = DEFAULT_MAX_DEPTH) { check(obj, maxDepth, '$'); }
