// The test suite, shared by Node (run.mjs) and the browser page (page.js):
// the c2sp.md test vectors, negative cases, and the cross-checks against the
// Python implementation's verdicts in fixtures/*.json (make_fixtures.py).
// `load(name)` returns a fixture's text; `log(line)` reports. No Node APIs here.
import * as E from '../../../tlog/ui/static/lib/errors.js';
import { b64enc, b64dec, hex, unhex, utf8, concat, bytesEqual } from '../../../tlog/ui/static/lib/b64.js';
import { sha256, leafHash, nodeHash, rootOfLeafHashes, verifyInclusion, verifyConsistency, EMPTY_ROOT } from '../../../tlog/ui/static/lib/merkle.js';
import { parseVkey, cosignerVerifier, openNote, parseNote, cosignatureTimestamp, keyId, Verifier, ED25519, COSIGNATURE_V1 } from '../../../tlog/ui/static/lib/note.js';
import { parseCheckpoint, formatCheckpoint, cosignatureMessage } from '../../../tlog/ui/static/lib/checkpoint.js';
import { parsePolicy, quorumMet, policyToText } from '../../../tlog/ui/static/lib/policy.js';
import { parseProofBundle, formatProofBundle, TrustPolicy, cosignatureAges, verifyWitnessCosignature } from '../../../tlog/ui/static/lib/bundle.js';
import { parseJSON, jcs, receiptHash } from '../../../tlog/ui/static/lib/jcs.js';
import { decodeCBOR, dcbor, decodeEntry, canonicalEntry, verifyEntryResponse } from '../../../tlog/ui/static/lib/cbor.js';
import { tilePath, entriesPath, parseTilePath, tilesForSize, entryLocation, parseEntryBundle } from '../../../tlog/ui/static/lib/tiles.js';
import { TileTree } from '../../../tlog/ui/static/lib/tilereader.js';
import { publicFromDidKey, didKeyFromPublic, parseSigner } from '../../../tlog/ui/static/lib/didkey.js';
import { ed25519Supported, ed25519Verify } from '../../../tlog/ui/static/lib/ed25519.js';
import { verifyStatus } from '../../../tlog/ui/static/lib/status.js';
import { subtreeMessage, mldsa44Verify } from '../../../tlog/ui/static/lib/mldsa.js';
import { ml_dsa44 } from '../../../tlog/ui/static/lib/noble/post-quantum-ml-dsa.js';
import { shake256 } from '../../../tlog/ui/static/lib/noble/hashes-sha3.js';
import { checkRecord } from '../../../tlog/ui/static/lib/records.js';
import { verifyProof, hashData, fromMultibase, proofsOf } from '../../../tlog/ui/static/lib/dataintegrity.js';
import { parseAnchors, isAnchorsFile } from '../../../tlog/ui/static/lib/anchors.js';

const D = '\u2014'; // em dash

export async function runAll({ load, log = () => {}, skip = [] }) {
  const results = { passed: 0, failed: 0, skipped: 0, failures: [], groups: {} };
  let group = '';
  const check = async (name, fn) => {
    const g = (results.groups[group] ??= { passed: 0, failed: 0 });
    try {
      await fn();
      results.passed++; g.passed++;
    } catch (e) {
      results.failed++; g.failed++;
      const msg = `${group}: ${name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`;
      results.failures.push(msg);
      log('FAIL ' + msg);
    }
  };
  const section = (g) => { group = g; log(`-- ${g}`); };
  const ok = (cond, msg = 'assertion failed') => { if (!cond) throw new Error(msg); };
  const eq = (a, b, msg = '') => {
    const sa = show(a), sb = show(b);
    if (sa !== sb) throw new Error(`${msg} expected ${sb.slice(0, 300)} got ${sa.slice(0, 300)}`);
  };
  const rejects = async (fn, Cls, reason) => {
    try { await fn(); } catch (e) {
      if (Cls && !(e instanceof Cls)) throw new Error(`expected ${Cls.name}, got ${e && e.name}: ${e && e.message}`);
      if (reason !== undefined && !(reason instanceof RegExp ? reason.test(e.reason) : e.reason === reason))
        throw new Error(`expected reason ${JSON.stringify(String(reason))}, got ${JSON.stringify(e.reason)}`);
      return e;
    }
    throw new Error(`expected ${Cls ? Cls.name : 'an error'}, but it succeeded`);
  };
  // Python verdict {ok, result} / {ok:false, error, message} vs a JS call.
  const CLASS = { TooLarge: 'InvalidInput', JSONDecodeError: 'InvalidInput', AnchorError: 'StatusVerificationError' };
  const sameVerdict = async (expect, fn, { messages = true, map = (x) => x } = {}) => {
    let got;
    try { got = await fn(); } catch (e) {
      if (!(e instanceof E.OAPError)) throw e;
      if (expect.ok) throw new Error(`Python accepts (${show(expect.result).slice(0, 120)}), JS refuses: ${e.name}: ${e.reason}`);
      const want = CLASS[expect.error] ?? expect.error;
      if (e.name !== want) throw new Error(`Python ${expect.error} (${expect.message}), JS ${e.name} (${e.reason})`);
      if (messages && e.reason !== expect.message) throw new Error(`reason differs: Python ${JSON.stringify(expect.message)}, JS ${JSON.stringify(e.reason)}`);
      return;
    }
    if (!expect.ok) throw new Error(`Python refuses (${expect.error}: ${expect.message}), JS accepts`);
    eq(map(got), expect.result);
  };
  const fixture = async (name) => parseJSON(await load(name), { strict: false, maxDepth: 1000 });

  section('environment');
  await check('WebCrypto Ed25519 is available', async () => ok(await ed25519Supported(), 'no Ed25519 in WebCrypto'));

  // ---------------------------------------------------------------- c2sp.md vectors
  section('V1 Go note');
  const peterV = 'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW';
  const enochV = 'EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop';
  const text1 = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
  const peterLine = `${D} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`;
  const enochLine = `${D} EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n`;
  const note1 = text1 + '\n' + peterLine;
  await check('Peter vkey parses, key is the published pub, key ID c74f20a3', async () => {
    const v = await parseVkey(peterV);
    eq(hex(v.public), '1a5cd907143c384c41e830c5bce12aa8817ec5649aaabf2c31388b35b2d744d6');
    eq(v.keyIdHex, 'c74f20a3'); eq(v.type, ED25519); eq(v.vkey, peterV);
  });
  await check('Peter signature verifies', async () => {
    const { note, verified } = await openNote(note1, [await parseVkey(peterV)]);
    eq(note.text, text1); eq(verified.length, 1); eq(verified[0].verifier.name, 'PeterNeumann');
  });
  await check('Peter + Enoch both verify (order kept)', async () => {
    const { verified } = await openNote(note1 + enochLine, [await parseVkey(enochV), await parseVkey(peterV)]);
    eq(verified.map((v) => v.verifier.name), ['PeterNeumann', 'EnochRoot']);
  });
  await check('only Enoch trusted: Peter ignored, Enoch verifies', async () => {
    const { verified } = await openNote(note1 + enochLine, [await parseVkey(enochV)]);
    eq(verified.map((v) => v.verifier.name), ['EnochRoot']);
  });
  await check('Peter skey seed gives the public key (WebCrypto pkcs8)', async () => {
    const seed = unhex('810a1402d5146c8d84f2443330f54080ebf98ee17d9c74f6252fc5d5c7283173');
    const key = await importSeed(seed);
    eq(hex(b64url(key.jwk.x)), '1a5cd907143c384c41e830c5bce12aa8817ec5649aaabf2c31388b35b2d744d6');
    const sig = new Uint8Array(await crypto.subtle.sign('Ed25519', key.priv, utf8(text1)));
    eq(`${D} PeterNeumann ${b64enc(concat(unhex('c74f20a3'), sig))}\n`, peterLine, 'Sign(text) reproduces the line');
  });
  await check('reject vkey: wrong key length', () => rejects(() => parseVkey('PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY=='), E.FormatError));
  await check('reject vkey: unknown algorithm', () => rejects(() => parseVkey('PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW'), E.FormatError, 'unknown key type 101'));
  const peter = await parseVkey(peterV);
  const badNotes = {
    'text only': text1, 'text + "\\n"': text1 + '\n', 'sigline without final newline': text1 + '\n' + peterLine.slice(0, -1),
    '"\\x01" + note': '\x01' + note1, '"\\xff" + note (invalid UTF-8)': concat(Uint8Array.of(0xff), utf8(note1)),
    'Bad Name': text1 + `\n${D} Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`,
    'unexpected line': note1 + 'Unexpected line.\n', '101 signatures': text1 + '\n' + peterLine.repeat(101),
  };
  for (const [name, n] of Object.entries(badNotes)) await check(`reject note: ${name}`, () => rejects(() => openNote(n, [peter]), E.FormatError));
  await check('16 copies of the sigline: parse accepts, open refuses the duplicate', async () => {
    eq(parseNote(text1 + '\n' + peterLine.repeat(16)).signatures.length, 16);
    await rejects(() => openNote(text1 + '\n' + peterLine.repeat(16), [peter]), E.FormatError, "note has two signatures from 'PeterNeumann'");
  });
  await check('tampered text fails with SignatureError', () => rejects(() => openNote(note1.replace('answer', 'Answer'), [peter]), E.SignatureError, "signature by 'PeterNeumann' does not verify"));
  await check('wrong key (Enoch only, no Enoch line) -> UnknownKeyError', () => rejects(async () => openNote(note1, [await parseVkey(enochV)]), E.UnknownKeyError));

  section('V2 C2SP signed-note example');
  await check('example.com/foo verifies', async () => {
    const n = `This is an example message.\n\n${D} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n`;
    const { note } = await openNote(n, [await parseVkey('example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k')]);
    eq(note.text, 'This is an example message.\n');
  });

  section('V3 sum.golang.org checkpoint');
  const goNote = `go.sum database tree\n35225469\nvt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ=\n\n${D} sum.golang.org Az3grpukl5AXaVfYkLiDGORx/DN2nlcS5kZHR5uYOBV2KA2HgXpD+gu9HHONebHLAyaKbbTM75QTtPydhKCExixSfwQ=\n`;
  const goV = 'sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8';
  await check('signature verifies and the checkpoint parses', async () => {
    const { note } = await openNote(goNote, [await parseVkey(goV)]);
    const cp = parseCheckpoint(note.text);
    eq(cp.origin, 'go.sum database tree'); eq(cp.size, 35225469n); eq(b64enc(cp.root), 'vt5T6GaLCXvyHFl9VUvvItR43XZxfLgftEcTyO3eJCQ=');
    eq(formatCheckpoint(cp), note.text);
  });
  await check('TrustPolicy refuses it: origin is not the key name (as verifier.py does)', async () => {
    const tp = await TrustPolicy.forLog(goV);
    await rejects(() => tp.verifyCheckpoint(goNote), E.PolicyError, "checkpoint origin 'go.sum database tree' does not match the log key 'sum.golang.org'");
  });
  await check('... and accepts it with the origin pinned; a wrong pin is refused', async () => {
    eq((await (await TrustPolicy.forLog(goV, { origin: 'go.sum database tree' })).verifyCheckpoint(goNote)).checkpoint.size, 35225469n);
    await rejects(async () => (await TrustPolicy.forLog(goV, { origin: 'other' })).verifyCheckpoint(goNote), E.PolicyError);
  });

  section('V4 witness scenario');
  const O = 'sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562';
  const v4V = `${O}+5202289b+Af/cLU2Y5BJNP+r3iMDC+av9eWCD0fBJVDfzAux5zxAP`;
  const cpNote = (size, root, sig, origin = O) => `${origin}\n${size}\n${root}\n\n${D} ${origin} ${sig}\n`;
  const cp1 = cpNote(1, 'KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', 'UgIom7fPZTqpxWWhyjWduBvTvGVqsokMbqTArsQilegKoFBJQjUFAmQ0+YeSPM3wfUQMFSzVnnNuWRTYrajXpNUbIQY=');
  const cp3 = cpNote(3, 'RcCI1Nk56ZcSmIEfIn0SleqtV7uvrlXNccFx595Iwl0=', 'UgIom2VbtIcdFbwFAy1n7s6IkAxIY6J/GQOTuZF2ORV39d75cbAj2aQYwyJre36kezNobZs4SUUdrcawfAB8WVrx6go=');
  const cp5 = cpNote(5, 'QrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=', 'UgIomw/EOJmWi0i1FQsOj+etB7F8IccFam/jgd6wzRns4QPVmyEZtdvl1U2KEmLOZ/ASRcWJi0tW90dJWAShei7sDww=');
  const v4 = await parseVkey(v4V);
  await check('vkey has the published key', () => eq(hex(v4.public), 'ffdc2d4d98e4124d3feaf788c0c2f9abfd796083d1f0495437f302ec79cf100f'));
  const cps = {};
  for (const [n, c] of [[1, cp1], [3, cp3], [5, cp5]]) await check(`checkpoint ${n} verifies`, async () => {
    const tp = await TrustPolicy.forLog(v4V);
    cps[n] = (await tp.verifyCheckpoint(c)).checkpoint;
    eq(cps[n].size, BigInt(n));
  });
  const leaves = [0, 1, 2, 3, 4].map((i) => { const h = new Uint8Array(32); h[0] = 0x2a; h[1] = i; return h; });
  await check('roots of the 0x2a leaves match the checkpoints', async () => {
    for (const n of [1, 3, 5]) eq(b64enc(await rootOfLeafHashes(leaves.slice(0, n))), b64enc(cps[n].root));
  });
  const P = (s) => s.split(' ').map((x) => b64dec(x));
  const p13 = P('KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=');
  const p15 = P('KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= +fUDV+k970B4I3uKrqJM4aP1lloPZP8mvr2Z4wRw2LI= KgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=');
  const p35 = P('KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= KgMAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= wgiIFdZfYNv6WU1OllBKsWnLYIS/DBMqt8Uh/S4OukE= KgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=');
  await check('consistency 1->3, 1->5, 3->5 verify', async () => {
    await verifyConsistency(1, 3, cps[1].root, cps[3].root, p13);
    await verifyConsistency(1, 5, cps[1].root, cps[5].root, p15);
    await verifyConsistency(3, 5, cps[3].root, cps[5].root, p35);
  });
  await check('step 2: corrupted signature (...6gx=) is a failed signature, not a format error', async () => {
    const tp = await TrustPolicy.forLog(v4V);
    await rejects(() => tp.verifyCheckpoint(cp3.replace('6go=', '6gx=')), E.PolicyError, "the log's signature on the checkpoint does not verify");
    await rejects(() => openNote(cp3.replace('6go=', '6gx='), [v4]), E.SignatureError);
  });
  await check('step 3: other origin (e563) -> unknown log', async () => {
    const o2 = O.slice(0, -1) + '3';
    const tp = await TrustPolicy.forLog(v4V);
    await rejects(() => tp.verifyCheckpoint(cpNote(3, 'RcCI1Nk56ZcSmIEfIn0SleqtV7uvrlXNccFx595Iwl0=', 'UgIom2VbtIcdFbwFAy1n7s6IkAxIY6J/GQOTuZF2ORV39d75cbAj2aQYwyJre36kezNobZs4SUUdrcawfAB8WVrx6go=', o2)),
      E.PolicyError, 'checkpoint is not signed by a log in the policy');
  });
  await check('step 4: old 1 with no proof fails', () => rejects(() => verifyConsistency(1, 3, cps[1].root, cps[3].root, []), E.ConsistencyProofError));
  await check('step 5: corrupted proof fails', () => rejects(() => verifyConsistency(1, 3, cps[1].root, cps[3].root,
    P('KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABA=')), E.ConsistencyProofError, 'consistency proof does not match the two roots'));
  await check('1->5 proof does not prove 1->3; 3->5 proof does not prove 1->5', async () => {
    await rejects(() => verifyConsistency(1, 3, cps[1].root, cps[3].root, p15), E.ConsistencyProofError);
    await rejects(() => verifyConsistency(1, 5, cps[1].root, cps[5].root, p35), E.ConsistencyProofError);
  });

  section('V5 real Ed25519 cosignatures');
  const fw = `transparency.dev/armored-witness/firmware_transparency/ci/3\n59\nkOFMkeamIdrYFLx5zbWFhflak6dlEEDOU++fxYEZMBw=\n\n` +
    `${D} transparency.dev-aw-ftlog-ci-3 P2iVIt3Jsaha3E2i0MHdKZ6fgYJTgXO86nUsxKPVq6uTwRSclTSh/ELnDGbNL+XDyD3EkWIdL2AGGNmbN7IN2rB/7gE=\n` +
    `${D} ArmoredWitness-weathered-rain CnjfIAAAAABnGRrHjQi7IZQqVea4YnU/ADsv844r1ezGjvubUy1MMJm4as9bRiT70xNWQ67RCA76LMy7SdX4qJNIzL3eSS1BGFWqCw==\n` +
    `${D} ArmoredWitness-floral-sky x88LbQAAAABnGRrDEq4Tfy7IIVPqkdXbcufUkCzRRbE3fABZ/jvtg5aFHVMuMR8cV6dVqECDBiH1zRxhNaCQOXSwNLSeJs+NzWt1BA==\n`;
  const fwLog = 'transparency.dev-aw-ftlog-ci-3+3f689522+Aa1Eifq6rRC8qiK+bya07yV1fXyP156pEMsX7CFBC6gg';
  const wr1 = 'ArmoredWitness-weathered-rain+ea3d386d+AWLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S';
  const wr4 = 'ArmoredWitness-weathered-rain+0a78df20+BGLblKp5JuiyrgRh6ev2nNJ5XAd+sc/mM2D2HW/b4d5S';
  const fs1 = 'ArmoredWitness-floral-sky+504ec40f+AekCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm';
  const fs4 = 'ArmoredWitness-floral-sky+c7cf0b6d+BOkCmTmKTTnQMNqIigkj7PFnhogawSJD23PJ8M8qLYDm';
  await check('log signature verifies', async () => { await openNote(fw, [await parseVkey(fwLog)]); });
  await check('0x01 witness keys recompute to the 0x04 key IDs', async () => {
    eq((await cosignerVerifier(await parseVkey(wr1))).vkey, wr4);
    eq((await cosignerVerifier(await parseVkey(fs1))).vkey, fs4);
  });
  for (const [v, ts] of [[wr1, 1729698503n], [wr4, 1729698503n], [fs1, 1729698499n], [fs4, 1729698499n]])
    await check(`cosignature ${v.split('+')[0]} (${v.split('+')[2][0] === 'A' ? '0x01' : '0x04'} form) verifies, ts ${ts}`, async () => {
      const got = await verifyWitnessCosignature(fw, v, 1729698503 + 3600);
      eq(got.length, 1); eq(got[0].timestamp, ts); eq(got[0].ageSeconds, 1729698503 + 3600 - Number(ts));
    });
  const fwOrigin = 'transparency.dev/armored-witness/firmware_transparency/ci/3';
  await check('default policy refuses it: origin is not the key name (as verifier.py does)', async () => {
    const tp = await TrustPolicy.fromText(`log ${fwLog}\nquorum none\n`);
    await rejects(() => tp.verifyCheckpoint(fw), E.PolicyError, `checkpoint origin '${fwOrigin}' does not match the log key 'transparency.dev-aw-ftlog-ci-3'`);
  });
  await check('policy with the origin pinned: both witnesses, quorum all, with ages', async () => {
    const tp = await TrustPolicy.fromText(`log ${fwLog}\nwitness a ${wr1}\nwitness b ${fs4}\ngroup g all a b\nquorum g\n`, { origin: fwOrigin });
    const vc = await tp.verifyCheckpoint(fw);
    eq([...vc.witnesses].sort(), ['a', 'b']);
    eq(cosignatureAges(vc, 1729698600).map((c) => [c.witness, c.ageSeconds]), [['a', 97], ['b', 101]]);
  });
  await check('a tampered cosignature fails the policy', async () => {
    const tp = await TrustPolicy.fromText(`log ${fwLog}\nwitness a ${wr1}\nquorum a\n`, { origin: fwOrigin });
    await rejects(() => tp.verifyCheckpoint(fw.replace(fwOrigin, fwOrigin + 'x')), E.PolicyError); // breaks the log signature
    await rejects(() => tp.verifyCheckpoint(fw.replace('CnjfIAAAAABnGRrH', 'CnjfIAAAAABnGRrI')), E.PolicyError, "cosignature of witness 'a' does not verify");
  });

  section('V6 ECDSA log signature');
  const px = `developers.google.com/android/binary_transparency/0\n611\n2GZ1zmS5VkfUZmn2ZyR4KZXwHLD+xnwBIWzql/cD50w=\n\n` +
    `${D} pixel_transparency_log csh42zBFAiAd3Y1FwqNTt5RglY0uG7heC6Yu1gEbXXPYmZ7LdOILMAIhAIt68PnR/3TADAaC7hvrSHbpziV7TmpIwOUydLmcjyTQ\n` +
    `${D} ArmoredWitness-small-breeze nRq5UQAAAABnoqrsRIofXn68vTohcAm2KG4ACGyRPNePUk02BSWD0WKV5ElejTk5Z+Tm3GmJ5j/etA+fkL9XuaQsnTyZbr437sF4AQ==\n` +
    `${D} ArmoredWitness-autumn-wood qZb5XQAAAABnoqrl57G9CblEl3lwwuqzbaJvVMqNiZCbYZseYT1YZHYmls3CmT1wxZ1fNgM4RxHuUxjAwcI2ghTx6R5aCg+L0DGPBA==\n`;
  const pxLog = 'pixel_transparency_log+72c878db+AjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABFPN7lzVIk2BOd3Nk33VpqqVttGwV8uChH+RX/HVfBiypVQFyh8o8Ny6fSdxNMgkSf9/VynrgADBeys0r4Q9uPA=';
  await check('ECDSA P-256 log signature verifies (key ID = SHA-256(SPKI)[:4])', async () => {
    const v = await parseVkey(pxLog);
    eq(v.keyIdHex, '72c878db');
    await openNote(px, [v]);
  });
  await check('ECDSA signature over tampered text fails', () => rejects(async () => openNote(px.replace('\n611\n', '\n612\n'), [await parseVkey(pxLog)]), E.SignatureError));
  for (const [v, id, ts] of [['ArmoredWitness-small-breeze+7b3ada3a+AQAWYpUjfGGPQiWOgt6sLWap0P9rVOe+Ofu2uNZbO4FD', '9d1ab951', 1738713836n],
    ['ArmoredWitness-autumn-wood+863571a5+AesIVCbad7gbU07JnA6YfZD0qg4B1c8xF4ISdnt9vjip', 'a996f95d', 1738713829n]])
    await check(`cosignature ${v.split('+')[0]}: key ID ${id}, ts ${ts}`, async () => {
      const got = await verifyWitnessCosignature(px, v, 0);
      eq(got[0].keyId, id); eq(got[0].timestamp, ts);
    });

  section('V7 vkey parsing');
  await check('valid: TEST (0x01 with "+" in base64)', async () => eq((await parseVkey('TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6')).type, ED25519));
  await check('valid: remora (0x04)', async () => eq((await parseVkey('remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2')).type, COSIGNATURE_V1));
  await check('invalid: rekor AwEB', () => rejects(() => parseVkey('rekor.sigstore.dev+12345678+AwEB'), E.FormatError));
  await check('cosignature blob timestamp 1727964367', () =>
    eq(cosignatureTimestamp(b64dec('ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBYJXORmnFBOBA==').subarray(4)), 1727964367n));

  section('V8 cosignature byte for byte');
  await check('witness seed -> vkey, cosign V4 cp1 at 1700000000 reproduces the line, and it verifies', async () => {
    const key = await importSeed(unhex('31ffc2116ecbe003acaa800ab70757bd7d53206e3febef6a6d0796d95530b34f'));
    const pub = b64url(key.jwk.x);
    eq(hex(pub), '64848ad8abed6e85981b3b3875b252b8767ebb4b02f703aca3b1e71bbd6a8e50');
    const v = await Verifier.fromPublic('example.com/witness', COSIGNATURE_V1, pub);
    eq(v.vkey, 'example.com/witness+10a1c019+BGSEitir7W6FmBs7OHWyUrh2frtLAvcDrKOx5xu9ao5Q');
    const text = parseNote(cp1).text;
    const sig = new Uint8Array(await crypto.subtle.sign('Ed25519', key.priv, cosignatureMessage(text, 1700000000)));
    const ts = new Uint8Array(8); new DataView(ts.buffer).setBigUint64(0, 1700000000n);
    const line = `${D} example.com/witness ${b64enc(concat(v.keyId, ts, sig))}\n`;
    eq(line, `${D} example.com/witness EKHAGQAAAABlU/EAx63UqrTpgWwhS2mgX9uIuoao54YP2S3rcDOnUVGFRU5HhEqQQyy+1buBh+kBUoIQpxQbasasirZm28WyE3HDDQ==\n`);
    const got = await verifyWitnessCosignature(cp1 + line, v.vkey, 1700000060);
    eq(got[0].ageSeconds, 60);
  });
  await check('the same cosignature over cp3 fails', async () => {
    const line = `${D} example.com/witness EKHAGQAAAABlU/EAx63UqrTpgWwhS2mgX9uIuoao54YP2S3rcDOnUVGFRU5HhEqQQyy+1buBh+kBUoIQpxQbasasirZm28WyE3HDDQ==\n`;
    await rejects(() => verifyWitnessCosignature(cp3 + line, 'example.com/witness+10a1c019+BGSEitir7W6FmBs7OHWyUrh2frtLAvcDrKOx5xu9ao5Q'), E.SignatureError, "cosignature by 'example.com/witness' does not verify");
  });


  section('V10 tile paths');
  await check('tile and entry bundle paths', () => {
    eq(tilePath(0, 0), 'tile/0/000'); eq(tilePath(0, 0, 255), 'tile/0/000.p/255'); eq(tilePath(1, 0), 'tile/1/000');
    eq(tilePath(15, 455667), 'tile/15/x455/667'); eq(tilePath(15, 123456789, 41), 'tile/15/x123/x456/789.p/41');
    eq(entriesPath(0), 'tile/entries/000'); eq(entriesPath(0, 8), 'tile/entries/000.p/8'); eq(entriesPath(255, 253), 'tile/entries/255.p/253');
  });
  await check('parse OK', () => {
    eq(parseTilePath('tile/0/x001/x234/067'), { level: 0, index: 1234067n, width: 256 });
    eq(parseTilePath('tile/63/x999/x999/x999/x999/x999/999.p/255'), { level: 63, index: 999999999999999999n, width: 255 });
  });
  for (const bad of ['x001/x234/067.p/', 'x001/x234/067.p', 'x001/x234/', 'x001/x234', 'x001/', 'x001', 'x001/.p/abc'])
    await check(`parse ERR tile/0/${bad}`, () => rejects(() => parseTilePath(`tile/0/${bad}`), E.FormatError));
  for (const bad of ['tile/64/000', 'tile/-1/000', 'tile/abc/000', 'tile/0/001/002', 'tile/0/x001/0002', 'tile/0/x001/-002', 'tile/0/x001/002.p/256'])
    await check(`parse ERR ${bad}`, () => rejects(() => parseTilePath(bad), E.FormatError));
  await check('size 70000: tile/0/000..272 full, 273.p/112, tile/1/000, tile/1/001.p/17, tile/2/000.p/1', () => {
    const paths = tilesForSize(70000).map((t) => tilePath(t.level, t.index, t.width));
    eq(paths.length, 273 + 1 + 2 + 1);
    eq(paths[0], 'tile/0/000'); eq(paths[272], 'tile/0/272'); eq(paths.slice(273), ['tile/0/273.p/112', 'tile/1/000', 'tile/1/001.p/17', 'tile/2/000.p/1']);
    eq(entryLocation(69999, 70000), { path: 'tile/entries/273.p/112', offset: 111 });
    eq(entryLocation(256, 70000), { path: 'tile/entries/001', offset: 0 });
  });

  section('V11 RFC 6962 Merkle');
  const v11 = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map(unhex);
  const v11roots = ['e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125', 'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
    'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7', '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
    '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef', 'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
    '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328'];
  const v11h = await Promise.all(v11.map(leafHash));
  await check('roots for sizes 0..8', async () => { for (let n = 0; n <= 8; n++) eq(hex(await rootOfLeafHashes(v11h.slice(0, n))), v11roots[n], `size ${n}`); });
  const v11p = P('lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c= Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4= a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=');
  await check('inclusion(leaf 0, size 8)', () => verifyInclusion(0, 8, v11h[0], v11p, unhex(v11roots[8])));
  await check('consistency(1 -> 8)', () => verifyConsistency(1, 8, unhex(v11roots[1]), unhex(v11roots[8]), v11p));
  await check('leaf hash of "hello world"', async () => eq(b64enc(await leafHash(utf8('hello world'))), 'TszzRgjTG6xce+z2AG31kAXYKBgQVtCSCE40HmuwBb0='));
  await check('empty root = SHA-256("")', async () => eq(hex(await sha256(new Uint8Array(0))), hex(EMPTY_ROOT)));
  await check('inclusion: wrong leaf, wrong index, short, long, bad size', async () => {
    await rejects(() => verifyInclusion(0, 8, v11h[1], v11p, unhex(v11roots[8])), E.InclusionProofError, 'inclusion proof does not lead to the checkpoint root');
    await rejects(() => verifyInclusion(1, 8, v11h[0], v11p, unhex(v11roots[8])), E.InclusionProofError);
    await rejects(() => verifyInclusion(0, 8, v11h[0], v11p.slice(0, 2), unhex(v11roots[8])), E.InclusionProofError, 'inclusion proof is too short');
    await rejects(() => verifyInclusion(0, 8, v11h[0], [...v11p, v11p[0]], unhex(v11roots[8])), E.InclusionProofError, 'inclusion proof is too long');
    await rejects(() => verifyInclusion(8, 8, v11h[0], v11p, unhex(v11roots[8])), E.InclusionProofError, 'index 8 is outside a tree of size 8');
  });
  await check('consistency: equal sizes, from empty, bad sizes', async () => {
    await verifyConsistency(8, 8, unhex(v11roots[8]), unhex(v11roots[8]), []);
    await verifyConsistency(0, 8, EMPTY_ROOT, unhex(v11roots[8]), []);
    await rejects(() => verifyConsistency(8, 8, unhex(v11roots[8]), unhex(v11roots[7]), []), E.ConsistencyProofError, 'same size, different roots');
    await rejects(() => verifyConsistency(9, 8, unhex(v11roots[8]), unhex(v11roots[8]), []), E.ConsistencyProofError);
    await rejects(() => verifyConsistency(0, 8, unhex(v11roots[1]), unhex(v11roots[8]), []), E.ConsistencyProofError);
  });

  section('V12 tlog-proof');
  for (const t of ['c2sp.org/tlog-proof@v1\nindex 5\nrzFuy5Go7nrpkhBwKy1HWPMM3eO/YePY54fXRoH5Cm4=\n5784L25ZFbP4hhm4ZiI+vx1RxMUyHMzeLp/3AKMlkIY=\n\ntest checkpoint\n',
    'c2sp.org/tlog-proof@v1\nextra ZXh0cmEgaW5mb3JtYXRpb24=\nindex 10\nrzFuy5Go7nrpkhBwKy1HWPMM3eO/YePY54fXRoH5Cm4=\n\ncheckpoint data\n',
    'c2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint\n'])
    await check(`accept ${JSON.stringify(t.slice(23, 45))}`, () => eq(formatProofBundle(parseProofBundle(t)), t));
  for (const t of ['wrong-header\nindex 0\n\ncheckpoint\n', 'c2sp.org/tlog-proof@v1\nextra !!notbase64!!\nindex 0\n\ncheckpoint\n',
    'c2sp.org/tlog-proof@v1\n\n\ncheckpoint\n', 'c2sp.org/tlog-proof@v1\nindex notanumber\n\ncheckpoint\n', 'c2sp.org/tlog-proof@v1\nindex -5\n\ncheckpoint\n',
    `c2sp.org/tlog-proof@v1\nindex 0\n${b64enc(new Uint8Array(64))}\n\ncheckpoint\n`, 'c2sp.org/tlog-proof@v1\nindex 0\n\n', 'c2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint'])
    await check(`reject ${JSON.stringify(t.slice(0, 40))}`, () => rejects(() => parseProofBundle(t), E.FormatError));
  const v12 = `c2sp.org/tlog-proof@v1\nindex 1\nKgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n+fUDV+k970B4I3uKrqJM4aP1lloPZP8mvr2Z4wRw2LI=\nKgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n${cp5}`;
  const leaf1 = b64dec('KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=');
  await check('the V4-log proof verifies for its leaf hash', async () => {
    const tp = await TrustPolicy.forLog(v4V);
    const got = await tp.verifyBundle(v12, { leaf: leaf1 });
    eq(got.index, 1n); eq(got.checkpoint.checkpoint.size, 5n);
  });
  await check('... and not for another leaf, index, or log', async () => {
    const tp = await TrustPolicy.forLog(v4V);
    await rejects(() => tp.verifyBundle(v12, { leaf: leaves[2] }), E.InclusionProofError);
    await rejects(() => tp.verifyBundle(v12.replace('index 1', 'index 3'), { leaf: leaf1 }), E.InclusionProofError);
    await rejects(() => tp.verifyBundle(v12), E.VerificationError, 'no entry: the bundle has no extra line and none was given');
    await rejects(async () => (await TrustPolicy.forLog(fwLog)).verifyBundle(v12, { leaf: leaf1 }), E.PolicyError, 'checkpoint is not signed by a log in the policy');
  });

  section('V13 checkpoint parsing');
  for (const [t, why] of [['Log\n123\nYmFuYW5hcw==\n', '7-byte hash'], ['\n9944\nYmFuYW5hcw==\n', 'empty origin'], ['Log\n-34\nYmFuYW5hcw==\n', 'negative size']])
    await check(`reject: ${why}`, () => rejects(() => parseCheckpoint(t), E.FormatError));
  await check('origin of 255 bytes accepted, 256 refused', async () => {
    const r = b64enc(new Uint8Array(32));
    eq(parseCheckpoint('x'.repeat(255) + '\n0\n' + r + '\n').origin.length, 255);
    await rejects(() => parseCheckpoint('x'.repeat(256) + '\n0\n' + r + '\n'), E.FormatError, 'checkpoint origin longer than 255 bytes');
  });

  section('W3C vc-di-eddsa eddsa-jcs-2022 test vector (tests/formats/vectors)');
  const vec = parseJSON(await load('../../../formats/vectors/eddsa-jcs-2022.json'), { strict: false });
  await check('hashData is SHA-256(JCS(proof config)) || SHA-256(JCS(document)), as the vector', async () =>
    eq(hex(await hashData(vec.unsigned, vec.proofConfig)), vec.combinedHash));
  await check('proofValue is the vector\'s signature in base58btc', () => eq(hex(fromMultibase(vec.sigBTC58, 'proofValue')), vec.sigHex));
  await check('the signed credential verifies with the did:key of its verification method', async () =>
    eq((await verifyProof(vec.signed, proofsOf(vec.signed)[0], null)).id, vec.proofConfig.verificationMethod.split('#')[0]));
  await check('a changed credential, proof option or signature does not verify', async () => {
    const changed = parseJSON(JSON.stringify(vec.signed), { strict: false });
    changed.credentialSubject.alumniOf = 'Another School';
    await rejects(() => verifyProof(changed, changed.proof, null), E.SignatureError);
    const later = parseJSON(JSON.stringify(vec.signed), { strict: false });
    later.proof.created = '2023-02-24T23:36:39Z';
    await rejects(() => verifyProof(later, later.proof, null), E.SignatureError);
    const ctx = parseJSON(JSON.stringify(vec.signed), { strict: false });
    ctx.proof['@context'] = ['https://www.w3.org/ns/credentials/v2', 'https://x.example/'];
    await rejects(() => verifyProof(ctx, ctx.proof, null), E.SignatureError, "proof: the document's @context does not start with the proof's @context");
  });
  await check('an anchors file and a plain tlog-proof are told apart, and a malformed one is refused', async () => {
    ok(isAnchorsFile(' {"type": "oap-anchors/v1"}') && !isAnchorsFile('c2sp.org/tlog-proof@v1\n') && !isAnchorsFile(5));
    await rejects(async () => parseAnchors('{"type": "oap-anchors/v1", "anchored_in": [], "bundles": []}'), E.FormatError,
      'anchors file: 1 to 32 bundles, each named in anchored_in');
    await rejects(async () => parseAnchors('{nope'), E.FormatError, 'neither a tlog-proof nor an anchors file (JSON)');
  });

  section('did:key');
  await check('did:key round trip and strictness', async () => {
    const pub = unhex('1a5cd907143c384c41e830c5bce12aa8817ec5649aaabf2c31388b35b2d744d6');
    const did = didKeyFromPublic(pub);
    ok(did.startsWith('did:key:z6Mk')); eq(hex(publicFromDidKey(did)), hex(pub)); eq(hex(parseSigner(did)), hex(pub));
    eq(hex(parseSigner('ed25519:' + b64enc(pub))), hex(pub));
    await rejects(() => publicFromDidKey('did:key:z6MkBAD'), E.InvalidInput);
    await rejects(() => publicFromDidKey('did:web:example.com'), E.InvalidInput);
    await rejects(() => publicFromDidKey(did.slice(0, -1) + '0'), E.InvalidInput); // "0" is not base58
    await rejects(() => parseSigner('ed25519:AAAA'), E.InvalidInput, 'signer: ed25519 key must be 32 bytes');
  });

  // ---------------------------------------------------------------- Python cross-checks
  if (!skip.includes('merkle')) {
    section('fixtures/merkle.json (tlog.merkle)');
    const m = await fixture('merkle.json');
    const hs = await Promise.all(m.entries.map((e) => leafHash(unhex(e))));
    await check('roots of sizes 0..70', async () => { for (const [n, r] of Object.entries(m.roots)) eq(b64enc(await rootOfLeafHashes(hs.slice(0, Number(n)))), r, `size ${n}`); });
    await check(`${m.inclusion.length} inclusion proofs verify, each refused when tampered`, async () => {
      for (const c of m.inclusion) {
        const proof = c.proof.map((x) => b64dec(x)), root = b64dec(c.root), leaf = b64dec(c.leaf);
        await verifyInclusion(c.index, c.size, leaf, proof, root);
        if (proof.length) {
          const bad = proof.map((x) => x.slice()); bad[bad.length - 1][5] ^= 1;
          await rejects(() => verifyInclusion(c.index, c.size, leaf, bad, root), E.InclusionProofError);
        }
        const badRoot = root.slice(); badRoot[0] ^= 0x80;
        await rejects(() => verifyInclusion(c.index, c.size, leaf, proof, badRoot), E.InclusionProofError);
      }
    });
    await check(`${m.consistency.length} consistency proofs verify, each refused when tampered`, async () => {
      for (const c of m.consistency) {
        const proof = c.proof.map((x) => b64dec(x)), o = b64dec(c.old_root), n = b64dec(c.new_root);
        await verifyConsistency(c.old, c.new, o, n, proof);
        for (let k = 0; k < proof.length; k++) {
          const bad = proof.map((x) => x.slice()); bad[k][31] ^= 1;
          await rejects(() => verifyConsistency(c.old, c.new, o, n, bad), E.ConsistencyProofError);
        }
        if (c.old > 0 && c.old < c.new) await rejects(() => verifyConsistency(c.old, c.new, n, o, proof), E.ConsistencyProofError);
      }
    });
  }


  section('fixtures/tiles.json (tlog.formats.tiles)');
  const tf = await fixture('tiles.json');
  await check(`tiles_for_size and entries_for_size for ${Object.keys(tf.for_size).length} sizes`, () => {
    for (const [n, want] of Object.entries(tf.for_size)) {
      const tiles = tilesForSize(BigInt(n));
      if (Array.isArray(want.tiles)) eq(tiles.map((t) => tilePath(t.level, t.index, t.width)), want.tiles, `size ${n}`);
      else eq(tiles.length, want.tiles, `size ${n}`);
      eq(tiles.filter((t) => t.level === 0).map((t) => entriesPath(t.index, t.width)).slice(-3), want.entries, `size ${n}`);
    }
  });
  {
    const bad = [];
    for (const c of tf.paths) {
      try { await sameVerdict(c.expect, () => { const r = parseTilePath(c.path); return [r.level, String(r.index), r.width]; }); } catch (e) { bad.push(`${JSON.stringify(c.path)}: ${e.message}`); }
    }
    await check(`${tf.paths.length} tile paths (V10 and mutations): same verdict and reason as parse_tile_path`, () => { if (bad.length) throw new Error(bad.slice(0, 3).join(' || ')); });
  }
  for (const c of tf.entry_bundles) await check(`entry bundle ${c.hex.slice(0, 12)}... limit ${c.limit}`, () =>
    sameVerdict(c.expect, () => parseEntryBundle(unhex(c.hex), c.limit).map(hex)));

  section('lib/tilereader.js (roots and RFC 9162 proofs from tiles, as tlog/client/tilereader.py)');
  {
    // a tiled tree of n leaves, served from memory: levels 0, 8, 16 of the binary tree
    const tiled = async (n) => {
      const leaves = [];
      for (let i = 0; i < n; i++) leaves.push(await leafHash(utf8(`leaf ${i}`)));
      const rows = [leaves];
      while (rows[rows.length - 1].length > 1) {
        const cur = rows[rows.length - 1], next = [];
        for (let i = 0; i + 1 < cur.length; i += 2) next.push(await nodeHash(cur[i], cur[i + 1]));
        rows.push(next);
      }
      const served = [];
      const fetchTile = async (path) => {
        served.push(path);
        const { level, index, width } = parseTilePath(path);
        const row = rows[8 * level] || [], start = Number(index) * 256;
        return concat(...row.slice(start, start + width));
      };
      return { leaves, fetchTile, served };
    };
    for (const n of [1, 2, 3, 5, 255, 256, 257, 513, 1000]) {
      await check(`size ${n}: root, inclusion and consistency proofs from tiles verify against the MTH`, async () => {
        const { leaves, fetchTile } = await tiled(n);
        const tree = new TileTree(n, fetchTile), root = await tree.root();
        eq(root, await rootOfLeafHashes(leaves));
        for (const i of new Set([0, 1, n >> 1, n - 2, n - 1].filter((i) => i >= 0 && i < n)))
          await verifyInclusion(i, n, leaves[i], await tree.inclusionProof(i), root);
        for (const m of new Set([0, 1, n >> 1, n - 1, n].filter((m) => m >= 0 && m <= n)))
          await verifyConsistency(m, n, await rootOfLeafHashes(leaves.slice(0, m)), root, await tree.consistencyProof(m));
      });
    }
    await check('a tile with one changed hash leads to another root; a short tile is refused', async () => {
      const { leaves, fetchTile } = await tiled(300);
      const flipped = async (path) => { const t = (await fetchTile(path)).slice(); t[5] ^= 1; return t; };
      ok(!bytesEqual(await new TileTree(300, flipped).root(), await rootOfLeafHashes(leaves)), 'a changed tile went unnoticed');
      const short = async (path) => (await fetchTile(path)).slice(32);
      await rejects(() => new TileTree(300, short).root(), E.FormatError);
    });
    await check('only the tiles a proof needs are read (size 1000: its own tile, the right edge, level 1)', async () => {
      const { fetchTile, served } = await tiled(1000);
      await new TileTree(1000, fetchTile).inclusionProof(0);
      eq([...new Set(served)].sort(), ['tile/0/000', 'tile/0/003.p/232', 'tile/1/000.p/3']);
    });
  }

  section('fixtures/ed25519.json (PyNaCl/libsodium verdicts on edge cases)');
  const ef = await fixture('ed25519.json');
  for (const c of ef.cases) await check(`${c.name}: ${c.pynacl_accepts ? 'accepted' : 'refused'} as by PyNaCl`, async () => {
    let accepted = true;
    try { await ed25519Verify(unhex(c.pub), unhex(c.msg), unhex(c.sig)); } catch (e) { if (!(e instanceof E.SignatureError)) throw e; accepted = false; }
    eq(accepted, c.pynacl_accepts);
  });

  section('fixtures/notes.json (tlog.formats.note, keys, checkpoint)');
  const nf = await fixture('notes.json');
  for (const c of nf.notes) await check(`note: ${c.name}`, () => sameVerdict(c.expect, async () => {
    const vs = []; for (const v of c.vkeys) vs.push(await parseVkey(v));
    const { note, verified } = await openNote(c.note, vs);
    return { text: note.text, verified: verified.map((v) => [v.verifier.name, v.verifier.keyIdHex, v.timestamp === null ? null : Number(v.timestamp)]) };
  }));
  for (const c of nf.vkeys) await check(`vkey: ${c.vkey.slice(0, 40)}`, () => sameVerdict(c.expect, async () => {
    const v = await parseVkey(c.vkey); return [v.name, v.keyIdHex, v.type];
  }));
  for (const c of nf.checkpoints) await check(`checkpoint: ${JSON.stringify(c.text.slice(0, 24))}`, () => sameVerdict(c.expect, async () => {
    const cp = parseCheckpoint(c.text); return [cp.origin, String(cp.size), b64enc(cp.root), cp.extensions];
  }));

  section('fixtures/bundles.json (tlog.client.verifier, tlog.formats.policy)');
  const bf = await fixture('bundles.json');
  for (const c of bf.bundles) await check(`bundle: ${c.name}`, () => sameVerdict(c.expect, async () => {
    const tp = await TrustPolicy.fromText(bf.policies[c.policy]);
    const args = Object.fromEntries(Object.entries(c.args).map(([k, v]) => [k, b64dec(v)]));
    const v = await tp.verifyBundle(c.bundle, args);
    return { index: Number(v.index), leaf_hash: b64enc(v.leafHash), size: Number(v.checkpoint.checkpoint.size),
      witnesses: [...v.checkpoint.witnesses].sort(), log_key: v.checkpoint.logKey };
  }));
  await check('cosignature timestamps and ages of the bundle checkpoint', async () => {
    const tp = await TrustPolicy.fromText(bf.policies['2 of 3']);
    const vc = await tp.verifyCheckpoint(bf.checkpoint);
    eq(cosignatureAges(vc, bf.witness_timestamps[0] + 1000).map((c) => [c.witness, Number(c.timestamp), c.ageSeconds]),
      [0, 1, 2].map((i) => [`w${i}`, bf.witness_timestamps[i], 1000 - 60 * i]));
  });
  for (const c of bf.policy_texts) await check(`policy: ${JSON.stringify(c.text.slice(0, 30))}`, () => sameVerdict(c.expect, () => {
    const p = parsePolicy(c.text), met = {};
    for (const k of Object.keys(c.expect.ok ? c.expect.result.met : {})) met[k] = quorumMet(p, new Set(k ? k.split(',') : []));
    return { text: policyToText(p), quorum: p.quorum, met };
  }));
  await check('mirror lines: a witness line marked as a mirror, counted in groups, written back (as policy.py)', async () => {
    const w2 = 'witness-2.example+c8e50786+BE7TL2O/NfDu78sl8oouH73Ic64oNWcbDJRg9fEuRVao';
    const text = bf.policies['2 of 3'].replace(`witness w2 ${w2}`, `mirror  w2 ${w2} https://m.example`);
    const p = parsePolicy(text);
    ok(p.witnesses.get('w2').mirror && !p.witnesses.get('w0').mirror);
    eq(p.witnesses.get('w2').url, 'https://m.example');
    ok(quorumMet(p, new Set(['w0', 'w2'])) && !quorumMet(p, new Set(['w2'])));
    eq(policyToText(p), bf.policies['2 of 3'].replace(`witness w2 ${w2}`, `mirror w2 ${w2} https://m.example`));
    const w0 = 'witness-0.example+ba4c61cb+BKzbDil0PwzLhobQoQTLluBavv7BU4dl51lYaffcjEmq';
    const dup = text.replace(/witness w1 \S+/, `mirror w1 ${w0}`);
    await rejects(() => parsePolicy(dup), E.FormatError, `policy line 3: duplicate mirror key '${w0}'`);
    await rejects(() => parsePolicy('mirror m1\nquorum none\n'), E.FormatError, "policy line 1: expected 'mirror <name> <vkey> [<url>]'");
  });

  section('fixtures/jcs.json (tlog.formats.canonical.jcs, strict.loads_json, entries.receipt_hash)');
  const jf = await fixture('jcs.json');
  let floats = 0;
  const nFloats = jf.cases.filter((c) => !c.strict).length;
  for (const c of jf.cases) {
    if (c.strict) await check(`strict ${JSON.stringify(c.text.slice(0, 40))}`, () => sameVerdict(c.strict, () => jcs(parseJSON(c.text)), { messages: false }));
    const run = () => sameVerdict(c.lenient, () => jcs(parseJSON(c.text, { strict: false })), { messages: false });
    if (c.strict) await check(`lenient ${JSON.stringify(c.text.slice(0, 40))}`, run);
    else { try { await run(); floats++; } catch (e) { await check(`number ${c.text}`, () => { throw e; }); } }
  }
  await check(`${nFloats} number serializations (ES6 Number.toString vs Python rfc8785)`, () => eq(floats, nFloats));
  for (const c of jf.receipts) await check(`receipt_hash ${c.text.slice(0, 30).replace(/\s+/g, ' ')}`, () =>
    sameVerdict(c.expect, async () => (await receiptHash(c.text)).text, { messages: false }));

  section('fixtures/cbor.json (tlog.formats.entries, strict.loads_cbor, canonical.dcbor)');
  const cf = await fixture('cbor.json');
  for (const c of cf.entries) {
    const label = `${c.submission.type} ${c.expect.ok ? 'ok' : c.expect.message}`.slice(0, 70);
    if (c.expect.ok) await check(`decode entry: ${label}`, async () => {
      const got = await decodeEntry(unhex(c.expect.result.cbor));
      eq(jcs(got.entry), jcs(c.expect.result.entry)); eq(b64enc(got.leafHash), c.expect.result.leaf_hash); ok(got.canonical, 'not canonical');
      eq(hex(dcbor(got.entry)), c.expect.result.cbor);
      const resp = await verifyEntryResponse({ index: 3, leaf_hash: c.expect.result.leaf_hash, entry: c.expect.result.entry, entry_cbor: b64enc(unhex(c.expect.result.cbor)) });
      eq(resp.index, 3);
      await rejects(() => verifyEntryResponse({ index: 3, leaf_hash: b64enc(new Uint8Array(32)), entry_cbor: b64enc(unhex(c.expect.result.cbor)) }), E.InvalidInput);
    });
    if (c.submission.type === 'conformance') continue; // conformance entries are not validated in JS (see NOTES.md)
    const want = c.expect.ok ? { ok: true, result: c.expect.result.cbor } : c.expect;
    await check(`canonical entry: ${label}`, () => sameVerdict(want, async () => hex(await canonicalEntry(c.submission))));
  }
  for (const c of cf.raw) await check(`CBOR ${c.hex || '(empty)'}`, () => sameVerdict(c.expect, () => {
    const { value } = decodeCBOR(unhex(c.hex));
    return { value, dcbor: hex(dcbor(value)) };
  }, { messages: false }));
  await check('non-shortest CBOR decodes but is flagged not canonical', () => {
    const got = decodeCBOR(unhex('1801')); eq(got.value, 1); ok(!got.canonical);
  });
  await check(`entry bundle of ${cf.bundle_count} entries`, async () => {
    const es = parseEntryBundle(unhex(cf.entry_bundle));
    eq(es.length, cf.bundle_count);
    for (const e of es) await decodeEntry(e);
    await rejects(() => parseEntryBundle(unhex(cf.entry_bundle).slice(0, -1)), E.FormatError, 'entry bundle is truncated');
  });



  section('fixtures/records.json (registry.records.check_record, now=None)');
  const rf = await fixture('records.json');
  for (const c of rf.cases) await check(`record: ${c.expect.ok ? 'ok' : c.expect.message}`.slice(0, 110), () => sameVerdict(c.expect, async () => {
    const r = await checkRecord(c.record);
    return { type: r.type, id: r.id, path: r.path, subject: r.subject, issued_by: r.issuedBy, kind: r.kind };
  }));

  if (!skip.includes('fuzz')) {
    section('fixtures/fuzz.json (random mutations of valid inputs: same verdict as Python)');
    let zf = null;
    try { zf = await fixture('fuzz.json'); } catch { log('   (no fuzz.json)'); }
    if (zf) {
      const tp = await TrustPolicy.fromText(zf.policy);
      const kinds = {
        bundles: [async (c) => { const v = await tp.verifyBundle(c.text); return { index: Number(v.index), leaf_hash: b64enc(v.leafHash), witnesses: [...v.checkpoint.witnesses].sort() }; }, true],
        checkpoints: [async (c) => { const cp = parseCheckpoint(c.text); return [cp.origin, String(cp.size), b64enc(cp.root), cp.extensions]; }, true],
        vkeys: [async (c) => { const v = await parseVkey(c.text); return [v.name, v.keyIdHex, v.type]; }, true],
        policies: [async (c) => { const p = parsePolicy(c.text); return { text: policyToText(p), quorum: p.quorum }; }, true],
        cbor: [async (c) => { const { entry } = await decodeEntry(unhex(c.hex)); return { entry, dcbor: hex(dcbor(entry)) }; }, false],
        json: [async (c) => (await receiptHash(c.text)).text, false],
      };
      for (const [kind, [fn, messages]] of Object.entries(kinds)) {
        const cases = zf[kind], bad = [];
        for (const c of cases) {
          if (c.expect.error && c.expect.error.startsWith('PythonCrash:')) { bad.push(`Python crashed (${c.expect.error}) on ${JSON.stringify(c.text ?? c.hex).slice(0, 80)}`); continue; }
          try { await sameVerdict(c.expect, () => fn(c), { messages }); } catch (e) { bad.push(`${JSON.stringify(c.text ?? c.hex).slice(0, 80)}: ${e.message}`); }
        }
        const okCount = cases.filter((c) => c.expect.ok).length;
        await check(`${kind}: ${cases.length} mutants (${okCount} accepted by Python), same verdict${messages ? ' and reason' : ' class'}`, () => {
          if (bad.length) throw new Error(`${bad.length} differ; first: ${bad.slice(0, 3).join(' || ')}`);
        });
      }
    }
  }

  if (!skip.includes('live')) {
    section('fixtures/live.json (oap-localnet: a real log, 3 real witnesses (quorum 2), a real registry)');
    let lf = null;
    try { lf = await fixture('live.json'); } catch { log('   (no live.json: run make_fixtures.py without --no-live)'); }
    if (lf) {
      const policy = await TrustPolicy.fromText(lf.policy);
      for (const [name, b] of Object.entries(lf.bundles)) await check(`bundle ${name}: same verdict as TrustPolicy.verify_bundle`, () =>
        sameVerdict(b.expect, async () => {
          const v = await policy.verifyBundle(b.text);
          return { index: Number(v.index), leaf_hash: b64enc(v.leafHash), size: Number(v.checkpoint.checkpoint.size),
            witnesses: [...v.checkpoint.witnesses].sort(), entry: (await decodeEntry(v.entry)).entry };
        }));
      await check('receipt.json hashes (JCS) to the anchored receipt_hash, and the entry re-validates (signature)', async () => {
        const rh = await receiptHash(lf.receipt);
        eq(rh.text, lf.receipt_hash);
        const v = await policy.verifyBundle(lf.bundles['receipt.json.tlog-proof'].text);
        const { entry } = await decodeEntry(v.entry);
        eq(entry.receipt_hash, rh.text);
        eq(hex(await canonicalEntry(entry)), hex(v.entry));
        await rejects(() => canonicalEntry({ ...entry, receipt_hash: 'sha256:' + '00'.repeat(32) }), E.InvalidInput, 'receipt entry: signature does not verify for signer');
      });
      await check('the privileged commitment opens to SHA-256(receipt_hash || salt)', async () => {
        const v = await policy.verifyBundle(lf.bundles['privileged.tlog-proof'].text);
        const { entry } = await decodeEntry(v.entry);
        const rh = await receiptHash(lf.receipt);
        eq(entry.commitment, 'sha256:' + hex(await sha256(concat(rh.digest, unhex(lf.salt.salt)))));
      });
      await check('the witnessed checkpoint: quorum 2 of 3 met, cosignature timestamps and ages', async () => {
        const vc = await policy.verifyCheckpoint(lf.checkpoint);
        eq([...vc.witnesses].sort(), lf.checkpoint_expect.result);
        const now = Date.parse(lf.now) / 1000;
        for (const c of cosignatureAges(vc, now)) ok(c.ageSeconds >= 0 && c.ageSeconds < 3600, `age ${c.ageSeconds}`);
      });
      await check('quorum: dropping cosignatures below 2 of 3 is refused', async () => {
        const lines = lf.checkpoint.split('\n');
        const keep = lines.filter((l) => !l.startsWith(`${D} witness-1.`) && !l.startsWith(`${D} witness-2.`)).join('\n');
        await rejects(() => policy.verifyCheckpoint(keep), E.PolicyError, 'witness quorum not met (valid cosignatures from: w3)');
      });
      for (const w of lf.witness_checkpoints) await check(`witness ${w.url}: its own checkpoint carries its cosignature`, async () => {
        const got = await verifyWitnessCosignature(w.checkpoint, w.vkey, Date.parse(lf.now) / 1000);
        eq(got.length, 1); eq(got[0].name, w.vkey.split('+')[0]); ok(got[0].ageSeconds >= 0);
      });
      await check(`entries 0..${Object.keys(lf.entries).length - 1} (GET /v1/entries): entry_cbor decodes, leaf_hash recomputed`, async () => {
        for (const r of Object.values(lf.entries)) { const got = await verifyEntryResponse(r); ok(got.canonical); }
      });
      await check('tiles: entry bundle hashes to the level-0 tile, whose root is the verified checkpoint root', async () => {
        const vc = await policy.verifyCheckpoint(lf.checkpoint);
        const es = parseEntryBundle(b64dec(lf.tiles.entries)), t0 = b64dec(lf.tiles.level0);
        eq(es.length, Number(vc.checkpoint.size)); eq(t0.length, 32 * es.length);
        const hs = [];
        for (let i = 0; i < es.length; i++) { hs.push(await leafHash(es[i])); eq(hex(hs[i]), hex(t0.subarray(32 * i, 32 * i + 32)), `leaf ${i}`); }
        eq(b64enc(await rootOfLeafHashes(hs)), b64enc(vc.checkpoint.root));
      });
      for (const [name, st] of Object.entries(lf.status)) await check(`status ${name} (oap-registry status; offline exit ${st.offline_exit}): same verdict`, () =>
        sameVerdict(st.expect, async () => {
          const v = await verifyStatus(st.response, { registry: lf.registry, policy, now: new Date(Date.parse(lf.now)) });
          return { id: v.id, status: v.status, epoch: v.epoch, log_checked: v.logChecked, reason: v.reason ?? null };
        }));
      await check('status: a policy that also needs a 4th witness (which never cosigned) refuses the anchors', async () => {
        const now = new Date(Date.parse(lf.now));
        const all3 = await TrustPolicy.fromText(lf.policy.replace('group local-witnesses 2 w1 w2 w3', 'group local-witnesses all w1 w2 w3'));
        eq((await verifyStatus(lf.status.revoked.response, { registry: lf.registry, policy: all3, now })).status, 'revoked');
        const need4 = await TrustPolicy.fromText(lf.policy.replace(/quorum .*\n/, '') +
          'witness w4 example.com/witness+10a1c019+BGSEitir7W6FmBs7OHWyUrh2frtLAvcDrKOx5xu9ao5Q\ngroup g4 all local-witnesses w4\nquorum g4\n');
        const e = await rejects(() => verifyStatus(lf.status.revoked.response, { registry: lf.registry, policy: need4, now }), E.StatusVerificationError);
        ok(/^epoch anchor: receipt anchor of urn:oap:status-epoch:\d+: not proven in the log: witness quorum not met \(valid cosignatures from: w1, w2, w3\)$/.test(e.reason), e.reason);
      });
    }
  }

  if (!skip.includes('status')) {
    section('fixtures/status.json (registry.statusverify, real registry answers)');
    let sf = null;
    try { sf = await fixture('status.json'); } catch { log('   (no status.json: run make_fixtures.py without --no-status)'); }
    if (sf) {
      const policy = await TrustPolicy.forLog(sf.log_vkey);
      for (const c of sf.cases) await check(`status: ${c.name}`, () => sameVerdict(c.expect, async () => {
        const o = c.options, now = new Date(Date.parse(sf.now) + (o.now_plus_days ?? 0) * 86400000);
        const v = await verifyStatus(o.text ?? c.response, { registry: o.registry ?? sf.registry, id: o.status_id ?? null, policy: o.policy === false ? null : policy, now, allowStale: !!o.allow_stale });
        return { id: v.id, status: v.status, epoch: v.epoch, log_checked: v.logChecked, reason: v.reason ?? null };
      }));
      const good = sf.cases.find((c) => c.name === 'good').response, rev = sf.cases.find((c) => c.name === 'revoked').response;
      const now = new Date(Date.parse(sf.now));
      const tampers = {
        'revoked_root changed (the response signature covers the statement)': [good, (r) => { r.epoch.revoked_root = 'sha256:' + '00'.repeat(32); }, 'status response is not signed by the registry key'],
        'response signature dropped': [good, (r) => { r.signature = ''; }, 'status response is not signed by the registry key'],
        'revoked: git path tree object swapped': [rev, (r) => { r.revocation.git_path.reverse(); }, null],
      };
      for (const [name, [base, f, reason]] of Object.entries(tampers)) await check(`status tamper: ${name}`, async () => {
        const r = parseJSON(JSON.stringify(base), { strict: false }); f(r);
        await rejects(() => verifyStatus(r, { registry: sf.registry, policy, now }), E.StatusVerificationError, reason ?? undefined);
      });
    }
  }
  if (!skip.includes('mldsa')) {
    section('fixtures/mldsa.json (ML-DSA-44 cosignatures, tlog-cosignature type 0x06; NIST ACVP)');
    const mf = await fixture('mldsa.json');
    await check('0x06 vkey: public key and key ID', async () => {
      const v = await parseVkey(mf.vkey);
      eq(v.type, 0x06); eq(hex(v.public), mf.public); eq(v.keyIdHex, mf.key_id); eq(v.vkey, mf.vkey);
      eq(await cosignerVerifier(v), v);
    });
    for (const c of mf.notes) await check(`note: ${c.what}`, () => sameVerdict(c.expect, async () => {
      const vs = await Promise.all(c.vkeys.map(parseVkey));
      return (await openNote(c.note, vs)).verified.map((x) => x.timestamp);
    }));
    const pqv = await parseVkey(mf.vkey);
    for (const c of mf.subtrees) await check(`subtree cosignature: ${c.what}`, () => sameVerdict(c.expect, () => {
      const [origin, start, end, root, blob] = c.args;
      return pqv.verifySubtree(origin, BigInt(start), BigInt(end), b64dec(root), b64dec(blob));
    }));
    for (const c of mf.messages) await check(`subtree message ${c.args.slice(1, 5).join(' ')}`, () => sameVerdict(c.expect, () =>
      hex(subtreeMessage(c.args[0], BigInt(c.args[1]), c.args[2], BigInt(c.args[3]), BigInt(c.args[4]), b64dec(c.args[5])))));
    for (const [i, c] of mf.policies.entries()) await check(`policy: one cosigner, one vote (${i})`, () =>
      sameVerdict(c.expect, () => policyToText(parsePolicy(c.text))));
    await check('a witness with two keys counts once toward a quorum', () => {
      const p = parsePolicy(mf.policies[1].text);
      ok(!quorumMet(p, new Set(['a', 'b'])) && quorumMet(p, new Set(['b', 'c'])));
    });
    // NIST ACVP ML-DSA-44 sigVer (internal interface: mu = SHAKE256(SHAKE256(pk, 64) || M', 64))
    for (const g of mf.acvp_sigver) for (const t of g.tests) await check(`ACVP sigVer tc${t.tcId}`, () => {
      const pk = unhex(g.pk), msg = unhex(t.message), sig = unhex(t.signature);
      eq(ml_dsa44.internal.verify(sig, msg, pk), t.testPassed);
      const mu = shake256.create({ dkLen: 64 }).update(shake256(pk, { dkLen: 64 })).update(msg).digest();
      eq(ml_dsa44.internal.verify(sig, mu, pk, { externalMu: true }), t.testPassed);
    });
    await check('mldsa44Verify refuses a wrong length and a flipped bit', async () => {
      const c = mf.notes[0], n = parseNote(c.note), s = n.signatures[2];
      await rejects(() => mldsa44Verify(pqv.public, new Uint8Array(1), s.blob.subarray(8, -1)), E.SignatureError, 'malformed ML-DSA-44 signature');
      const bad = s.blob.slice(8); bad[5] ^= 1;
      await rejects(() => mldsa44Verify(pqv.public, new Uint8Array(1), bad), E.SignatureError, 'ML-DSA-44 signature does not verify');
    });
  }
  return results;
}

// --- helpers ---------------------------------------------------------------------------------
function show(v) {
  return JSON.stringify(v, (k, x) => (typeof x === 'bigint' ? (x >= -(2n ** 53n) && x <= 2n ** 53n ? Number(x) : `${x}n`) : x instanceof Uint8Array ? hex(x) : x),
  ) ?? String(v);
}
async function importSeed(seed) {
  const pkcs8 = concat(unhex('302e020100300506032b657004220420'), seed);
  const priv = await crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
  const jwk = await crypto.subtle.exportKey('jwk', priv);
  return { priv, jwk };
}
function b64url(s) { return b64dec(s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4)); }
