# SubLane build, run and test. Two commands are all a fresh machine needs:
#   make run    install what is missing, build, start SubLane on http://127.0.0.1:3000
#   make test   install what the tests need, run every test (unit, integration, browser)
# Everything is installed from the package registries (crates.io, npm, Debian).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
WASM_BINDGEN_VERSION := $(shell sed -n '/^name = "wasm-bindgen"$$/{n;s/^version = "\(.*\)"/\1/p;}' Cargo.lock)
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: demo run build site setup setup-test setup-bench test test-rust test-e2e test-sdk test-clients lint lint-fmt fmt bench clean-data

run: build
	./target/release/sublane

build: setup site
	$(CARGO) build --release -p server --bin sublane

# A working SubLane without any subscription: mock upstream, seeded accounts, a key, a curl line.
demo: setup site
	$(CARGO) build --release -p server --bins
	./scripts/demo.sh

site: setup
	./scripts/build-site.sh release

# Toolchain pieces the build needs; each step is skipped when already in place.
setup: node_modules/.stamp
	@rustup target list --installed | grep -qx wasm32-unknown-unknown \
	  || rustup target add wasm32-unknown-unknown \
	  || { echo "error: cannot install the wasm32-unknown-unknown target (rustup); the web app cannot be built" >&2; exit 1; }
	@if [ "$$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $(WASM_BINDGEN_VERSION)" ]; then \
	  echo "installing wasm-bindgen-cli $(WASM_BINDGEN_VERSION) (must equal the wasm-bindgen crate)"; \
	  $(CARGO) install wasm-bindgen-cli --version $(WASM_BINDGEN_VERSION); \
	fi

node_modules/.stamp: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# What the tests need beyond the build: Debian's Chromium, playwright-core, the pinned npm clients,
# cargo-nextest.
setup-test: setup end2end/node_modules/.stamp client-tests/node_modules/.stamp
	@command -v chromium >/dev/null || { \
	  echo "installing Debian chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@command -v cargo-nextest >/dev/null || $(CARGO) install cargo-nextest --locked

# Optional: without them the benches print their other figures and say the baseline is missing.
# Debian starts the nginx service it installs; the benches run their own nginx, so it is stopped.
setup-bench:
	@command -v wrk >/dev/null && { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || { \
	  echo "installing Debian nginx-light and wrk for the benchmarks' bare-proxy baseline"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  { $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk >/dev/null \
	    && { ! command -v systemctl >/dev/null || $$SUDO systemctl disable --now nginx >/dev/null 2>&1 || true; }; } \
	  || echo "warning: could not install nginx-light and wrk: goals 1, 2 and 5 will have no bare-proxy baseline" >&2; }

end2end/node_modules/.stamp: end2end/package.json end2end/package-lock.json
	cd end2end && npm ci --no-audit --no-fund
	touch $@

client-tests/node_modules/.stamp: client-tests/package.json client-tests/package-lock.json
	cd client-tests && npm ci --no-audit --no-fund
	touch $@

test: setup-test lint-fmt test-rust site test-e2e test-sdk test-clients

# Unit and integration tests (the integration tests start real servers on 127.0.0.1:0).
test-rust:
	$(CARGO) nextest run -p server -p app --no-fail-fast

# Browser tests in Debian Chromium against the debug server binary and the release site. The
# binary is built with the test feature set (nextest --no-run), so after test-rust it is a no-op.
test-e2e:
	$(CARGO) nextest run -p server -p app --no-run
	cd end2end && node --test

# The official Python SDKs as clients of SubLane + mock upstream (venv made here, from PyPI).
test-sdk: .venv/.stamp
	$(CARGO) nextest run -p server -p app --no-run
	.venv/bin/python -m pytest -q -p no:cacheprovider sdk-tests

# Real clients that speak only Chat Completions (the Vercel AI SDK's OpenAI-compatible provider,
# pinned in client-tests/package-lock.json) against SubLane and the mock upstream.
test-clients: client-tests/node_modules/.stamp
	$(CARGO) nextest run -p server -p app --no-run
	cd client-tests && node --test

.venv/.stamp: sdk-tests/requirements.txt
	python3 -m venv .venv
	.venv/bin/python -m pip install -q --disable-pip-version-check -r sdk-tests/requirements.txt
	touch $@

lint-fmt:
	$(CARGO) fmt --all --check

lint: lint-fmt
	$(CARGO) clippy -p server -p app --all-targets -- -D warnings
	$(CARGO) clippy -p frontend --target wasm32-unknown-unknown --target-dir target/front -- -D warnings

fmt:
	$(CARGO) fmt --all

# The bare-nginx baseline of goals 1, 2 and 5, and ../shared/bench/side-by-side.sh's load generator.
bench: setup-bench
	$(CARGO) bench -p server --bench proxy
	$(CARGO) bench -p server --bench scheduler
	$(CARGO) bench -p server --bench memory

clean-data:
	rm -rf ./data
