// did:key for Ed25519, resolved offline (W3C CCG did:key v0.7; OAP-CORE-1.0 §5.1),
// mirroring tlog/formats/did.py: "did:key:" + multibase base58btc ("z") of the
// multicodec varint ed25519-pub (0xed 0x01) || 32 key bytes; always "did:key:z6Mk...".
// Parsing is strict and round-trips (one key, one DID), as in Python.
import { InvalidInput, FormatError } from './errors.js';
import { b64dec } from './b64.js';

const B58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
const B58_INDEX = new Map([...B58].map((c, i) => [c, BigInt(i)]));
const PREFIX = 'did:key:z';

export function base58btcEncode(bytes) {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  let out = '';
  while (n > 0n) { out = B58[Number(n % 58n)] + out; n /= 58n; }
  for (const b of bytes) { if (b) break; out = '1' + out; } // leading zero bytes -> "1"
  return out;
}
export function base58btcDecode(text) {
  let n = 0n;
  for (const c of text) {
    const d = B58_INDEX.get(c);
    if (d === undefined) throw new InvalidInput('did:key is not valid base58btc');
    n = n * 58n + d;
  }
  const out = [];
  while (n > 0n) { out.unshift(Number(n & 255n)); n >>= 8n; }
  for (const c of text) { if (c !== '1') break; out.unshift(0); }
  return Uint8Array.from(out);
}

export function didKeyFromPublic(pub) {
  if (!(pub instanceof Uint8Array) || pub.length !== 32) throw new InvalidInput('Ed25519 public key must be 32 bytes');
  const raw = new Uint8Array(34); raw[0] = 0xed; raw[1] = 0x01; raw.set(pub, 2);
  return PREFIX + base58btcEncode(raw);
}

/** "did:key:z6Mk..." -> 32-byte Ed25519 public key; InvalidInput for anything else
 * (other methods, other multibase, multicodec other than 0xed01, wrong length, non-canonical). */
export function publicFromDidKey(did) {
  if (typeof did !== 'string' || !did.startsWith(PREFIX)) throw new InvalidInput("expected an Ed25519 did:key ('did:key:z6Mk...')");
  if (did.length > 64) throw new InvalidInput('did:key is too long for an Ed25519 key');
  const raw = base58btcDecode(did.slice(PREFIX.length));
  if (raw[0] !== 0xed || raw[1] !== 0x01) throw new InvalidInput('did:key is not an Ed25519 key (multicodec prefix must be 0xed01)');
  if (raw.length !== 34) throw new InvalidInput('did:key Ed25519 key must be 32 bytes');
  const pub = raw.slice(2);
  if (didKeyFromPublic(pub) !== did) throw new InvalidInput('did:key is not in canonical base58btc form');
  return pub;
}

/** An OAP entry signer -> public key: "did:key:z6Mk..." or "ed25519:<base64 of 32 bytes>" (did.py parse_signer). */
export function parseSigner(text) {
  if (typeof text === 'string' && text.startsWith('ed25519:')) {
    let pub;
    try { pub = b64dec(text.slice(8), 'ed25519 key'); } catch (e) {
      if (e instanceof FormatError) throw new InvalidInput(`signer: ${e.reason}`);
      throw e;
    }
    if (pub.length !== 32) throw new InvalidInput('signer: ed25519 key must be 32 bytes');
    return pub;
  }
  if (typeof text === 'string' && text.startsWith('did:')) return publicFromDidKey(text);
  throw new InvalidInput("signer must be a did:key or 'ed25519:<base64 key>'");
}
