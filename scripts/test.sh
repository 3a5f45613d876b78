#!/usr/bin/env bash
# Runs every test of the workspace: unit, integration, property and doc tests.
# This is the README's test command and what CI runs after formatting and lints.
set -euo pipefail
cd "$(dirname "$0")/.."

# Python tools of the tests (moto for the AWS adapter tests) in the project venv; the tests
# that need them fail instead of skipping when this is set.
scripts/venv.sh >/dev/null
export KARPENTER_REQUIRE_MOTO=1

cargo nextest run --workspace --no-fail-fast
cargo test --workspace --doc --quiet
