// Node runner: node test/run.mjs  (Node >= 20; no npm packages). Same checks as the browser page.
import { readFile } from 'node:fs/promises';
import { runAll } from './checks.js';

const dir = new URL('./fixtures/', import.meta.url);
const verbose = process.argv.includes('-v');
const res = await runAll({
  load: (name) => readFile(new URL(name, dir), 'utf8'),
  log: (line) => { if (verbose || line.startsWith('FAIL')) console.log(line); },
});
for (const [g, r] of Object.entries(res.groups)) console.log(`${String(r.passed).padStart(5)} ok ${r.failed ? String(r.failed).padStart(4) + ' FAILED' : '           '}  ${g}`);
console.log(`${res.passed} passed, ${res.failed} failed`);
process.exit(res.failed ? 1 : 0);
