// Bytes helpers: strict standard base64 (RFC 4648 §4, padded), hex, UTF-8.
// Mirrors tlog/formats/encoding.py: `b64dec` is strict (padding, alphabet,
// canonical trailing bits) so two texts never mean the same bytes;
// `b64decLenient` tolerates non-zero trailing bits, as Go's StdEncoding and
// tlog/formats/note.py do for signature lines (c2sp.md V4 step 2).
import { FormatError } from './errors.js';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const INDEX = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) INDEX[ALPHABET.charCodeAt(i)] = i;

export function b64enc(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out += ALPHABET[(n >> 18) & 63] + ALPHABET[(n >> 12) & 63];
    out += i + 1 < bytes.length ? ALPHABET[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.length ? ALPHABET[n & 63] : '=';
  }
  return out;
}

function decode(text, what, canonical) {
  if (typeof text !== 'string') throw new FormatError(`${what}: not a string`);
  if (/[^\x00-\x7f]/.test(text)) throw new FormatError(`${what}: not ASCII base64`); // encoding.py checks this first
  if (text.length % 4) throw new FormatError(`${what}: bad base64 length`);
  let pad = 0;
  if (text.endsWith('==')) pad = 2; else if (text.endsWith('=')) pad = 1;
  const n = text.length / 4 * 3 - pad;
  const out = new Uint8Array(n);
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    const v = [0, 0, 0, 0];
    for (let j = 0; j < 4; j++) {
      const c = text.charCodeAt(i + j);
      const isPad = c === 61 && i + 4 === text.length && j >= 4 - pad;
      const d = c < 128 ? INDEX[c] : -1;
      if (!isPad && d < 0) throw new FormatError(`${what}: invalid base64`);
      v[j] = isPad ? 0 : d;
    }
    const w = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    if (o < n) out[o++] = (w >> 16) & 255;
    if (o < n) out[o++] = (w >> 8) & 255;
    if (o < n) out[o++] = w & 255;
    if (i + 4 === text.length && canonical) {
      // Canonical form: the bits below the last full byte must be zero.
      if ((pad === 1 && (w & 0xff)) || (pad === 2 && (w & 0xffff)))
        throw new FormatError(`${what}: non-canonical base64`);
    }
  }
  return out;
}

/** Strict, canonical standard base64 (encoding.b64dec). */
export const b64dec = (text, what = 'base64') => decode(text, what, true);
/** Standard base64 tolerating non-zero trailing bits (encoding.b64decode_noncanonical). */
export const b64decLenient = (text, what = 'base64') => decode(text, what, false);

/** Strict base64url without padding, canonical (encoding.b64url_dec). */
export function b64urlDec(text, what = 'base64url') {
  if (typeof text !== 'string' || /[^\x00-\x7f]/.test(text)) throw new FormatError(`${what}: not base64url text`);
  if (text.length % 4 === 1 || text.includes('=')) throw new FormatError(`${what}: bad base64url length or padding`);
  const std = text.replace(/-/g, '+').replace(/_/g, '/');
  let out;
  try { out = decode(std + '='.repeat((4 - (std.length % 4)) % 4), what, false); } catch { throw new FormatError(`${what}: invalid base64url`); }
  if (b64enc(out).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '') !== text) throw new FormatError(`${what}: non-canonical base64url`);
  return out;
}

/** Standard base64 with padding, or base64url without (encoding.b64dec_either): OAP's
 * examples write signatures as base64url, C2SP and the log as standard base64. */
export function b64decEither(text, what = 'base64') {
  if (typeof text !== 'string') throw new FormatError(`${what}: must be a base64 string`);
  if (text.includes('-') || text.includes('_') || text.length % 4) return b64urlDec(text, what);
  return b64dec(text, what);
}

/** Strict base64 of exactly 32 bytes (encoding.b64dec_hash). */
export function b64decHash(text, what = 'hash') {
  const out = b64dec(text, what);
  if (out.length !== 32) throw new FormatError(`${what}: must decode to 32 bytes, got ${out.length}`);
  return out;
}

export const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
export function unhex(text) {
  if (typeof text !== 'string' || !/^(?:[0-9a-fA-F]{2})*$/.test(text)) throw new FormatError('invalid hex');
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.substr(2 * i, 2), 16);
  return out;
}

const ENC = new TextEncoder();
const DEC = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
export const utf8 = (s) => ENC.encode(s);
/** Decode UTF-8 strictly (invalid sequences throw FormatError). */
export function fromUtf8(bytes, what = 'text') {
  try { return DEC.decode(bytes); } catch { throw new FormatError(`${what} is not valid UTF-8`); }
}
/** True if the JS string has a UTF-8 form (no lone surrogates). */
export const isWellFormed = (s) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

export function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}
export function bytesEqual(a, b) {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i] ^ b[i];
  return d === 0;
}
/** Big-endian unsigned integer of 8 bytes as BigInt. */
export function u64be(bytes, off = 0) {
  return new DataView(bytes.buffer, bytes.byteOffset + off, 8).getBigUint64(0);
}

/** WebCrypto's SubtleCrypto. Browsers expose it only in secure contexts (HTTPS, or
 * http://localhost / 127.0.0.1), so an explorer served over plain HTTP says why it fails. */
export function subtle() {
  const s = globalThis.crypto && globalThis.crypto.subtle;
  if (!s) throw new Error('WebCrypto (crypto.subtle) is not available: serve the explorer over HTTPS (or from localhost)');
  return s;
}
