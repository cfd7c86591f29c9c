#!/bin/sh
# Copies the CRDs from crds/ (generated from operator/cronoq/api, the one source of truth) into
# the chart's crds/ directory, which Helm installs before the templates. Run it after every
# change to crds/; tests/chart/test_crds.py fails while the two directories differ.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/crds"
dst="$root/charts/cronoq/crds"
mkdir -p "$dst"
# A CRD removed from crds/ must leave the chart too.
find "$dst" -maxdepth 1 -name '*.yaml' -type f -delete
cp "$src"/*.yaml "$dst"/
echo "synced $(ls "$src"/*.yaml | wc -l | tr -d ' ') CRD file(s) from crds/ to charts/cronoq/crds/"
