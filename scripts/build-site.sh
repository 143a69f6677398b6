#!/usr/bin/env bash
# Builds the web assets into target/site: the WASM front end (wasm-bindgen, then wasm-opt from
# npm binaryen in release mode), the Tailwind CSS, and public/. The server binary is built by the
# Makefile. No LEPTOS_OUTPUT_NAME at compile time: the server names the assets at run time
# (app::OUTPUT_NAME = "sublane"), and wasm-bindgen's default file names match what Leptos loads.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-release}
SITE=target/site
PKG=$SITE/pkg
case "$MODE" in
  release) PROFILE=wasm-release; OUT_DIR=wasm-release ;;
  dev) PROFILE=dev; OUT_DIR=debug ;;
  *) echo "usage: $0 [release|dev]" >&2; exit 2 ;;
esac

cargo build -p frontend --lib --target wasm32-unknown-unknown --profile "$PROFILE" --target-dir target/front
rm -rf "$SITE" && mkdir -p "$PKG" && cp -r public/. "$SITE/"
wasm-bindgen --target web --no-typescript --out-dir "$PKG" --out-name sublane \
  "target/front/wasm32-unknown-unknown/$OUT_DIR/frontend.wasm"
if [ "$MODE" = release ]; then
  # npm binaryen only: Debian's wasm-opt 108 silently breaks hydration.
  ./node_modules/.bin/wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-reference-types --enable-sign-ext --enable-mutable-globals \
    "$PKG/sublane_bg.wasm" -o "$PKG/sublane_bg.wasm"
fi
./node_modules/.bin/tailwindcss -i style/tailwind.css -o "$PKG/sublane.css" --minify 2>/dev/null
echo "site built in $SITE ($MODE): wasm $(stat -c %s "$PKG/sublane_bg.wasm") bytes, css $(stat -c %s "$PKG/sublane.css") bytes"
