#!/bin/sh
# test.sh -- every test, from a fresh clone: installs what is missing
# (scripts/deps.sh), then tests/run.sh builds the plain, ASan+UBSan and TSan
# variants and runs every test.  Ends with "N passed, N failed"; exits
# nonzero if any failed.  .ci/run runs exactly this.
set -eu

ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
cd "$ROOT"

./scripts/deps.sh
exec ./tests/run.sh "$@"
