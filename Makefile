# notifyd — build, run and test. See README.md.
SWIFT   ?= swift
CONFIG  ?= debug
PREFIX  ?= /usr/local
DESTDIR ?=
# Extra arguments for `make run`, e.g. ARGS="--socket /tmp/notifyd.sock --log-level debug".
ARGS    ?=

SYSTEM_PACKAGES := libsystemd-dev pkg-config
BIN_DIR = $(shell $(SWIFT) build -c $(CONFIG) --show-bin-path)

.PHONY: all deps build run test sanitize clean

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

## test: build and run every test, then the client-library and integration tests under ThreadSanitizer.
test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test
	$(MAKE) sanitize

## sanitize: the client-library and integration tests (real processes) built with ThreadSanitizer.
sanitize: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan
	TSAN_OPTIONS="halt_on_error=1" $(SWIFT) test --skip-build --sanitize=thread --scratch-path .build-tsan \
	  --filter 'NotifyTests|IntegrationTests'

clean:
	rm -rf .build
