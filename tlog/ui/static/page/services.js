// Which services the page shows, found without a URL typed: the service that serves the
// page says what it is (/v1/info), the log names its registry, witnesses and mirrors (its
// /v1/info), the registry, the witnesses and a mirror name their log. URL parameters (?log=
// &registry=&witness=) override, for a static host or another network.
import { get, trimUrl } from './net.js';
import { Trust } from './trust.js';

export const app = {
  trust: new Trust(),
  own: null, // what serves this page: 'log' | 'registry' | 'witness' | 'mirror' | null (a static host)
  ownMirror: '', // a mirror serving the page: its copy of the log (tlog-tiles under its monitoring prefix)
  log: '', registry: '', witness: '', // the URLs in use
  witnesses: [], // [{name, url}] from the log's info and policy
  mirrors: [], // [url]
  logInfo: null, logError: null, served: null, // the log's /v1/info and /v1/policy text
  registryInfo: null, registryError: null, registryGenesis: null,
  head: null, // the log's latest checkpoint: {note, ctx, verdict, at}
  documents: [], // DID documents the user pinned in this session (Bundle check): `oap-log verify --did-document`
};

/** Find the services; returns the view to open when the URL names none. */
export async function discover(params) {
  const here = location.protocol.startsWith('http') ? location.origin : '';
  let own = null;
  const named = ['log', 'registry', 'witness'].some((k) => params.get(k));
  if (here && !named) { // served by a service: it says what it is (a static host has no /v1/info)
    try { own = await get(`${here}/v1/info`); } catch (_) { own = null; } // a static host
  }
  let kind = null, ownLog = '';
  if (own && 'published' in own) { kind = 'log'; ownLog = here; } else if (own && 'status_service' in own) {
    kind = 'registry';
    ownLog = own.log && own.log.url ? own.log.url : '';
  } else if (own && 'identity' in own && Array.isArray(own.logs)) {
    kind = 'witness';
    ownLog = own.logs.length === 1 && own.logs[0].url ? own.logs[0].url : '';
  } else if (own && own.kind === 'mirror' && Array.isArray(own.logs)) { // a C2SP tlog-mirror: the log it copies
    kind = 'mirror';
    const one = own.logs.length === 1 ? own.logs[0] : null;
    ownLog = one && one.url ? one.url : '';
    app.ownMirror = one && typeof one.monitoring_prefix === 'string' ? trimUrl(one.monitoring_prefix) : '';
  }
  app.own = kind;
  app.log = trimUrl(params.get('log') || ownLog);
  app.registry = trimUrl(params.get('registry') || (kind === 'registry' ? here : ''));
  app.witness = trimUrl(params.get('witness') || (kind === 'witness' || kind === 'mirror' ? here : ''));
  if (kind === 'registry' && !params.get('log')) app.registryInfo = own;
  await loadLogInfo();
  return kind === 'registry' ? 'registry' : kind === 'witness' || kind === 'mirror' ? 'witness' : 'log';
}

export async function loadLogInfo() {
  app.logInfo = null; app.logError = null; app.served = null; app.witnesses = []; app.mirrors = [];
  if (!app.log) return;
  try {
    app.logInfo = await get(`${app.log}/v1/info`);
  } catch (e) {
    app.logError = e;
    return;
  }
  const info = app.logInfo;
  if (!app.registry && info.registry_url) app.registry = trimUrl(info.registry_url);
  app.mirrors = Array.isArray(info.mirrors) ? info.mirrors.map(trimUrl).filter(Boolean) : [];
  if (app.ownMirror && !app.mirrors.includes(app.ownMirror)) app.mirrors.push(app.ownMirror); // the mirror serving the page
  const ws = Array.isArray(info.witnesses) ? info.witnesses.filter((w) => w && w.url) : [];
  try { app.served = await get(`${app.log}/v1/policy`, 'text'); } catch (_) { app.served = null; }
  app.witnesses = ws.map((w) => ({ name: String(w.name), url: trimUrl(w.url) }));
  if (!app.witnesses.length && app.served) { // an older log: its policy's witness lines carry URLs
    for (const line of app.served.split('\n')) {
      const m = /^witness\s+(\S+)\s+\S+\s+(https?:\/\/\S+)\s*$/.exec(line.trim());
      if (m) app.witnesses.push({ name: m[1], url: trimUrl(m[2]) });
    }
  }
  if (!app.witness && app.witnesses.length) app.witness = app.witnesses[0].url;
}
