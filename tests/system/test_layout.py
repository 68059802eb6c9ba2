"""The package map holds: layers import only the layers below them, pure packages
import no I/O, and no module imports itself back through others (docs/architecture.md)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tlog", "witness", "registry", "monitor")

# What each layer may import from this project (a prefix match on module names).
ALLOWED = {
    "tlog": (),
    "tlog.errors": (),
    "tlog.formats": ("tlog.errors", "tlog.formats", "tlog._native"),
    "tlog.merkle": ("tlog.errors", "tlog.formats", "tlog.merkle"),
    "tlog.storage": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.storage"),
    # Every outbound connection and every TLS context: one policy (TLS 1.3, the URL check), under
    # everything that opens a connection.
    "tlog.transport": ("tlog.errors", "tlog.formats"),
    # What every service process shares: configuration loading, key files, logging, child
    # processes, batching. Below the HTTP layer, except its CLI helpers, which run the server.
    "tlog.runtime": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.transport", "tlog.runtime"),
    "tlog.runtime.cli": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.transport", "tlog.runtime", "tlog.http"),
    # The shared HTTP layer: the application, middlewares, limits, bodies, answers, fast path, serving.
    "tlog.http": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.transport", "tlog.runtime.config", "tlog.http"),
    "tlog.didresolver": ("tlog.errors", "tlog.formats", "tlog.transport"),
    "tlog.client": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.transport", "tlog.didresolver",
                    "tlog.client"),
    "tlog.server": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.storage", "tlog.transport", "tlog.http",
                    "tlog.runtime", "tlog.didresolver", "tlog.server"),
    # The log's command line also verifies proofs and audits logs, as a client.
    "tlog.server.cli": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.storage", "tlog.transport", "tlog.http",
                        "tlog.runtime", "tlog.didresolver", "tlog.client", "tlog.server"),
    "tlog.cli": ("tlog",),
    # The mirror (witness.mirror) builds its own store over the storage primitives: durable files,
    # hash files and create-only bucket writes, never a log's storage backend. A peer witness
    # consults the registry as any relying party does: its client and offline status verifier.
    "witness": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.storage.durable", "tlog.storage.hashfiles",
                "tlog.storage.bucket", "tlog.transport", "tlog.http", "tlog.runtime", "tlog.client",
                "tlog.didresolver", "registry.client", "registry.statusverify", "witness"),
    "registry": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.storage.durable", "tlog.transport", "tlog.http",
                 "tlog.runtime", "tlog.client", "tlog.didresolver", "registry"),
    # The monitor reads logs and registries as a client does: the registry's client, its status and
    # anchor verifiers, never its store or service.
    "monitor": ("tlog.errors", "tlog.formats", "tlog.merkle", "tlog.storage.durable", "tlog.transport", "tlog.http",
                "tlog.runtime", "tlog.client", "registry.client", "registry.statusverify", "registry.anchoring",
                "monitor"),
}
# Pure layers: no network, disk, database or framework.
IO_MODULES = ("aiohttp", "aiosqlite", "sqlite3", "socket", "asyncio", "dulwich", "prometheus_client", "click",
              "mmap", "fcntl", "subprocess", "psycopg", "aiobotocore", "botocore", "obstore", "shutil", "tempfile")
PURE = ("tlog.formats", "tlog.merkle", "tlog.errors")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            out[name] = path
    return out


def imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, at any depth of the file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import module`
    return found


def layer(name: str) -> str:
    return max((k for k in ALLOWED if name == k or name.startswith(k + ".")), key=len)


def test_each_layer_imports_only_what_is_below_it():
    mods = modules()
    bad = []
    for name, path in mods.items():
        allowed = ALLOWED[layer(name)]
        for imp in imports(name, path):
            if imp.split(".")[0] not in PACKAGES or (imp in mods and imp == name):
                continue
            if not any(imp == a or imp.startswith(a + ".") for a in allowed) and imp.split(".")[0] in PACKAGES:
                if imp in mods or imp.rpartition(".")[0] in mods:
                    bad.append(f"{name} imports {imp}")
    assert bad == [], "\n".join(sorted(bad))


def test_pure_packages_import_no_io():
    bad = []
    for name, path in modules().items():
        if any(name == p or name.startswith(p + ".") for p in PURE):
            for imp in imports(name, path):
                if imp.split(".")[0] in IO_MODULES:
                    bad.append(f"{name} imports {imp}")
    assert bad == [], "\n".join(sorted(bad))


def test_no_import_cycles():
    mods = modules()
    graph = {n: {i if i in mods else i.rpartition(".")[0] for i in imports(n, p)} & set(mods) - {n}
             for n, p in mods.items()}
    # Tarjan's strongly connected components: any with more than one module is a cycle.
    index, low, on, stack, cycles = {}, {}, set(), [], []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == [], cycles


def test_the_server_wires_storage_through_typed_interfaces_only():
    """The log service talks to its storage through `tlog.storage.interface` (a driver and a
    publisher, docs/architecture.md §3.2): no probing for attributes by name, no setting them
    from outside, no type checks silenced to do either."""
    bad = []
    for name, path in modules().items():
        if not (name == "tlog.server" or name.startswith("tlog.server.")):
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("hasattr", "getattr", "setattr", "delattr"):
                arg = node.args[1] if len(node.args) > 1 else None
                if node.func.id == "getattr" and isinstance(arg, ast.Constant) and arg.value in ANY_MODULE_MAY_READ:
                    continue  # an exception's message, in the log's command line (tlog.server.cli)
                bad.append(f"{name}:{node.lineno} calls {node.func.id}")
        for k, line in enumerate(source.splitlines(), 1):
            if "type: ignore[attr-defined]" in line or ("type: ignore[assignment]" in line and "shadows" not in line):
                bad.append(f"{name}:{k} silences a type check: {line.strip()}")
    assert bad == [], "\n".join(bad)


# Attribute probing the service layers may do, and why; anything else is wiring by name.
ANY_MODULE_MAY_READ = {
    "message": "an exception's message: OAPError has one, any other exception prints as itself",
}
PROBES_ALLOWED = {
    ("tlog.runtime.config", "__name__"): "the name of a field's type in a configuration error",
    ("tlog.runtime.config", "rate_limit"): "the shared rate-limit check, for configs that have none",
    ("tlog.runtime.config", "rate_limit_burst"): "the shared rate-limit check, for configs that have none",
    ("tlog.http.metrics", "_upper_bounds"): "prometheus_client has no public read of a histogram",
    ("tlog.http.metrics", "_buckets"): "prometheus_client has no public read of a histogram",
    ("tlog.http.metrics", "_sum"): "prometheus_client has no public read of a histogram",
    ("registry.githttp", "_packs_sem"): "a semaphore made on first use, on the same object",
    ("registry.standing", "at"): "a retirement that may be None",
    ("witness.config", "<dynamic>"): "the config's own dataclass fields, by name",
    ("witness.mirror.embedded", "db"): "a per-thread connection made on first use (threading.local)",
}
SERVICE_LAYERS = ("tlog.server", "tlog.http", "tlog.runtime", "witness", "registry", "monitor")


def test_services_do_not_wire_storage_by_attribute_name():
    """The services reach storage (and each other) through typed interfaces and constructor
    arguments: no hasattr/getattr/setattr/delattr probing, beyond the reads allowed above."""
    bad = []
    for name, path in modules().items():
        if not any(name == p or name.startswith(p + ".") for p in SERVICE_LAYERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("hasattr", "getattr", "setattr", "delattr")):
                continue
            arg = node.args[1] if len(node.args) > 1 else None
            attr = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "<dynamic>"
            if node.func.id == "getattr" and (attr in ANY_MODULE_MAY_READ or (name, attr) in PROBES_ALLOWED):
                continue
            bad.append(f"{name}:{node.lineno} calls {node.func.id}(..., {attr!r})")
    assert bad == [], "\n".join(bad)


# The test hooks: keyword-only constructor arguments defaulting to None (docs/architecture.md §2).
HOOKS = ("faults", "before_publish", "stall", "trace")


def test_tests_inject_hooks_through_constructors_only():
    """Each hook is a keyword-only argument defaulting to None somewhere in our code, and no
    test assigns one onto an object (`x.faults = ...`, `monkeypatch.setattr(x, "faults", ...)`)."""
    declared = set()
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults):
                    if a.arg in HOOKS and isinstance(d, ast.Constant) and d.value is None:
                        declared.add(a.arg)
    assert declared == set(HOOKS)
    bad = []
    for path in sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in HOOKS:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} assigns .{t.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr" \
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in HOOKS:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} sets {node.args[1].value} with setattr")
    assert bad == [], "\n".join(bad)


def test_the_log_wires_callbacks_through_constructors_and_starts():
    """In the log (tlog/), a component gets what it calls back through its constructor or the
    start of the component that owns it (the appender starts its targets with itself as what
    they follow: docs/architecture.md §2, §3.3), never by someone assigning a callback onto it
    after it was made (`mirrors.on_beyond = ...`), which left checks off until it was done."""
    bad = []
    for name, path in modules().items():
        if not (name == "tlog" or name.startswith("tlog.")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr.startswith("on_") and \
                        not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                    bad.append(f"{name}:{node.lineno} assigns .{t.attr} onto another object")
    assert bad == [], "\n".join(bad)


def _names(path: Path) -> set[str]:
    """Every name a module uses or imports (identifiers and attribute names)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.name.rpartition(".")[2])
    return out


def test_one_write_pipeline_and_one_place_for_rate_limits():
    """The log's write routes share `tlog.server.pipeline` (docs/architecture.md §3.3): no
    other module of the log decodes, authorizes or canonicalizes a submission. Rate limits
    are declared once per service (`tlog.http.limits.Limits`): token buckets are made
    and taken only there, whichever path (middleware, fast path, write pipeline) answers.
    The read workers serve hash tiles without the log's HTTP application."""
    mods = modules()
    bad = []
    write_steps = {"canonical_entry", "commitment_json_entry", "loads_member_array", "admit", "authorize"}
    for name, path in mods.items():
        used = _names(path)
        if (name == "tlog.server" or name.startswith("tlog.server.")) and name != "tlog.server.pipeline":
            bad += [f"{name} uses {n} (a step of the write pipeline)" for n in sorted(used & write_steps)]
        if name != "tlog.http.limits" and "RateLimiter" in used:
            bad.append(f"{name} uses RateLimiter directly, not the service's Limits")
    worker = imports("tlog.server.readworkers", mods["tlog.server.readworkers"])
    bad += [f"tlog.server.readworkers imports {i}" for i in sorted(worker) if i.startswith("tlog.server.api")]
    bad += [f"tlog.server.tiles imports {i}" for i in sorted(imports("tlog.server.tiles", mods["tlog.server.tiles"]))
            if i.split(".")[0] == "aiohttp"]
    assert bad == [], "\n".join(bad)


# The four services, each laid out the same way (docs/architecture.md §2).
SERVICES = ("tlog.server", "witness", "witness.mirror", "registry", "monitor")
SERVICE_FILES = {
    "service.py": "the service object: opened from its config, closed on shutdown",
    "api.py": "its HTTP handlers and build_app",
    "cli.py": "its click commands",
    "config.py": "its typed, frozen configuration",
    "metrics.py": "its Prometheus metrics",
}


def test_each_service_has_the_same_layout():
    """Every service package holds service.py, api.py, cli.py, config.py and metrics.py, the
    API builds the aiohttp application (`build_app`) over the service, the CLI is click, and
    the console script of each service points at its cli.py."""
    import tomllib

    bad = []
    for pkg in SERVICES:
        where = ROOT.joinpath(*pkg.split("."))
        bad += [f"{pkg} has no {f} ({why})" for f, why in SERVICE_FILES.items() if not (where / f).is_file()]
        if (where / "api.py").is_file():
            api = ast.parse((where / "api.py").read_text())
            if not any(isinstance(n, ast.FunctionDef) and n.name == "build_app" for n in api.body):
                bad.append(f"{pkg}.api defines no build_app")
        if (where / "cli.py").is_file() and "click" not in imports(f"{pkg}.cli", where / "cli.py"):
            bad.append(f"{pkg}.cli does not use click")
        if (where / "server.py").exists():
            bad.append(f"{pkg} still has a server.py (the HTTP layer is api.py)")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for script, pkg in (("oap-log", "tlog.server"), ("oap-witness", "witness"), ("oap-mirror", "witness.mirror"),
                        ("oap-registry", "registry"), ("oap-monitor", "monitor")):
        if scripts.get(script) != f"{pkg}.cli:main":
            bad.append(f"{script} runs {scripts.get(script)!r}, not {pkg}.cli:main")
    assert bad == [], "\n".join(bad)


# What opens an outbound connection or builds a TLS context, made only in tlog.transport
# (docs/architecture.md §7 "TLS"): sessions, connectors, SSL contexts, urllib openers, urllib3
# pools, http.client connections, and aiohttp's one-shot `aiohttp.request`.
CONNECTION_MAKERS = {"ClientSession", "TCPConnector", "UnixConnector", "create_default_context", "SSLContext",
                     "_create_unverified_context", "wrap_socket", "urlopen", "build_opener", "PoolManager",
                     "ProxyManager", "HTTPConnection", "HTTPSConnection", "connection_from_url"}
OTHER_HTTP_CLIENTS = ("http.client", "urllib3", "requests", "httpx", "pycurl")
GIT_TRANSPORTS = {"get_transport_and_path", "get_transport_and_path_from_url", "HttpGitClient",
                  "Urllib3HttpGitClient"}


def test_every_outbound_connection_is_made_by_the_transport_module():
    """No module but `tlog.transport` creates a client session, a connector, an SSL context,
    a urllib opener or another HTTP client's connection, so that every connection the project
    opens is TLS 1.3 with the one URL check (OAP-CORE-1.0 §8.1, §28.1); dulwich's Git client
    is always handed the transport's pool. Type annotations naming these classes are fine."""
    bad = []
    for name, path in modules().items():
        if name == "tlog.transport":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in CONNECTION_MAKERS:
                    bad.append(f"{name}:{node.lineno} calls {called}")
                if isinstance(f, ast.Attribute) and f.attr == "request" and isinstance(f.value, ast.Name) \
                        and f.value.id == "aiohttp":
                    bad.append(f"{name}:{node.lineno} calls aiohttp.request")
                if called in GIT_TRANSPORTS and "pool_manager" not in {k.arg for k in node.keywords}:
                    bad.append(f"{name}:{node.lineno} calls {called} without the transport's pool_manager")
        for imp in imports(name, path):
            if any(imp == m or imp.startswith(m + ".") for m in OTHER_HTTP_CLIENTS):
                bad.append(f"{name} imports {imp}")
    assert bad == [], "\n".join(bad)
