// Runs the same checks as run.mjs in the browser (tests/ui/test_lib.py drives it in Chromium) and reports in the DOM
// (textContent only: the page runs under a CSP with Trusted Types and no inline code).
// It also probes that the CSP is in force: the inline <script> and style attribute in
// browser.html must not have taken effect, eval must throw, and an innerHTML string
// assignment must be refused by Trusted Types. Any other CSP violation is a failure.
import { runAll } from './checks.js';
import { ed25519Supported } from '../../../tlog/ui/static/lib/ed25519.js';
import * as oap from '../../../tlog/ui/static/lib/index.js';

const $ = (id) => document.getElementById(id);
const lines = [];
const violations = [];
document.addEventListener('securitypolicyviolation', (e) => violations.push(`${e.effectiveDirective} ${e.blockedURI}`));

function cspProbes() {
  const out = {};
  out.inlineScriptBlocked = window.inlineScriptRan !== true;
  out.inlineStyleBlocked = getComputedStyle($('probe')).display !== 'none';
  try { (0, eval)('1'); out.evalBlocked = false; } catch (e) { out.evalBlocked = e instanceof EvalError; }
  try { document.createElement('div').innerHTML = '<b>x</b>'; out.trustedTypesEnforced = false; } catch (e) { out.trustedTypesEnforced = e instanceof TypeError; }
  return out;
}

async function main() {
  const probes = cspProbes();
  await new Promise((r) => setTimeout(r, 100)); // violation events are dispatched as tasks
  const fromProbes = violations.splice(0);      // these are the probes' own; any later one is a failure
  const probesOk = Object.values(probes).every(Boolean);
  $('csp').textContent = `CSP probes: ${Object.entries(probes).map(([k, v]) => `${k}=${v ? 'yes' : 'NO'}`).join(' ')}`;
  const ed = await ed25519Supported();
  $('env').textContent = `environment: ${navigator.userAgent}; WebCrypto Ed25519: ${ed ? 'yes' : 'NO'}; secure context: ${isSecureContext}; lib/index.js exports: ${Object.keys(oap).length}`;
  const res = await runAll({
    load: async (name) => { const r = await fetch(`fixtures/${name}`); if (!r.ok) throw new Error(`${name}: HTTP ${r.status}`); return r.text(); },
    log: (line) => { lines.push(line); $('log').textContent = lines.join('\n'); },
  });
  for (const [g, r] of Object.entries(res.groups)) lines.push(`${String(r.passed).padStart(5)} ok ${r.failed ? r.failed + ' FAILED' : ''}  ${g}`);
  lines.push(`CSP violations caused by the probes: ${fromProbes.join('; ') || 'none reported'}`);
  const unexpected = violations;
  for (const v of unexpected) lines.push(`UNEXPECTED CSP VIOLATION: ${v}`);
  const failed = res.failed + unexpected.length + (probesOk ? 0 : 1);
  lines.push(`${res.passed} passed, ${failed} failed`);
  $('log').textContent = lines.join('\n');
  const s = $('summary');
  s.textContent = `${res.passed} passed, ${failed} failed (CSP violations during the checks: ${unexpected.length}; CSP probes ${probesOk ? 'ok' : 'FAILED'})`;
  s.dataset.state = failed ? 'fail' : 'pass';
  document.title = `DONE ${res.passed} passed, ${failed} failed`;
}
main().catch((e) => {
  $('summary').textContent = `ERROR ${e && e.stack ? e.stack : e}`;
  $('summary').dataset.state = 'fail';
  document.title = 'DONE ERROR';
});
