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

cargo nextest run --workspace --no-fail-fast
cargo test --workspace --doc --quiet
