#!/usr/bin/env bash
# install-deps.sh — install everything tenure's integration tests need.
#
# Usage:
#   scripts/install-deps.sh            # install what is missing, skip the rest
#
# Idempotent: run it as often as you like; components already present at the
# pinned version are skipped. It prints one line per component:
#   <component>: <installed|already present|...> (<seconds>s)
# and exits non-zero with a message naming the component that failed.
#
# What it installs (Debian 12, run as root or with passwordless sudo):
#   apt   etcd-server etcd-client redis-server curl procps chromium
#         e2fsprogs (chattr, for the lock tests' store outage)
#         strace (delays a store's syscall, and shows whether a command was ever executed)
#         bindfs fuse3 (a FUSE mount whose daemon the hung-storage test stops)
#         radosgw ceph-mon ceph-osd (with --no-install-recommends)
#         user-mode-linux nfs-ganesha nfs-ganesha-vfs rpcbind nfs-common kmod iproute2
#         (with --no-install-recommends; the NFS harness, scripts/nfs.sh)
#         (python3-venv / nodejs+npm only if python3 venv / npm are missing)
#   pip   moto[server] and localbucket, in a venv at $TOOLS/venv
#   npm   azurite and s3rver, in $TOOLS/npm (npm install --prefix)
#
# Environment:
#   TENURE_TOOLS_DIR   where the venv and npm tree go (default: <repo>/.tools)
#   PYTHON             interpreter used to create the venv (default: python3)
#
# scripts/servers.sh starts the servers from these locations; keep the two in
# sync (it reads the same TENURE_TOOLS_DIR).
#
# apt packages are installed with daemon auto-start disabled (policy-rc.d), so
# the distribution's redis/etcd services do not grab the ports the test
# servers use.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${TENURE_TOOLS_DIR:-$REPO/.tools}"
PYTHON="${PYTHON:-python3}"

# Pinned versions. Azurite 3.36+ declares node >= 22; 3.35.0 works on node 20.
MOTO_VERSION="5.2.5"
LOCALBUCKET_VERSION="1.2.1"
AZURITE_VERSION="3.35.0"
S3RVER_VERSION="3.7.1"

APT_PACKAGES=(etcd-server etcd-client redis-server curl procps chromium e2fsprogs bindfs fuse3 strace)
APT_PACKAGES_NORECOMMENDS=(radosgw ceph-mon ceph-osd)
# scripts/nfs.sh: a real NFS server (ganesha) and client kernels (user-mode-linux).
APT_PACKAGES_NFS=(user-mode-linux nfs-ganesha nfs-ganesha-vfs rpcbind nfs-common kmod iproute2)

export DEBIAN_FRONTEND=noninteractive

die() { echo "install-deps: ERROR: $*" >&2; exit 1; }
now() { date +%s.%N; }
report() { # component, what, start-time
    printf '%-8s %s (%ss)\n' "$1:" "$2" "$(awk -v a="$3" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and sudo is not available; apt packages cannot be installed"
    SUDO="sudo"
fi

# ---------------------------------------------------------------- apt ------
APT_UPDATED=0
apt_missing() { # prints the packages (of the arguments) that are not installed
    local p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
            echo "$p"
        fi
    done
}
apt_install() { # [apt-get install options...] -- packages...
    local opts=() pkgs=()
    while [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    pkgs=("$@")
    if [ "$APT_UPDATED" -eq 0 ]; then
        $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null || die "apt-get update failed"
        APT_UPDATED=1
    fi
    # Keep postinst scripts from starting redis/etcd/ceph daemons.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod +x "$policy"
        made_policy=1
    fi
    local rc=0
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${opts[@]}" "${pkgs[@]}" \
        >"$TOOLS/apt-install.log" 2>&1 || rc=$?
    if [ "$made_policy" -eq 1 ]; then $SUDO rm -f "$policy"; fi
    if [ "$rc" -ne 0 ]; then
        tail -n 20 "$TOOLS/apt-install.log" >&2
        die "apt-get install ${pkgs[*]} failed (full log: $TOOLS/apt-install.log)"
    fi
}

mkdir -p "$TOOLS"

# apt_group NAME [apt-get install options…] -- PACKAGES…: installs those missing.
apt_group() {
    local name="$1" t opts=() note=""
    shift
    while [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    [ "${#opts[@]}" -eq 0 ] || note=" (${opts[*]})"
    t=$(now)
    mapfile -t missing < <(apt_missing "$@")
    if [ "${#missing[@]}" -eq 0 ]; then
        report "$name" "already present: $*" "$t"
    else
        apt_install "${opts[@]}" -- "${missing[@]}"
        report "$name" "installed: ${missing[*]}$note" "$t"
    fi
}
apt_group apt -- "${APT_PACKAGES[@]}"
apt_group ceph --no-install-recommends -- "${APT_PACKAGES_NORECOMMENDS[@]}"
apt_group nfs --no-install-recommends -- "${APT_PACKAGES_NFS[@]}"

for bin in linux ganesha.nfsd rpcbind mount.nfs modprobe ip etcd etcdctl redis-server redis-cli curl ps chattr strace script bindfs fusermount3 ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool; do
    command -v "$bin" >/dev/null 2>&1 || die "'$bin' is still missing after the apt step"
done

# ------------------------------------------------------------- python ------
t=$(now)
VENV="$TOOLS/venv"
py_wanted="moto==$MOTO_VERSION localbucket==$LOCALBUCKET_VERSION"
py_have() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" - "$MOTO_VERSION" "$LOCALBUCKET_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
ok = version("moto") == sys.argv[1] and version("localbucket") == sys.argv[2]
import flask, flask_cors  # moto[server] extras
sys.exit(0 if ok else 1)
PY
}
if py_have && [ -x "$VENV/bin/moto_server" ] && [ -x "$VENV/bin/localbucket" ]; then
    report python "already present: $py_wanted" "$t"
else
    if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        # Debian's system python needs python3-venv for ensurepip.
        mapfile -t missing < <(apt_missing python3-venv)
        [ "${#missing[@]}" -eq 0 ] || apt_install -- python3-venv
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV" || die "could not create the venv at $VENV with $PYTHON"
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        "moto[server]==$MOTO_VERSION" "localbucket==$LOCALBUCKET_VERSION" \
        >"$TOOLS/pip-install.log" 2>&1 || {
        tail -n 20 "$TOOLS/pip-install.log" >&2
        die "pip install of $py_wanted failed (full log: $TOOLS/pip-install.log)"
    }
    py_have || die "pip finished, but $py_wanted is not importable from $VENV"
    report python "installed: $py_wanted into $VENV" "$t"
fi

# ---------------------------------------------------------------- npm ------
t=$(now)
NPM_DIR="$TOOLS/npm"
npm_version_of() { # package -> installed version or empty
    local f="$NPM_DIR/node_modules/$1/package.json"
    [ -f "$f" ] || return 0
    node -e 'process.stdout.write(require(process.argv[1]).version)' "$f" 2>/dev/null || true
}
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    mapfile -t missing < <(apt_missing nodejs npm)
    [ "${#missing[@]}" -eq 0 ] || apt_install -- "${missing[@]}"
fi
npm_wanted="azurite@$AZURITE_VERSION s3rver@$S3RVER_VERSION"
if [ "$(npm_version_of azurite)" = "$AZURITE_VERSION" ] && [ "$(npm_version_of s3rver)" = "$S3RVER_VERSION" ] \
    && [ -x "$NPM_DIR/node_modules/.bin/azurite-blob" ] && [ -x "$NPM_DIR/node_modules/.bin/s3rver" ]; then
    report npm "already present: $npm_wanted" "$t"
else
    mkdir -p "$NPM_DIR"
    npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
        "azurite@$AZURITE_VERSION" "s3rver@$S3RVER_VERSION" \
        >"$TOOLS/npm-install.log" 2>&1 || {
        tail -n 20 "$TOOLS/npm-install.log" >&2
        die "npm install of $npm_wanted failed (full log: $TOOLS/npm-install.log)"
    }
    [ "$(npm_version_of azurite)" = "$AZURITE_VERSION" ] || die "azurite $AZURITE_VERSION missing after npm install"
    [ "$(npm_version_of s3rver)" = "$S3RVER_VERSION" ] || die "s3rver $S3RVER_VERSION missing after npm install"
    report npm "installed: $npm_wanted into $NPM_DIR" "$t"
fi

echo "install-deps: done (tools in $TOOLS)"
