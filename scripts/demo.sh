#!/usr/bin/env bash
# The demo: two local brokers, a source topic with records, a standalone worker, a report.
# No Kubernetes needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked --bin mirrorflow
exec target/release/mirrorflow demo "$@"
