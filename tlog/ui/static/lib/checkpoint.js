// C2SP tlog-checkpoint v1.0.0 (c2sp.md §2) and the tlog-cosignature v1.0.1
// signed message (§3), mirroring tlog/formats/checkpoint.py. Parsing is strict:
// exactly one accepted spelling of each field.
//   origin "\n" size "\n" base64(root) "\n" [extension lines "\n"]
import { b64enc, b64decHash, utf8, fromUtf8, isWellFormed, concat } from './b64.js';
import { FormatError } from './errors.js';

export const MAX_ORIGIN_BYTES = 255;
export const MAX_TREE_SIZE = 2n ** 64n - 1n;
export const MAX_COSIGNATURE_TIMESTAMP = 2n ** 63n - 1n;
const CONTROL = /[\x00-\x09\x0b-\x1f]/;

function checkLine(line, what) {
  if (typeof line !== 'string' || !line) throw new FormatError(`checkpoint ${what} must be a non-empty string`);
  if (line.includes('\n') || CONTROL.test(line)) throw new FormatError(`checkpoint ${what} contains a control character`);
  if (!isWellFormed(line)) throw new FormatError(`checkpoint ${what} is not valid UTF-8`);
}

/** Parse checkpoint note text (no signature lines) -> {origin, size: BigInt, root, extensions}. */
export function parseCheckpoint(text) {
  if (text instanceof Uint8Array) text = fromUtf8(text, 'checkpoint');
  if (typeof text !== 'string') throw new FormatError('checkpoint must be str or bytes');
  if (!text.endsWith('\n')) throw new FormatError('checkpoint text must end with a newline');
  const lines = text.slice(0, -1).split('\n');
  if (lines.length < 3) throw new FormatError('checkpoint needs origin, size and root lines');
  const [origin, sizeText, rootText, ...extensions] = lines;
  if (!origin) throw new FormatError('checkpoint origin is empty');
  // ASCII decimal, no sign, no leading zeros; at most 20 digits (uint64).
  if (sizeText.length > 20 || !/^(?:0|[1-9][0-9]*)$/.test(sizeText))
    throw new FormatError('checkpoint size must be decimal with no sign or leading zeros');
  const root = b64decHash(rootText, 'checkpoint root');
  const cp = { origin, size: BigInt(sizeText), root, extensions };
  checkCheckpoint(cp);
  return cp;
}

/** The invariants of tlog/formats/checkpoint.py Checkpoint.__post_init__. */
export function checkCheckpoint(cp) {
  checkLine(cp.origin, 'origin');
  if (utf8(cp.origin).length > MAX_ORIGIN_BYTES) throw new FormatError(`checkpoint origin longer than ${MAX_ORIGIN_BYTES} bytes`);
  if (typeof cp.size !== 'bigint' || cp.size < 0n || cp.size > MAX_TREE_SIZE) throw new FormatError('checkpoint size out of range');
  if (!(cp.root instanceof Uint8Array) || cp.root.length !== 32) throw new FormatError('checkpoint root must be 32 bytes');
  for (const ext of cp.extensions) checkLine(ext, 'extension line');
}

/** The note text of a checkpoint; every line, including the last, ends in "\n". */
export function formatCheckpoint(cp) {
  checkCheckpoint(cp);
  return [cp.origin, cp.size.toString(), b64enc(cp.root), ...cp.extensions].map((l) => l + '\n').join('');
}

/** tlog-cosignature v1.0.1: "cosignature/v1\n" "time <ts>\n" || checkpoint text (its final
 * "\n" included, no signature lines). Takes text or bytes; returns bytes. */
export function cosignatureMessage(checkpointText, timestamp) {
  const ts = BigInt(timestamp);
  if (ts < 0n || ts > MAX_COSIGNATURE_TIMESTAMP) throw new FormatError('cosignature timestamp out of range 0..2^63-1');
  const body = typeof checkpointText === 'string' ? utf8(checkpointText) : checkpointText;
  if (body[body.length - 1] !== 0x0a) throw new FormatError('checkpoint text must end with a newline');
  return concat(utf8(`cosignature/v1\ntime ${ts}\n`), body);
}
