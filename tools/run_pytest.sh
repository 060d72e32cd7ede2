#!/usr/bin/env bash
# Runs pytest over the given paths. pytest exits 5 when it collects nothing: that is accepted only
# when no test files exist at all; with test files present, collecting nothing is a failure.
set -uo pipefail
python="$1"; shift
"$python" -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  if [ -z "$(find "$@" -name 'test_*.py' -print -quit 2>/dev/null)" ]; then
    echo "run_pytest: no Python test files under $*; nothing to run"
    exit 0
  fi
  echo "run_pytest: test files exist but pytest collected nothing" >&2
fi
exit "$rc"
