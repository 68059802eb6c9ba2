// A log read through its tiles alone (C2SP tlog-tiles), mirroring tlog/client/tilereader.py
// (TileTree) and tlog/merkle/tree.py (TreeView): the root, RFC 9162 inclusion proofs and
// consistency proofs of a tree of `size`, computed from hash tiles fetched with
// `fetchTile(path)`. Tiles are untrusted: a caller compares `root()` with a checkpoint root
// it verified, or verifies the proofs against signed roots (merkle.js). Node hashes are
// memoized, so the proofs of a page of neighbouring entries cost a few tiles' worth of
// hashing. Sizes and indices are BigInts (numbers are converted).
import { nodeHash, EMPTY_ROOT } from './merkle.js';
import { tilePath, TILE_HEIGHT, TILE_WIDTH } from './tiles.js';
import { FormatError } from './errors.js';

const H = BigInt(TILE_HEIGHT), W = BigInt(TILE_WIDTH);
const height = (n) => { let h = 0n; while ((1n << h) < n) h++; return h; }; // ceil(log2 n)

export class TileTree {
  /** size: the tree size; fetchTile(path) -> Promise<Uint8Array> of the tile at "tile/…". */
  constructor(size, fetchTile) {
    this.size = BigInt(size);
    if (this.size < 0n) throw new RangeError('negative tree size');
    this.fetchTile = fetchTile;
    this.tiles = new Map(); // path -> Promise<Uint8Array>
    this.nodes = new Map(); // "level/index" -> Promise<Uint8Array>
    this.edges = null;
  }

  /** Path of tile (L, N) as it exists at this size (full, or partial at the right edge). */
  tileRef(tileLevel, index) {
    const count = this.size >> (H * BigInt(tileLevel));
    let width = count - BigInt(index) * W;
    if (width <= 0n) throw new RangeError(`tile ${tileLevel}/${index} does not exist at size ${this.size}`);
    if (width > W) width = W;
    return { path: tilePath(tileLevel, index, Number(width)), width: Number(width) };
  }

  tile(tileLevel, index) {
    const { path, width } = this.tileRef(tileLevel, index);
    let p = this.tiles.get(path);
    if (!p) {
      p = this.fetchTile(path).then((data) => {
        if (!(data instanceof Uint8Array) || data.length !== width * 32)
          throw new FormatError(`tile ${path} has ${data && data.length} bytes, expected ${width * 32}`);
        return data;
      });
      p.catch(() => this.tiles.delete(path)); // a failed read may be retried
      this.tiles.set(path, p);
    }
    return p;
  }

  /** Hash of the complete node (level, index), from the tile row at level 8*floor(level/8)
   * (tilereader.py complete), its inner nodes memoized. */
  complete(level, index) {
    level = BigInt(level); index = BigInt(index);
    const key = `${level}/${index}`;
    let p = this.nodes.get(key);
    if (!p) {
      if (level % H === 0n) {
        p = this.tile(Number(level / H), index / W).then((data) => {
          const off = Number(index % W) * 32;
          return data.slice(off, off + 32);
        });
      } else {
        p = Promise.all([this.complete(level - 1n, 2n * index), this.complete(level - 1n, 2n * index + 1n)])
          .then(([a, b]) => nodeHash(a, b));
      }
      p.catch(() => this.nodes.delete(key));
      this.nodes.set(key, p);
    }
    return p;
  }

  /** The hashes of the incomplete nodes on the right edge (tree.py TreeView.__init__). */
  async edge() {
    if (this.edges) return this.edges;
    const edge = new Map(), size = this.size;
    for (let k = 1n; k <= height(size); k++) {
      if (size % (1n << k) === 0n) continue;
      const j = size >> k, rest = size - (j << k), half = 1n << (k - 1n);
      if (rest <= half) edge.set(k, rest < half ? edge.get(k - 1n) : await this.complete(k - 1n, 2n * j));
      else edge.set(k, await nodeHash(await this.complete(k - 1n, 2n * j), edge.get(k - 1n)));
    }
    this.edges = edge;
    return edge;
  }

  /** The tree's root hash (RFC 9162 MTH). */
  async root() {
    const n = this.size;
    if (n === 0n) return EMPTY_ROOT;
    if ((n & (n - 1n)) === 0n) return this.complete(height(n), 0n);
    return (await this.edge()).get(height(n));
  }

  async node(level, index) {
    const start = index << level;
    if (start >= this.size) throw new RangeError(`node (${level}, ${index}) is outside a tree of size ${this.size}`);
    if (start + (1n << level) <= this.size) return this.complete(level, index);
    return (await this.edge()).get(level);
  }

  /** Sibling hashes from node (level, index) up to the root, in RFC 9162 order. */
  async path(level, index) {
    const out = [];
    let k = BigInt(level), j = BigInt(index);
    const n = this.size;
    while ((1n << k) < n) {
      const s = j ^ 1n;
      if ((s << k) < n) out.push(await this.node(k, s));
      k++; j >>= 1n;
    }
    return out;
  }

  /** RFC 9162 §2.1.3.1 PATH(index, D[0:size]). */
  inclusionProof(index) {
    index = BigInt(index);
    if (!(index >= 0n && index < this.size)) throw new RangeError(`index ${index} is not in a tree of size ${this.size}`);
    return this.path(0n, index);
  }

  /** RFC 9162 §2.1.4.1 PROOF(old, D[0:size]). */
  async consistencyProof(old) {
    old = BigInt(old);
    if (!(old >= 0n && old <= this.size)) throw new RangeError(`old size ${old} is not within 0..${this.size}`);
    if (old === 0n || old === this.size) return [];
    let level = 0n;
    while (((old >> level) & 1n) === 0n) level++;
    const index = (old - 1n) >> level;
    const p = await this.path(level, index);
    return index === 0n ? p : [await this.node(level, index), ...p];
  }
}
