#!/usr/bin/env bash
# Runs every test of the workspace: unit, integration, property and doc tests.
# This is the README's test command and what CI runs after formatting and lints.
set -euo pipefail
cd "$(dirname "$0")/.."

# Python tools the tests drive (the Helm SDK, schema validators): see scripts/requirements.txt.
scripts/venv.sh
# The AWS adapter tests fail instead of skipping when moto is missing from the venv.
export KARPENTER_REQUIRE_MOTO=1

# The floors of the workspace (core below actors below the binary) hold on the dependency graph.
scripts/check-layers.sh

# The controller image builds without default features (Dockerfile): that binary must not carry
# tokio's test-util (paused time is for `karpenter simulate` only).
release_tokio=$(cargo tree --locked -p karpenter -e normal --no-default-features -i tokio -f '{p} {f}' --depth 0)
if grep -q 'test-util' <<<"$release_tokio"; then
  echo "the release build (--no-default-features) turns on tokio/test-util: $release_tokio" >&2
  exit 1
fi

cargo nextest run --workspace --no-fail-fast
cargo test --workspace --doc --quiet
