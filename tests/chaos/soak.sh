#!/usr/bin/env bash
# ./x soak [HOURS]: the chaos churn for HOURS (default 1), printing RSS, open
# fds and threads of the exporter once a minute. Not in CI.
set -euo pipefail
BUILD=${1:?build dir}
HOURS=${2:-1}
exec python3 "$(dirname "$0")/chaos.py" "$BUILD" --hours "$HOURS"
