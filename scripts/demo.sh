#!/usr/bin/env bash
# The demo: two local brokers (tansu), a source topic with records, a standalone worker, a
# report comparing every record. No Kubernetes needed. Arguments go to `mirrorflow demo`
# (`--help` lists them; `--broker kafka` after `bash scripts/setup.sh`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
export PATH="$HOME/.cargo/bin:$PATH"
started=$SECONDS
if [ ! -x "${CARGO_TARGET_DIR:-target}/debug/mirrorflow" ]; then
  printf '[demo] building mirrorflow: about 4 minutes on 2 cores the first time, later runs reuse it\n' >&2
fi
# The dev profile, with the `testkit` feature (the demo command) and the test suite's dependency
# features (the `demo` test target pulls in the dev-dependencies): `scripts/test.sh` then reuses
# this build instead of compiling the dependencies a second time. Cargo's "Compiling ..." lines
# are the progress.
cargo build --locked --features testkit --bin mirrorflow --test demo
printf '[demo] build done in %d s; running the demo\n' $((SECONDS - started)) >&2
exec "${CARGO_TARGET_DIR:-target}/debug/mirrorflow" demo "$@"
