#!/usr/bin/env bash
# AddressSanitizer and LeakSanitizer over the unsafe room (src/kafka/sys/README.md): the
# library's tests (the zero-copy send, the drain, the producer's events, the admin calls) and
# the replication suite, with librdkafka and the other C dependencies instrumented too.
# Manual, not part of scripts/test.sh: a build of its own in target/asan (about 15 minutes
# on 2 cores the first time), then the tests (a few minutes). Needs the brokers that
# scripts/setup.sh installs. Arguments go to both test binaries (a test name filter).
#
# rustc's own sanitizer runtime is linked (stable rustc, unlocked with RUSTC_BOOTSTRAP=1 for
# -Zsanitizer); the C code is compiled with gcc's -fsanitize=address, whose calls that
# runtime serves. `--target` keeps the flags off build scripts and proc macros. The standard
# library is not rebuilt (no rust-src here), so its own code is not instrumented; its
# allocations are checked (they go through the runtime's malloc).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export MIRRORFLOW_REQUIRE_BROKERS="${MIRRORFLOW_REQUIRE_BROKERS:-1}"
target="$(rustc -vV | sed -n 's/^host: //p')"
flags="-fsanitize=address -fno-omit-frame-pointer -g"
build() {
  RUSTC_BOOTSTRAP=1 \
    RUSTFLAGS="-Zsanitizer=address -Cforce-frame-pointers=yes" \
    CFLAGS="$flags" CXXFLAGS="$flags" \
    CARGO_TARGET_DIR=target/asan \
    cargo test --locked --target "$target" --lib --test replication "$@"
}
build --no-run
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitize.supp:print_suppressions=1"
build -- "$@"
