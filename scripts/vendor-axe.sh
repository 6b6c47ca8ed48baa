#!/usr/bin/env bash
# scripts/vendor-axe.sh VERSION: fetch axe-core from npm (npm pack checks
# the registry's integrity hash) into submitter/ui/testdata, for the
# browser test's accessibility check only (it is never embedded or
# served). Then set axeVersion and axeSHA256 in submitter/ui/browser_test.go
# to what it prints.
set -euo pipefail
version=${1:?usage: $0 VERSION}
dest=$(cd "$(dirname "$0")/../submitter/ui/testdata" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "axe-core@$version" >/dev/null
tar xzf "axe-core-$version.tgz"
cp package/axe.min.js "$dest/axe-core-$version.min.js"
cp package/LICENSE "$dest/LICENSE.axe-core"
cd "$dest" && sha256sum "axe-core-$version.min.js"
