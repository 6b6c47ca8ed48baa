#!/usr/bin/env bash
# scripts/vendor-htmx.sh HTMX_VERSION SSE_VERSION: fetch htmx and its SSE
# extension from npm (npm pack checks the registry's integrity hash) into
# submitter/ui/static, named by version. Then set ui.HTMXVersion and
# ui.HTMXSSEVersion and the sums in TestVendoredScripts to what it prints.
# `go build` never needs this or Node: the files are committed and embedded.
set -euo pipefail
htmx=${1:?usage: $0 HTMX_VERSION SSE_VERSION}
sse=${2:?usage: $0 HTMX_VERSION SSE_VERSION}
dest=$(cd "$(dirname "$0")/../submitter/ui/static" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "htmx.org@$htmx" "htmx-ext-sse@$sse" >/dev/null
mkdir h s
tar xzf "htmx.org-$htmx.tgz" -C h
tar xzf "htmx-ext-sse-$sse.tgz" -C s
cp h/package/dist/htmx.min.js "$dest/htmx-$htmx.min.js"
cp s/package/dist/sse.min.js "$dest/htmx-ext-sse-$sse.min.js"
cp h/package/LICENSE "$dest/LICENSE.htmx"
cp s/package/LICENSE "$dest/LICENSE.htmx-ext-sse"
cd "$dest" && sha256sum "htmx-$htmx.min.js" "htmx-ext-sse-$sse.min.js"
