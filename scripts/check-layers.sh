#!/usr/bin/env bash
# The floors of the workspace, checked on the dependency graph (cargo resolves each package's own
# dependencies here, so a crate cannot lean on a feature another member turns on):
#   karpenter-core    CRD types and pure decisions: no actor runtime, async runtime, Kubernetes
#                     client, HTTP stack, AWS SDK, nor the crates above it.
#   karpenter-actors  actors, ports, providers: no Kubernetes client, HTTP stack or AWS SDK.
set -euo pipefail
cd "$(dirname "$0")/.."

deps_of() {
  cargo tree --locked -p "$1" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u
}

fail=0
check() {
  local crate=$1 forbidden=$2 found
  found=$(deps_of "$crate" | grep -E "^(${forbidden})$" || true)
  if [ -n "$found" ]; then
    echo "layering: $crate must not depend on: $(echo "$found" | tr '\n' ' ')" >&2
    fail=1
  fi
}

check karpenter-core 'actix|actix-rt|tokio|kube|kube-client|kube-runtime|hyper|axum|aws-config|aws-sdk-[a-z0-9]+|karpenter-actors|karpenter'
check karpenter-actors 'kube-client|kube-runtime|hyper|axum|aws-config|aws-sdk-[a-z0-9]+|karpenter'
exit $fail
