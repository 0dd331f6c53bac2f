#!/usr/bin/env bash
# The test command: installs what is missing, then format, lint and the whole test suite
# (unit, table, broker and mock-API tests, and the Kubernetes end-to-end suites on the real
# kube-apiserver of ../shared/k8s/ when it is there, else on KUBECONFIG's cluster, else SKIPPED).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
# Broker tests must not skip in CI: a missing broker is a failure there.
export MIRRORFLOW_REQUIRE_BROKERS="${MIRRORFLOW_REQUIRE_BROKERS:-1}"
cargo fmt --all -- --check
# Every target (tests and benches turn on `testkit`), then the operator build alone.
cargo clippy --all-targets --locked -- -D warnings
cargo clippy --lib --bins --locked -- -D warnings
cargo nextest run --lib --bins --tests --locked --no-fail-fast
