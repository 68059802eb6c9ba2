// Node runner of differential.js: node differential.mjs <cases.json>  -> the verdicts, as JSON, on stdout.
import { readFile } from 'node:fs/promises';
import { runCases } from './differential.js';

const cases = JSON.parse(await readFile(process.argv[2], 'utf8'));
process.stdout.write(JSON.stringify(await runCases(cases)));
