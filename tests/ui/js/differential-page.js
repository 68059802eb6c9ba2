// Browser runner of differential.js (tests/ui/jsrun.py drives it in Chromium where Node is
// missing): fetches the cases the test serves at ./cases.json, writes the verdicts as JSON
// into #results (textContent only: the page runs under a strict CSP) and "DONE" in the title.
import { runCases } from './differential.js';

async function main() {
  const r = await fetch('cases.json');
  if (!r.ok) throw new Error(`cases.json: HTTP ${r.status}`);
  const results = await runCases(await r.json());
  document.getElementById('results').textContent = JSON.stringify(results);
  document.title = 'DONE';
}
main().catch((e) => {
  document.getElementById('state').textContent = `ERROR ${e && e.stack ? e.stack : e}`;
  document.title = 'DONE ERROR';
});
