#!/usr/bin/env bash
# Creates or refreshes the project's Python venv (.venv) with the pinned tools the tests drive
# (scripts/requirements.txt). Quick when nothing changed: a stamp records what was installed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${KARPENTER_VENV:-.venv}
requirements=scripts/requirements.txt
stamp="$venv/.requirements.installed"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi
