// The explorer core in one import: `import * as oap from './lib/index.js'`.
// Each module is usable on its own; docs/architecture.md §3.6-3.7 says what each verifier checks.
export * from './errors.js';
export * from './b64.js';
export * from './merkle.js';
export * from './ed25519.js';
export * from './checkpoint.js';
export * from './note.js';
export * from './policy.js';
export * from './bundle.js';
export * from './jcs.js';
export { decodeCBOR, dcbor, decodeEntry, verifyEntryResponse, canonicalEntry, MAX_ENTRY_BYTES } from './cbor.js';
export * from './didkey.js';
export * from './times.js';
export { TILE_HEIGHT, TILE_WIDTH, MAX_LEVEL, tilePath, entriesPath, parseTilePath, partialWidth, tilesForSize, entryLocation, parseEntryBundle } from './tiles.js';
export { checkRecord, validateConformance, recordPath, classify, vcStatusKey, verifyGitPath, KILL_SWITCH_CLASSES } from './records.js';
export * from './anchors.js';
export * from './dataintegrity.js';
export * from './conformance.js';
export * from './independence.js';
export * from './statuslist.js';
export { checkJsonValue } from './jsonvalue.js';
export * from './status.js';
export * from './keyrotation.js';
export * from './diddoc.js';
export * from './receipts.js';
