#!/usr/bin/env bash
# Creates or refreshes the project venv (.venv) with the pinned Python tools of
# scripts/requirements.txt. Cheap when nothing changed: a stamp holding the requirements' hash
# skips pip. Prints the venv's path on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
requirements="$root/scripts/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv" >&2
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
    echo "$want" > "$stamp"
fi
echo "$venv"
