// C2SP signed-note v1.0.0 (c2sp.md §1) and its keys, mirroring
// tlog/formats/keys.py and tlog/formats/note.py.
//   vkey  = name "+" hex8(key ID) "+" base64(type || public key)
//   key ID = SHA-256(name || 0x0A || type || public)[:4]   (ECDSA: SHA-256(DER SPKI)[:4])
//   note  = text "\n" ("— " name " " base64(key ID || signature) "\n")+
// Types: 0x01 Ed25519 over the text, 0x02 ECDSA P-256 (DER sig, SHA-256 of the
// text; verify only), 0x04 Ed25519 cosignature/v1 (tlog-cosignature v1.0.1, §3),
// 0x06 ML-DSA-44 subtree/v1 cosignatures (tlog-cosignature; lib/mldsa.js).
import { b64enc, b64dec, b64decLenient, hex, unhex, utf8, fromUtf8, isWellFormed, concat, bytesEqual, u64be, subtle } from './b64.js';
import { FormatError, SignatureError, UnknownKeyError, pyRepr, pySorted } from './errors.js';
import { ed25519Verify } from './ed25519.js';
import { sha256 } from './merkle.js';
import { cosignatureMessage, parseCheckpoint, MAX_COSIGNATURE_TIMESTAMP } from './checkpoint.js';
import { checkMldsaPublic, verifySubtreeCosignature } from './mldsa.js';

export const ED25519 = 0x01, ECDSA = 0x02, COSIGNATURE_V1 = 0x04, COSIGNATURE_MLDSA44 = 0x06;
const KEY_TYPES = new Set([ED25519, ECDSA, COSIGNATURE_V1, COSIGNATURE_MLDSA44]);
const COSIGNER_TYPES = new Set([COSIGNATURE_V1, COSIGNATURE_MLDSA44]);
export const MAX_NOTE_SIZE = 1 << 20;
export const MAX_SIGNATURES = 100; // the Go reference rejects more; the spec asks for >= 16
const SIG_PREFIX = '\u2014 ';      // em dash, space
const CONTROL = /[\x00-\x09\x0b-\x1f]/;
// Python's str.isspace() set (Unicode White_Space), plus control characters.
const BAD_NAME_CHAR = /[\x00-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000+]/;
const q = pyRepr; // how Python's !r shows a name in the reasons

/** signed-note §Format: non-empty, no Unicode spaces, no "+", no control characters. */
export function checkKeyName(name) {
  if (typeof name !== 'string' || !name) throw new FormatError('key name must be a non-empty string');
  if (name.includes('+')) throw new FormatError("key name must not contain '+'");
  if (BAD_NAME_CHAR.test(name)) throw new FormatError('key name must not contain spaces or control characters');
  if (!isWellFormed(name)) throw new FormatError('key name is not valid UTF-8');
}

/** The 4-byte key ID (signed-note §Signatures). */
export async function keyId(name, type, pub) {
  if (type === ECDSA) return (await sha256(pub)).slice(0, 4);
  return (await sha256(concat(utf8(name), Uint8Array.of(0x0a, type), pub))).slice(0, 4);
}

// The one DER SubjectPublicKeyInfo spelling of an uncompressed P-256 key (what
// Python re-encodes to; keys.py refuses any other spelling since the key ID hashes it).
const P256_SPKI_PREFIX = unhex('3059301306072a8648ce3d020106082a8648ce3d030107034200');
const NOT_DER = 'ECDSA key is not a DER SubjectPublicKeyInfo';
// Algorithm OIDs (DER contents, hex) that cryptography loads as some other public key type.
const OTHER_KEY_OIDS = new Set(['2a864886f70d010101', '2a8648ce380401', '2b6570', '2b6571', '2b656e', '2b656f']);
const EC_OID = '2a8648ce3d0201', P256_OID = '2a8648ce3d030107';

/** A minimal DER reader for SubjectPublicKeyInfo (RFC 5280 §4.1.2.7), enough to word a
 * refusal as keys.py does; null when `b` is not one. */
function readSpki(b) {
  const read = (buf, p, tag) => {
    if (p + 2 > buf.length || buf[p] !== tag) return null;
    let len = buf[p + 1], q = p + 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      if (n < 1 || n > 2 || q + n > buf.length) return null;
      len = 0;
      for (let i = 0; i < n; i++) len = (len << 8) | buf[q++];
    }
    return q + len > buf.length ? null : { v: buf.subarray(q, q + len), end: q + len };
  };
  const outer = read(b, 0, 0x30);
  if (!outer || outer.end !== b.length) return null;
  const alg = read(outer.v, 0, 0x30), bits = alg && read(outer.v, alg.end, 0x03);
  if (!bits || bits.end !== outer.v.length) return null;
  const oid = read(alg.v, 0, 0x06);
  if (!oid) return null;
  const param = oid.end < alg.v.length ? read(alg.v, oid.end, 0x06) : null;
  return { alg: hex(oid.v), param: param ? hex(param.v) : null, key: bits.v.subarray(1) };
}

/** keys.py _load_ecdsa: a canonical DER P-256 SPKI, or FormatError worded as Python words it. */
async function importEcdsa(pub) {
  const canonical = pub.length === 91 && bytesEqual(pub.subarray(0, 26), P256_SPKI_PREFIX) && pub[26] === 4;
  if (!canonical) {
    const spki = readSpki(pub);
    if (!spki) throw new FormatError(NOT_DER);
    if (spki.alg === EC_OID && spki.param === P256_OID) {
      // a P-256 key spelled otherwise (compressed point, long-form lengths): Python loads
      // it, then refuses the spelling; a malformed point is not a key at all
      if ((spki.key[0] === 2 || spki.key[0] === 3) && spki.key.length === 33) throw new FormatError('ECDSA key is not canonical DER');
      throw new FormatError(NOT_DER);
    }
    if (spki.alg === EC_OID || OTHER_KEY_OIDS.has(spki.alg)) throw new FormatError('ECDSA key must be NIST P-256');
    throw new FormatError(NOT_DER);
  }
  const webcrypto = subtle();
  try {
    return await webcrypto.importKey('spki', pub, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['verify']);
  } catch { throw new FormatError(NOT_DER); } // not a point of the curve
}

/** Strict DER ECDSA-Sig-Value -> IEEE P1363 r||s (64 bytes) for WebCrypto. */
function derToP1363(der) {
  const fail = () => { throw new SignatureError('ECDSA signature is not DER'); };
  let p = 0;
  const int = () => {
    if (der[p++] !== 0x02) fail();
    const len = der[p++];
    if (!len || len > 33 || p + len > der.length) fail();
    let v = der.subarray(p, p + len); p += len;
    if (v[0] & 0x80) fail();                              // negative
    if (v.length > 1 && v[0] === 0 && !(v[1] & 0x80)) fail(); // not minimal
    if (v[0] === 0) v = v.subarray(1);
    if (v.length > 32) fail();
    const out = new Uint8Array(32); out.set(v, 32 - v.length); return out;
  };
  if (der.length < 8 || der[p++] !== 0x30 || der[p++] !== der.length - 2) fail();
  const r = int(), s = int();
  if (p !== der.length) fail();
  return concat(r, s);
}

async function checkPublic(type, pub) {
  if (!KEY_TYPES.has(type)) throw new FormatError(`unknown key type ${type}`);
  if (type === ECDSA) await importEcdsa(pub);
  else if (type === COSIGNATURE_MLDSA44) checkMldsaPublic(pub);
  else if (pub.length !== 32) throw new FormatError(`Ed25519 key must be 32 bytes, got ${pub.length}`);
}

/** A trusted public key; use Verifier.create / fromPublic / parseVkey (they check key and ID). */
export class Verifier {
  constructor(name, id, type, pub) { this.name = name; this.keyId = id; this.type = type; this.public = pub; }
  static async create(name, id, type, pub) {
    checkKeyName(name);
    await checkPublic(type, pub);
    if (!bytesEqual(id, await keyId(name, type, pub))) throw new FormatError(`key ID does not match the key for ${q(name)}`);
    return new Verifier(name, id, type, pub);
  }
  static async fromPublic(name, type, pub) { return Verifier.create(name, await keyId(name, type, pub), type, pub); }
  get keyIdHex() { return hex(this.keyId); }
  get vkey() { return `${this.name}+${hex(this.keyId)}+${b64enc(concat(Uint8Array.of(this.type), this.public))}`; }

  /** Verify `blob` (signature after the key ID) over note text bytes `message`.
   * Returns the cosignature timestamp (BigInt) for type 0x04, else null; throws SignatureError. */
  async verify(message, blob) {
    if (this.type === COSIGNATURE_MLDSA44) {
      // covers origin, size and root (and the cosigner's name): the text must be a checkpoint
      let cp;
      try { cp = parseCheckpoint(message); } catch (e) {
        if (e instanceof FormatError) throw new SignatureError(`ML-DSA-44 cosignature by ${q(this.name)} on a note that is not a checkpoint`);
        throw e;
      }
      return this.verifySubtree(cp.origin, 0n, cp.size, cp.root, blob);
    }
    if (this.type === ED25519) {
      try { await ed25519Verify(this.public, message, blob); } catch (e) {
        if (e instanceof SignatureError) throw new SignatureError(`signature by ${q(this.name)} does not verify`);
        throw e;
      }
      return null;
    }
    if (this.type === COSIGNATURE_V1) {
      if (blob.length !== 72 || message[message.length - 1] !== 0x0a)
        throw new SignatureError(`malformed cosignature by ${q(this.name)}`);
      const ts = u64be(blob, 0);
      if (ts > MAX_COSIGNATURE_TIMESTAMP) throw new SignatureError(`cosignature by ${q(this.name)} has timestamp > 2^63-1`);
      try { await ed25519Verify(this.public, cosignatureMessage(message, ts), blob.subarray(8)); } catch (e) {
        if (e instanceof SignatureError) throw new SignatureError(`cosignature by ${q(this.name)} does not verify`);
        throw e;
      }
      return ts;
    }
    const key = await importEcdsa(this.public), webcrypto = subtle();
    let ok = false;
    try { ok = await webcrypto.verify({ name: 'ECDSA', hash: 'SHA-256' }, key, derToP1363(blob), message); } catch { ok = false; }
    if (!ok) throw new SignatureError(`ECDSA signature by ${q(this.name)} does not verify`);
    return null;
  }
}

/** An ML-DSA-44 (0x06) subtree/v1 cosignature of leaves [start, end) of `origin` with hash
 * `root` (a sign-subtree answer): its timestamp, or SignatureError (keys.py verify_subtree). */
Verifier.prototype.verifySubtree = async function verifySubtree(origin, start, end, root, blob) {
  if (this.type !== COSIGNATURE_MLDSA44)
    throw new SignatureError(`key ${q(this.name)} cannot sign subtrees (type 0x${this.type.toString(16).padStart(2, '0')})`);
  return verifySubtreeCosignature(this, origin, start, end, root, blob);
};

/** Parse "name+hex8+base64(type||key)" (c2sp.md §1, V1, V7); FormatError on any deviation. */
export async function parseVkey(text) {
  if (typeof text !== 'string') throw new FormatError('vkey must be a string');
  const i = text.indexOf('+'), j = i < 0 ? -1 : text.indexOf('+', i + 1); // split at most twice: base64 has "+"
  if (j < 0) throw new FormatError('vkey must be name+keyid+key');
  const name = text.slice(0, i), hex8 = text.slice(i + 1, j), b64 = text.slice(j + 1);
  checkKeyName(name);
  if (!/^[0-9a-f]{8}$/.test(hex8)) throw new FormatError('vkey key ID must be 8 lowercase hex digits');
  const raw = b64dec(b64, 'vkey key');
  if (raw.length < 2) throw new FormatError('vkey key is empty');
  const type = raw[0], pub = raw.slice(1);
  await checkPublic(type, pub);
  if (!bytesEqual(unhex(hex8), await keyId(name, type, pub))) throw new FormatError(`vkey key ID does not match the key for ${q(name)}`);
  return new Verifier(name, unhex(hex8), type, pub);
}

/** The cosignature form of a witness key: 0x04 (from a 0x01 vkey) or 0x06 (c2sp.md §3). */
export async function cosignerVerifier(v) {
  if (COSIGNER_TYPES.has(v.type)) return v;
  if (v.type !== ED25519) throw new FormatError('a cosigner key must be Ed25519 (0x01/0x04) or ML-DSA-44 (0x06)');
  return Verifier.fromPublic(v.name, COSIGNATURE_V1, v.public);
}

/** Timestamp (BigInt POSIX seconds) of a cosignature blob, without verifying it. */
export function cosignatureTimestamp(blob) {
  if (blob.length !== 72 && blob.length !== 2428) throw new FormatError('cosignature blob must be 72 (Ed25519) or 2428 (ML-DSA-44) bytes');
  return u64be(blob, 0);
}

// --- notes -------------------------------------------------------------------

/** One "— name base64(keyid||sig)" line, with or without its final "\n". */
export function parseSignatureLine(line) {
  if (line.endsWith('\n')) line = line.slice(0, -1);
  if (!line.startsWith(SIG_PREFIX) || line.includes('\n')) throw new FormatError('signature line must start with an em dash and a space');
  const rest = line.slice(SIG_PREFIX.length), sp = rest.indexOf(' ');
  const name = sp < 0 ? rest : rest.slice(0, sp), b64 = sp < 0 ? '' : rest.slice(sp + 1);
  if (sp < 0 || !b64) throw new FormatError("signature line must be '— <name> <base64>'");
  checkKeyName(name);
  // note.py _b64dec_signature: not ASCII, then length, then alphabet (non-zero trailing bits tolerated)
  if (/[^\x00-\x7f]/.test(b64)) throw new FormatError('note signature is not base64');
  if (b64.length % 4) throw new FormatError('note signature: bad base64 length');
  let raw;
  try { raw = b64decLenient(b64, 'note signature'); } catch { throw new FormatError('note signature is not base64'); }
  if (raw.length < 5) throw new FormatError('note signature must be at least 5 bytes (key ID and signature)');
  return { name, keyId: raw.slice(0, 4), blob: raw.slice(4) };
}

export function parseSignatureLines(text) {
  if (typeof text !== 'string' || !text.endsWith('\n')) throw new FormatError('signature lines must end with a newline');
  const lines = text.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURES) throw new FormatError(`more than ${MAX_SIGNATURES} signatures`);
  return lines.map(parseSignatureLine);
}

export const signatureLine = (s) => `${SIG_PREFIX}${s.name} ${b64enc(concat(s.keyId, s.blob))}\n`;
export const noteToString = (note) => note.text + '\n' + note.signatures.map(signatureLine).join('');

/** Check a note's shape (c2sp.md §1) without verifying anything: {text, signatures}.
 * The text/signature split is at the LAST "\n\n". Accepts a string or UTF-8 bytes. */
export function parseNote(data) {
  let msg;
  if (typeof data === 'string') {
    if (!isWellFormed(data)) throw new FormatError('note is not valid UTF-8');
    if (utf8(data).length > MAX_NOTE_SIZE) throw new FormatError(`note larger than ${MAX_NOTE_SIZE} bytes`);
    msg = data;
  } else if (data instanceof Uint8Array) {
    if (data.length > MAX_NOTE_SIZE) throw new FormatError(`note larger than ${MAX_NOTE_SIZE} bytes`);
    msg = fromUtf8(data, 'note');
  } else throw new FormatError('note must be bytes or str');
  if (CONTROL.test(msg)) throw new FormatError('note contains a control character');
  const split = msg.lastIndexOf('\n\n');
  if (split < 0) throw new FormatError('note has no blank line before its signatures');
  const text = msg.slice(0, split + 1), sigs = msg.slice(split + 2);
  if (!sigs) throw new FormatError('note has no signatures');
  const signatures = parseSignatureLines(sigs);
  return { text, signatures };
}

/** Parse and verify a note against trusted keys (c2sp.md §1 "Verifying", note.py open_note).
 * Unknown (name, key ID) pairs are ignored; a trusted key whose signature fails throws
 * SignatureError; a trusted key that signed twice throws FormatError; no trusted
 * signature throws UnknownKeyError. Returns {note, verified: [{verifier, signature, timestamp}]}. */
export async function openNote(data, verifiers) {
  const note = typeof data === 'object' && data && 'signatures' in data && !(data instanceof Uint8Array) ? data : parseNote(data);
  const known = new Map();
  for (const v of verifiers) {
    const k = v.name + '\0' + hex(v.keyId), other = known.get(k);
    if (other && !(other.type === v.type && bytesEqual(other.public, v.public)))
      throw new Error(`two different keys share name ${q(v.name)} and key ID ${hex(v.keyId)}`);
    if (!other) known.set(k, v);
  }
  const message = utf8(note.text);
  const verified = [], seen = new Set();
  for (const sig of note.signatures) {
    const k = sig.name + '\0' + hex(sig.keyId), v = known.get(k);
    if (!v) continue;
    if (seen.has(k)) throw new FormatError(`note has two signatures from ${q(sig.name)}`);
    seen.add(k);
    verified.push({ verifier: v, signature: sig, timestamp: await v.verify(message, sig.blob) });
  }
  if (!verified.length) {
    const names = pySorted(new Set(note.signatures.map((s) => s.name)));
    throw new UnknownKeyError(`note has no signature from a trusted key (signed by: ${names.join(', ')})`, names);
  }
  return { note, verified };
}
