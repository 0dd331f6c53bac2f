#!/usr/bin/env bash
# The data-safety fault suite on Apache Kafka: real worker processes killed, the network to
# the target cut, brokers crashed and restarted, leaders moved, progress deleted, transactions
# held open (tests/faults.rs, the exactly-once proof of tests/exactly_once.rs and the
# data-safety scenarios of tests/validation.rs and tests/data_safety.rs). Prints one line per
# scenario with what it counted. Needs the Kafka jars `scripts/setup.sh` fetches.
#
#   bash scripts/fault-suite.sh                        # outages of 30 s
#   MIRRORFLOW_FAULT_OUTAGE_SECS=10 bash scripts/fault-suite.sh
#   MIRRORFLOW_EOS_RECORDS=1000000 bash scripts/fault-suite.sh   # a longer exactly-once run
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export MIRRORFLOW_REQUIRE_BROKERS="${MIRRORFLOW_REQUIRE_BROKERS:-1}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
cargo nextest run --locked --no-fail-fast --no-capture \
  --test faults --test exactly_once --test data_safety --test validation \
  -E 'test(/^fault_|^exactly_once_|open_transaction|scaled_away|deleted_progress|failure_survives|commit_that/)' \
  >"$out" 2>&1 || status=$?
grep -E '^(FAULT|EOS) ' "$out" || true
grep -E '^\s+(FAIL|SIGSEGV|TIMEOUT)' "$out" || true
tail -n 1 "$out"
exit "$status"
