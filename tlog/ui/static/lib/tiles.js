// C2SP tlog-tiles v0.1.0 path maths and entry bundles (c2sp.md §5), mirroring
// tlog/formats/tiles.py, so the explorer can name the static resources it fetches:
//   <prefix>/tile/<L>/<N>[.p/<W>]       hash tiles (level L = binary Merkle level 8*L)
//   <prefix>/tile/entries/<N>[.p/<W>]   entry bundles (the leaves of tile 0/N)
// N is written in 3-digit groups, all but the last prefixed "x" (1234067 -> x001/x234/067);
// a tile is 256 wide except the rightmost of a level: W = floor(s / 256^L) mod 256.
// Parsing accepts exactly one spelling per tile (what tilePath would write).
import { FormatError, pyRepr } from './errors.js';

export const TILE_HEIGHT = 8, TILE_WIDTH = 256, MAX_LEVEL = 63;
export const MAX_INDEX = (1n << 63n) - 1n;
const PATH_RE = /^tile\/(entries|0|[1-9][0-9]?)\/((?!x000\/)(?:x[0-9]{3}\/)*[0-9]{3})(?:\.p\/([1-9][0-9]{0,2}))?$/;

function check(level, index, width) {
  if (level !== null && !(level >= 0 && level <= MAX_LEVEL)) throw new RangeError(`tile level ${level} outside 0..${MAX_LEVEL}`);
  if (!(index >= 0n && index <= MAX_INDEX)) throw new RangeError(`tile index ${index} outside 0..2^63-1`);
  if (!(width >= 1 && width <= TILE_WIDTH)) throw new RangeError(`tile width ${width} outside 1..${TILE_WIDTH}`);
}
function indexPath(index) {
  let d = index.toString();
  d = '0'.repeat((3 - (d.length % 3)) % 3) + d;
  const groups = d.match(/.{3}/g);
  return [...groups.slice(0, -1).map((g) => 'x' + g), groups[groups.length - 1]].join('/');
}
const suffix = (w) => (w === TILE_WIDTH ? '' : `.p/${w}`);

/** "tile/<L>/<N>[.p/<W>]" (index: number or BigInt). */
export function tilePath(level, index, width = TILE_WIDTH) {
  index = BigInt(index); check(level, index, width);
  return `tile/${level}/${indexPath(index)}${suffix(width)}`;
}
/** "tile/entries/<N>[.p/<W>]": the bundle of leaves 256*N ... */
export function entriesPath(index, width = TILE_WIDTH) {
  index = BigInt(index); check(null, index, width);
  return `tile/entries/${indexPath(index)}${suffix(width)}`;
}

/** Parse a canonical tile path -> {level (null for entries), index: BigInt, width}; FormatError otherwise. */
export function parseTilePath(path) {
  if (typeof path !== 'string') throw new FormatError('tile path must be a string');
  if (path.length > 256) throw new FormatError('tile path too long');
  const m = PATH_RE.exec(path);
  if (!m) throw new FormatError(`malformed tile path ${pyRepr(path)}`);
  const level = m[1] === 'entries' ? null : Number(m[1]);
  if (level !== null && level > MAX_LEVEL) throw new FormatError(`tile level ${level} outside 0..${MAX_LEVEL}`);
  let width = TILE_WIDTH;
  if (m[3] !== undefined) {
    width = Number(m[3]);
    if (width >= TILE_WIDTH) throw new FormatError(`partial tile width ${width} outside 1..255`);
  }
  const index = BigInt(m[2].replace(/[x/]/g, ''));
  if (index > MAX_INDEX) throw new FormatError('tile index overflows 2^63-1');
  return { level, index, width };
}

/** Width of the rightmost tile at `level` for tree size `size`; 0 when there is none. */
export const partialWidth = (size, level) => Number((BigInt(size) >> BigInt(TILE_HEIGHT * level)) % 256n);

/** Every hash tile of a tree of `size`, level by level, left to right (tiles.py tiles_for_size). */
export function tilesForSize(size) {
  size = BigInt(size);
  if (!(size >= 0n && size <= MAX_INDEX)) throw new RangeError('tree size outside 0..2^63-1');
  const out = [];
  for (let level = 0; size >> BigInt(TILE_HEIGHT * level); level++) {
    const full = size >> BigInt(TILE_HEIGHT * (level + 1));
    for (let n = 0n; n < full; n++) out.push({ level, index: n, width: TILE_WIDTH });
    const w = partialWidth(size, level);
    if (w) out.push({ level, index: full, width: w });
  }
  return out;
}

/** Where leaf `index` of a tree of `size` is served: its entry bundle path and position in it. */
export function entryLocation(index, size) {
  const i = BigInt(index), s = BigInt(size);
  if (!(i >= 0n && i < s)) throw new RangeError(`index ${index} is outside a tree of size ${size}`);
  const n = i / 256n, full = s / 256n;
  return { path: entriesPath(n, n < full ? TILE_WIDTH : Number(s % 256n)), offset: Number(i % 256n) };
}

/** The entries of a tlog-tiles entry bundle (uint16 BE length || bytes, repeated); the first
 * `limit` of them if given. FormatError when truncated (tiles.py parse_entry_bundle). */
export function parseEntryBundle(data, limit = null) {
  const out = [];
  let pos = 0;
  while (pos < data.length && (limit === null || out.length < limit)) {
    if (pos + 2 > data.length) throw new FormatError('entry bundle is truncated');
    const k = (data[pos] << 8) | data[pos + 1];
    if (pos + 2 + k > data.length) throw new FormatError('entry bundle is truncated');
    out.push(data.slice(pos + 2, pos + 2 + k));
    pos += 2 + k;
  }
  return out;
}
