#!/usr/bin/env bash
# nfs.sh — a real NFS server and two NFS client kernels on one machine, for tests.
#
# The host kernel of these machines has no NFS client or server, so:
#   server   nfs-ganesha (FSAL VFS) and rpcbind, in a network namespace of our own,
#            on a bridge address (10.77.213.1); it exports $DIR/export
#   clients  two user-mode-linux guests, `a` (10.77.213.2) and `b` (10.77.213.3), each
#            its own Linux kernel with its own NFS client, page and attribute caches,
#            hostname and nfs4_unique_id: two machines, as far as NFS can tell. Their
#            root is the host's / (hostfs), so they run the host's binaries (tenure
#            built on the host); each has a tap on the namespace's bridge
# Nothing leaves the namespace: the addresses exist only inside it.
#
# Usage (DIR: --dir DIR, or $TENURE_NFS_DIR, default <repo>/.nfs):
#   scripts/nfs.sh check                   exit 0 if this machine can run it, else print
#                                          why not and exit 77 (not root, no /dev/net/tun,
#                                          no network namespaces, packages missing)
#   scripts/nfs.sh up [--vers 4.2|4.1|3] [--opts-a OPTS] [--opts-b OPTS] [--mem SIZE]
#                     [--owner PID]        start server and guests; returns when both
#                                          guests have the export mounted. With --owner,
#                                          a watchdog tears it all down when PID exits
#                                          (a test killed by its runner leaves nothing)
#   scripts/nfs.sh down [--all]            stop everything (idempotent, whatever state
#                                          `up` reached): guests, ganesha, rpcbind by PID,
#                                          anything left in the namespace, the namespace;
#                                          --all: every harness on this machine
#   scripts/nfs.sh status                  what runs; exit 0 only if all of it does
#   scripts/nfs.sh run [--timeout S] GUEST -- CMD [ARGS…]
#                                          run CMD in guest a or b (as root, cwd $DIR,
#                                          killed after S seconds, default 600); prints
#                                          its stdout and stderr, exits with its status
#   scripts/nfs.sh server stop|cont|restart
#                                          SIGSTOP / SIGCONT ganesha (the server hangs:
#                                          hard mounts block), or kill and restart it
#   scripts/nfs.sh link GUEST down|up      cut a guest off the network (its tap down)
#   scripts/nfs.sh env                     print `export VAR=value` lines (below)
#
# In every guest job, and from `env`:
#   NFS_MNT    the mount point, the same path in both guests ($DIR/mnt; on the host it
#              is an empty directory: the guests mount over it)
#   NFS_LOCAL  a guest-local ext4 disk (each guest its own, same path $DIR/local)
#   NFS_EXPORT the exported directory as the server's local disk (host path)
#   GUEST      a or b; TENURE: the tenure binary ($TENURE_BIN, default target/debug)
#   NFS_SRC, NFS_OPTS  the mount's source and options (to mount it again elsewhere
#              with other options: mount -t nfs -o "$NFS_OPTS,nosharecache,…")
#
# Clocks: `up` sets each guest's clock to the host's (to within a few ms, printed), as
# NTP would; the tests measure what is left.
#
# Mount options: vers=4.2 by default (hard, close-to-open, default attribute caching);
# --opts-a / --opts-b add options for one guest (e.g. actimeo=60, lookupcache=none,
# noac). vers=3 mounts with nolock,proto=tcp,mountproto=tcp.
#
# Files in DIR: ns (the namespace's name), pid/* (ganesha, rpcbind, uml-a, uml-b),
# ganesha/ (config, log), guest-a/ guest-b/ (console log, jobs/, disk image).
# Guest jobs: the host writes jobs/ID.job; the guest renames it ID.run, runs it, writes
# ID.out, ID.err, then ID.rc (hostfs writes go straight through to the host's files).
#
# Needs root, /dev/net/tun, network namespaces, and the packages user-mode-linux
# nfs-ganesha nfs-ganesha-vfs rpcbind nfs-common kmod e2fsprogs iproute2 (scripts/install-deps.sh).
# One harness per machine at a time (rpcbind's socket is machine-wide).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${TENURE_NFS_DIR:-$REPO/.nfs}"
TENURE_BIN="${TENURE_BIN:-$REPO/target/debug/tenure}"
NET=10.77.213
SERVER=$NET.1
UML_MODULES=/usr/lib/uml/modules
GANESHA_FSAL=/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so

die() { echo "nfs.sh: ERROR: $*" >&2; exit 1; }
log() { echo "nfs.sh: $*" >&2; }

# alive PID: the process exists and is not a zombie.
alive() {
    local pid="$1" st
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    st=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$st" != Z ]
}
pid_of() { cat "$DIR/pid/$1" 2>/dev/null || true; }
ns_name() { cat "$DIR/ns" 2>/dev/null || true; }
guest_addr() { case "$1" in a) echo "$NET.2" ;; b) echo "$NET.3" ;; *) die "no guest '$1' (a or b)" ;; esac; }

# ------------------------------------------------------------- check ------

# why_not: prints the first reason this machine cannot run the harness.
why_not() {
    [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces, taps and ganesha need root)"; return; }
    [ -c /dev/net/tun ] || { echo "no /dev/net/tun (the guests' network)"; return; }
    local c
    for c in ip linux ganesha.nfsd rpcbind mount.nfs modprobe mkfs.ext4 setsid timeout python3; do
        command -v "$c" >/dev/null 2>&1 \
            || { echo "'$c' is missing (apt-get install user-mode-linux nfs-ganesha nfs-ganesha-vfs rpcbind nfs-common kmod e2fsprogs iproute2, or scripts/install-deps.sh)"; return; }
    done
    [ -f "$GANESHA_FSAL" ] || { echo "$GANESHA_FSAL is missing (apt-get install nfs-ganesha-vfs)"; return; }
    compgen -G "$UML_MODULES/*/kernel/fs/nfs/nfsv4.ko" >/dev/null \
        || { echo "no NFS modules for the user-mode-linux kernel under $UML_MODULES"; return; }
    local probe="tnfs-probe-$$"
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "cannot create a network namespace (ip netns add failed)"; return
    fi
    if ! ip netns exec "$probe" ip tuntap add tap-probe mode tap 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null || true
        echo "cannot create a tap device in a network namespace"; return
    fi
    ip netns del "$probe" 2>/dev/null || true
}

# host_cannot: prints why the host's kernel cannot run a user-mode-linux guest's
# programs at all, if it cannot: a guest booted with /bin/true as its init must
# see it exit 0. (Seen on a Firecracker host, kernel 6.18 with AVX-512: every
# program in the UML 6.1 guest dies of SIGSEGV at its first instruction.) This
# is the host, not a missing package: no install step can fix it.
host_cannot() {
    local scratch out
    scratch=$(mktemp -d)
    out=$(timeout 60 linux "umid=tnfs-probe-$$" "uml_dir=$scratch" mem=64M root=/dev/root rootfstype=hostfs \
        rootflags=/ rw init=/bin/true con=null con0=null,fd:1 2>&1 </dev/null || true)
    rm -rf "$scratch"
    case "$out" in
        *"Attempted to kill init! exitcode=0x00000000"*) ;;
        *"Attempted to kill init! exitcode=0x0000000b"*)
            echo "this host's kernel ($(uname -r)) cannot run user-mode-linux programs: /bin/true as a guest's init dies of SIGSEGV" ;;
        *) echo "a user-mode-linux guest did not run /bin/true as its init: $(printf '%s' "$out" | grep -m1 -E 'panic|exitcode|error' || echo 'no word from it')" ;;
    esac
}

cmd_check() {
    local why
    why=$(why_not)
    if [ -n "$why" ]; then
        echo "nfs.sh: cannot run here: $why"
        exit 77
    fi
    why=$(host_cannot)
    if [ -n "$why" ]; then
        echo "nfs.sh: this host cannot run the harness: $why"
        exit 78
    fi
    echo "nfs.sh: this machine can run the NFS harness"
}

# ---------------------------------------------------------------- up ------

write_ganesha_conf() {
    local protocols="$1"
    mkdir -p "$DIR/ganesha/recov"
    cat >"$DIR/ganesha/ganesha.conf" <<EOF
# Written by scripts/nfs.sh: one export, no NLM or RQUOTA, no grace period.
NFS_CORE_PARAM {
    Bind_addr = $SERVER;
    NFS_Port = 2049;
    MNT_Port = 20048;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Protocols = $protocols;
}
NFSV4 {
    # A restarted server grants at once instead of waiting out a grace period.
    Graceless = true;
    Lease_Lifetime = 15;
    RecoveryBackend = fs;
    RecoveryRoot = "$DIR/ganesha/recov";
}
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1;
    Path = "$DIR/export";
    Pseudo = /export;
    Access_Type = RW;
    Squash = No_Root_Squash;
    Protocols = $protocols;
    Transports = TCP;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
}

start_ganesha() {
    local ns pid
    ns=$(ns_name)
    # setsid: its own process group and session, so nothing of ours signals it by
    # accident and `down` can stop it by PID.
    ip netns exec "$ns" setsid ganesha.nfsd -F -f "$DIR/ganesha/ganesha.conf" -L "$DIR/ganesha/ganesha.log" \
        -p "$DIR/ganesha/ganesha.pid" -N NIV_EVENT </dev/null >>"$DIR/ganesha/stdout.log" 2>&1 &
    pid=$!
    echo "$pid" >"$DIR/pid/ganesha"
    # Ready when it accepts TCP on 2049 (bash's /dev/tcp, inside the namespace).
    local i
    for i in $(seq 1 300); do
        alive "$pid" || die "ganesha exited at start; see $DIR/ganesha/ganesha.log"
        if ip netns exec "$ns" timeout 2 bash -c "exec 3<>/dev/tcp/$SERVER/2049" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    die "ganesha did not listen on $SERVER:2049 within 30 s; see $DIR/ganesha/ganesha.log"
}

write_guest_init() {
    # PID 1 of each guest: mount the basics, load NFS, configure the network, mount the
    # export and the local disk, then run jobs from guest-X/jobs until guest-X/halt.
    cat >"$DIR/guest-init" <<'EOF'
#!/bin/bash
# Runs as PID 1 of a user-mode-linux guest (see scripts/nfs.sh). Kernel arguments
# give it: guest (a/b), addr, server, dir, vers, opts, export.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
me="$dir/guest-$guest"
say() { echo "guest-init[$guest]: $*"; }
poweroff() { sync; echo o >/proc/sysrq-trigger; sleep 30; }
fail() { say "FAILED: $*"; echo "$*" >"$me/failed"; poweroff; }
mount -t proc proc /proc
mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mount -t tmpfs run /run
hostname "nfs-client-$guest"
ip link set lo up
ip addr add "$addr/24" dev eth0 || fail "no eth0"
ip link set eth0 up
modprobe -d "$dir/modroot" nfsv4 && modprobe -d "$dir/modroot" nfsv3 || fail "modprobe nfs"
mkdir -p "$dir/local"
mount -t ext4 /dev/ubda "$dir/local" || fail "mount of the local disk /dev/ubda"
case "$vers" in
  3) src="$server:$export" o="vers=3,nolock,proto=tcp,mountproto=tcp,port=2049,mountport=20048" ;;
  *) src="$server:/export" o="vers=$vers" ;;
esac
[ -n "$opts" ] && o="$o,$opts"
ok=0
for i in $(seq 1 30); do
  if mount -t nfs -o "$o" "$src" "$dir/mnt"; then ok=1; break; fi
  sleep 1
done
[ "$ok" = 1 ] || fail "mount -t nfs -o $o $src"
# For jobs that mount the export again with other options.
echo "$src" >"$me/mount-src"
echo "$o" >"$me/mount-opts"
grep " $dir/mnt " /proc/mounts >"$me/mount"
say "mounted: $(cat "$me/mount")"
echo ready >"$me/ready"
jobs="$me/jobs"
# The loop's pause is bash's own `read -t` on a FIFO that nobody writes (a guest
# has no /dev/fd for `<(:)`): `sleep 0.1`, a fork and exec ten times a second,
# kept the idle guests at about a third of a host core each.
tick=/run/guest-init-tick
mkfifo -m 600 "$tick" && exec 7<>"$tick" && rm -f "$tick" || fail "no FIFO for the job loop's pause"
while [ ! -e "$me/halt" ]; do
  for f in "$jobs"/*.job; do
    [ -e "$f" ] || continue
    id=${f##*/}; id=${id%.job}
    mv "$f" "$jobs/$id.run" 2>/dev/null || continue
    (
      exec 7<&-
      read -r limit <"$jobs/$id.limit" || limit=600
      cd "$dir" && timeout -k 5 "$limit" bash "$jobs/$id.run" >"$jobs/$id.out" 2>"$jobs/$id.err" </dev/null
      echo $? >"$jobs/$id.rc.tmp" && mv "$jobs/$id.rc.tmp" "$jobs/$id.rc"
    ) &
  done
  read -r -t 0.1 -u 7 _
done
say "halting"
umount -f -l "$dir/mnt" 2>/dev/null
umount "$dir/local" 2>/dev/null
poweroff
EOF
    chmod +x "$DIR/guest-init"
}

start_guest() {
    local g="$1" opts="$2" vers="$3" mem="$4" ns mac pid
    ns=$(ns_name)
    local me="$DIR/guest-$g"
    mkdir -p "$me/jobs"
    rm -f "$me/ready" "$me/failed" "$me/halt"
    truncate -s 512M "$me/disk.img"
    mkfs.ext4 -q -F "$me/disk.img"
    ip netns exec "$ns" ip tuntap add "tap-$g" mode tap
    ip netns exec "$ns" ip link set "tap-$g" master br0
    ip netns exec "$ns" ip link set "tap-$g" up
    case "$g" in a) mac=fe:fd:0a:4d:d5:02 ;; b) mac=fe:fd:0a:4d:d5:03 ;; esac
    # Kernel arguments with '=' and no '.' become init's environment. nice: the
    # machine's other work goes first.
    ip netns exec "$ns" setsid nice -n 10 linux "umid=tenure-nfs-$g" "uml_dir=$DIR/uml" "mem=$mem" \
        root=/dev/root rootfstype=hostfs rootflags=/ rw "init=$DIR/guest-init" \
        "ubd0=$me/disk.img" "eth0=tuntap,tap-$g,$mac" con=null con0=null,fd:1 \
        "nfs.nfs4_unique_id=tenure-nfs-client-$g" \
        "guest=$g" "addr=$(guest_addr "$g")" "server=$SERVER" "dir=$DIR" "vers=$vers" \
        "opts=$opts" "export=$DIR/export" \
        </dev/null >"$me/console.log" 2>&1 &
    pid=$!
    echo "$pid" >"$DIR/pid/uml-$g"
}

wait_guest() {
    local g="$1" me="$DIR/guest-$1" i
    for i in $(seq 1 1200); do
        [ -e "$me/ready" ] && return 0
        [ -e "$me/failed" ] && die "guest $g: $(cat "$me/failed"); see $me/console.log"
        alive "$(pid_of "uml-$g")" || die "guest $g exited during boot; see $me/console.log"
        sleep 0.1
    done
    die "guest $g was not ready within 120 s; see $me/console.log"
}

# guest_offset GUEST: the guest's clock minus the host's, "<mid> <uncertainty>" in
# seconds. The guest reads its clock, creates a file on hostfs, reads its clock again;
# the host's kernel stamped the file's ctime in between (its coarse clock: up to one
# 4 ms tick behind). hostfs shows the guest whole seconds only, so the host reads it.
guest_offset() {
    local g="$1" out
    out=$(cmd_run --timeout 60 "$g" -- bash -c \
        'for i in 1 2 3 4 5; do t0=$EPOCHREALTIME; : > "$1/clock-$i"; t1=$EPOCHREALTIME; echo "$i $t0 $t1"; sleep 0.05; done' \
        bash "$DIR/guest-$g")
    while read -r i t0 t1; do
        echo "$t0 $t1 $(stat -c %.9Z "$DIR/guest-$g/clock-$i")"
    done <<<"$out" | awk 'BEGIN { lo = -1e18; hi = 1e18 }
        { l = $1 - $3 - 0.004; h = $2 - $3; if (l > lo) lo = l; if (h < hi) hi = h }
        END { printf "%.6f %.6f\n", (lo + hi) / 2, (hi - lo) / 2 }'
}

# sync_clock GUEST: a UML guest's clock runs at the host's rate (it reads the host's
# clock) but starts tens to hundreds of ms off, fixed at boot. Set it right, as NTP
# would on real machines: read and set in one process, so the correction is exact.
sync_clock() {
    local g="$1" off err
    read -r off err < <(guest_offset "$g")
    cmd_run --timeout 60 "$g" -- python3 -c \
        "import time; time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) - ($off))"
    read -r off err < <(guest_offset "$g")
    log "guest $g: clock set; now off the host's by ${off}s ± ${err}s"
}

cmd_up() {
    local vers=4.2 opts_a="" opts_b="" mem=640M owner=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --owner) owner="$2"; shift ;;
            --vers) vers="$2"; shift ;;
            --opts-a) opts_a="$2"; shift ;;
            --opts-b) opts_b="$2"; shift ;;
            --mem) mem="$2"; shift ;;
            *) die "up: unknown option $1" ;;
        esac
        shift
    done
    case "$vers" in 3 | 4 | 4.0 | 4.1 | 4.2) ;; *) die "up: --vers must be 3, 4.0, 4.1 or 4.2" ;; esac
    local why
    why=$(why_not)
    [ -z "$why" ] || { echo "nfs.sh: cannot run here: $why" >&2; exit 77; }
    [ -x "$TENURE_BIN" ] || die "no tenure binary at $TENURE_BIN (cargo build -p tenure-cli, or set TENURE_BIN)"
    # One harness per machine: wait (up to TENURE_NFS_WAIT seconds, default 900) for
    # another one to go away, e.g. another test's.
    local other waited=0
    while other=$(ip netns list | awk '/^tenure-nfs-/ {print $1}' | head -n 1); [ -n "$other" ]; do
        [ "$waited" -lt "${TENURE_NFS_WAIT:-900}" ] \
            || die "another NFS harness is up (namespace $other, dir $(cat "/run/tenure-nfs/$other" 2>/dev/null || echo unknown)): stop it with scripts/nfs.sh down --dir <its dir>"
        [ "$waited" -eq 0 ] && log "waiting for another NFS harness (namespace $other) to go away"
        sleep 1; waited=$((waited + 1))
    done
    [ ! -e "$DIR/ns" ] || die "$DIR is in use (namespace $(ns_name)): run scripts/nfs.sh down first"

    mkdir -p "$DIR/pid" "$DIR/export" "$DIR/mnt" "$DIR/local" "$DIR/modroot/lib/modules"
    DIR="$(cd "$DIR" && pwd)"
    case "$DIR/" in /proc/* | /sys/* | /dev/* | /run/*) die "$DIR: the guests mount over /proc, /sys, /dev and /run; pick another --dir" ;; esac
    # A failed or interrupted `up` leaves nothing running.
    trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed; tearing down"; cmd_down >/dev/null 2>&1 || true; fi' EXIT
    trap 'exit 130' INT TERM
    local ns="tenure-nfs-$$"
    echo "$ns" >"$DIR/ns"
    ip netns add "$ns"
    # Where to find this harness's files from its namespace's name (down --all).
    mkdir -p /run/tenure-nfs
    echo "$DIR" >"/run/tenure-nfs/$ns"
    # The watchdog: when the owner (a test process) dies, even by SIGKILL, tear down.
    # It runs a copy of this script: bash reads a script as it runs, so an edit of
    # scripts/nfs.sh while a test runs must not change what the watchdog does.
    if [ -n "$owner" ]; then
        cp "$REPO/scripts/nfs.sh" "$DIR/nfs.sh"
        setsid bash "$DIR/nfs.sh" watch --dir "$DIR" "$owner" </dev/null >>"$DIR/watchdog.log" 2>&1 &
        echo $! >"$DIR/pid/watchdog"
    fi
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link add br0 type bridge
    ip netns exec "$ns" ip addr add "$SERVER/24" dev br0
    ip netns exec "$ns" ip link set br0 up

    local kver
    for kver in "$UML_MODULES"/*; do ln -sfn "$kver" "$DIR/modroot/lib/modules/${kver##*/}"; done

    # rpcbind: -f foreground, -w warm start files under its own /run; in the namespace.
    ip netns exec "$ns" setsid rpcbind -f -w </dev/null >"$DIR/rpcbind.log" 2>&1 &
    echo $! >"$DIR/pid/rpcbind"
    sleep 0.3
    alive "$(pid_of rpcbind)" || die "rpcbind exited at start; see $DIR/rpcbind.log"

    local protocols=4
    [ "$vers" = 3 ] && protocols="3, 4"
    echo "$vers" >"$DIR/vers"
    write_ganesha_conf "$protocols"
    start_ganesha

    write_guest_init
    start_guest a "$opts_a" "$vers" "$mem"
    start_guest b "$opts_b" "$vers" "$mem"
    wait_guest a
    wait_guest b
    # Both clocks at once: each guest runs its own jobs (about 3 s each, more
    # on a loaded machine, paid again by every NFS test).
    local sync_a sync_b
    sync_clock a & sync_a=$!
    sync_clock b & sync_b=$!
    wait "$sync_a" || die "guest a: setting its clock failed"
    wait "$sync_b" || die "guest b: setting its clock failed"
    trap - EXIT INT TERM
    log "up: ganesha $SERVER:/export (NFS $vers) -> $DIR/export; guests a ($(cat "$DIR/guest-a/mount")) and b ($(cat "$DIR/guest-b/mount"))"
}

# -------------------------------------------------------------- down ------

# stop_pid NAME: TERM, then KILL after a few seconds; the whole group (setsid).
stop_pid() {
    local name="$1" pid i
    pid=$(pid_of "$name")
    if alive "$pid"; then
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; }
        for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
    fi
    rm -f "$DIR/pid/$name"
}

cmd_down() {
    [ -d "$DIR" ] || return 0
    local g pid i ns
    # The watchdog, unless we are it.
    pid=$(pid_of watchdog)
    if [ -n "$pid" ] && [ "$pid" != "${WATCHDOG_SELF:-}" ] && alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$DIR/pid/watchdog"
    # Guests first (they hold mounts of the server): ask them to power off, then kill.
    for g in a b; do
        pid=$(pid_of "uml-$g")
        alive "$pid" && touch "$DIR/guest-$g/halt"
    done
    for g in a b; do
        pid=$(pid_of "uml-$g")
        for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
        # UML's helper processes share its process group (setsid at start).
        if alive "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; fi
        for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
        rm -f "$DIR/pid/uml-$g"
    done
    stop_pid ganesha
    stop_pid rpcbind
    ns=$(ns_name)
    if [ -n "$ns" ] && ip netns list | awk '{print $1}' | grep -qx "$ns"; then
        # Anything else still in the namespace (nothing should be) is killed by PID.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        for i in $(seq 1 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
        ip netns del "$ns"
    fi
    [ -n "$ns" ] && rm -f "/run/tenure-nfs/$ns"
    rm -f "$DIR/ns" "$DIR/guest-a/halt" "$DIR/guest-b/halt" "$DIR/guest-a/ready" "$DIR/guest-b/ready"
    rm -rf "$DIR/uml"
    log "down: nothing of $DIR runs"
}

# down --all: every harness of this machine (from /run/tenure-nfs), and any
# namespace named tenure-nfs-* left without one.
cmd_down_all() {
    local f ns
    for f in /run/tenure-nfs/tenure-nfs-*; do
        [ -e "$f" ] || continue
        DIR=$(cat "$f") cmd_down || true
        rm -f "$f"
    done
    for ns in $(ip netns list | awk '/^tenure-nfs-/ {print $1}'); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        sleep 0.5
        ip netns del "$ns" || true
    done
}

# watch OWNER: tear down when OWNER exits.
cmd_watch() {
    local owner="$1"
    while alive "$owner" && [ -e "$DIR/ns" ]; do sleep 1; done
    [ -e "$DIR/ns" ] || return 0
    log "watchdog: owner $owner is gone; tearing down"
    WATCHDOG_SELF=$$ cmd_down
}

# ------------------------------------------------------------ status ------

cmd_status() {
    local ok=0 name pid ns
    ns=$(ns_name)
    if [ -n "$ns" ] && ip netns list | awk '{print $1}' | grep -qx "$ns"; then
        echo "namespace $ns: present"
    else
        echo "namespace: none"; ok=1
    fi
    for name in rpcbind ganesha uml-a uml-b; do
        pid=$(pid_of "$name")
        if alive "$pid"; then
            local st
            st=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat")
            echo "$name: pid $pid ($([ "$st" = T ] && echo stopped || echo running))"
        else
            echo "$name: not running"; ok=1
        fi
    done
    return $ok
}

# --------------------------------------------------------------- run ------

cmd_run() {
    local limit=600
    while [ $# -gt 0 ]; do
        case "$1" in
            --timeout) limit="$2"; shift 2 ;;
            --) shift; break ;;
            -*) die "run: unknown option $1" ;;
            *) break ;;
        esac
    done
    [ $# -ge 1 ] || die "run: which guest (a or b)?"
    local g="$1"; shift
    guest_addr "$g" >/dev/null
    [ "${1:-}" = "--" ] && shift
    [ $# -ge 1 ] || die "run: no command"
    alive "$(pid_of "uml-$g")" || die "guest $g is not running (scripts/nfs.sh up)"
    local jobs="$DIR/guest-$g/jobs" id
    id="$(date +%s%N)-$$-$RANDOM"
    echo "$limit" >"$jobs/$id.limit"
    {
        printf 'export NFS_MNT=%q NFS_LOCAL=%q NFS_EXPORT=%q GUEST=%q TENURE=%q NFS_SRC=%q NFS_OPTS=%q\n' \
            "$DIR/mnt" "$DIR/local" "$DIR/export" "$g" "$TENURE_BIN" \
            "$(cat "$DIR/guest-$g/mount-src")" "$(cat "$DIR/guest-$g/mount-opts")"
        printf '%q ' "$@"
        echo
    } >"$jobs/$id.tmp"
    mv "$jobs/$id.tmp" "$jobs/$id.job"
    # The guest kills the job after `limit`; wait a little longer for its status.
    local deadline=$((SECONDS + limit + 30))
    while [ ! -e "$jobs/$id.rc" ]; do
        if [ $SECONDS -ge $deadline ] || ! alive "$(pid_of "uml-$g")"; then
            cat "$jobs/$id.out" 2>/dev/null || true
            cat "$jobs/$id.err" >&2 2>/dev/null || true
            die "run: no status from guest $g for job $id ($*)"
        fi
        sleep 0.05
    done
    cat "$jobs/$id.out"
    cat "$jobs/$id.err" >&2
    local rc
    rc=$(cat "$jobs/$id.rc")
    rm -f "$jobs/$id".*
    return "$rc"
}

# ------------------------------------------------------ server, link ------

cmd_server() {
    local pid
    pid=$(pid_of ganesha)
    case "${1:-}" in
        stop) alive "$pid" || die "ganesha is not running"; kill -STOP "$pid" ;;
        cont) alive "$pid" || die "ganesha is not running"; kill -CONT "$pid" ;;
        restart) stop_pid ganesha; start_ganesha ;;
        *) die "server: stop, cont or restart" ;;
    esac
}

cmd_link() {
    local g="${1:-}" how="${2:-}"
    guest_addr "$g" >/dev/null
    case "$how" in up | down) ;; *) die "link: $g up|down" ;; esac
    ip netns exec "$(ns_name)" ip link set "tap-$g" "$how"
}

cmd_env() {
    printf 'export TENURE_NFS_DIR=%q NFS_MNT=%q NFS_LOCAL=%q NFS_EXPORT=%q\n' "$DIR" "$DIR/mnt" "$DIR/local" "$DIR/export"
}

# -------------------------------------------------------------- main ------

[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 64; }
cmd="$1"; shift
if [ "${1:-}" = "--dir" ]; then DIR="$2"; shift 2; fi
mkdir -p "$DIR" 2>/dev/null || true
[ -d "$DIR" ] && DIR="$(cd "$DIR" && pwd)"
case "$cmd" in
    check) cmd_check ;;
    up) cmd_up "$@" ;;
    down) if [ "${1:-}" = --all ]; then cmd_down_all; else cmd_down; fi ;;
    watch) cmd_watch "$@" ;;
    status) cmd_status ;;
    run) cmd_run "$@" ;;
    server) cmd_server "$@" ;;
    link) cmd_link "$@" ;;
    env) cmd_env ;;
    *) die "unknown command $cmd (check, up, down, status, run, server, link, env)" ;;
esac
