#!/usr/bin/env bash
# servers.sh — start/stop the real servers tenure's integration tests run against.
#
# Usage:
#   scripts/servers.sh start  [NAMES...]   start (or leave alone if healthy), all at once,
#                                          wait until healthy
#   scripts/servers.sh stop   [NAMES...]   stop by pid file (whole process group)
#   scripts/servers.sh status [NAMES...]   show state; exit 0 only if all are healthy
#   scripts/servers.sh env    [NAMES...]   print `export VAR=value` for running servers:
#                                            eval "$(scripts/servers.sh env)"
#   scripts/servers.sh etcd-member start|stop|status e1|e2|e3
#                                          one member of the 3-member etcd cluster
#                                          (restart after a failover test killed it;
#                                          its data dir is kept, so it rejoins)
#
# NAMES default to all of them. Everything binds to 127.0.0.1 only:
#   name          port(s)                         variable printed by `env`
#   moto          5000                            TENURE_TEST_S3_MOTO=http://127.0.0.1:5000
#   moto-py       5001                            TENURE_TEST_S3_MOTO_PY=http://127.0.0.1:5001
#                 (a second moto, for the Python checks that run beside the Rust tests:
#                 moto is serial, and the Rust tests keep one busy)
#   rgw           7480 (mon 3300, osd 68xx)       TENURE_TEST_S3_RGW=http://127.0.0.1:7480
#   azurite       10000                           TENURE_TEST_AZURITE=http://127.0.0.1:10000
#   s3rver        4568                            TENURE_TEST_S3RVER=http://127.0.0.1:4568
#   localbucket   9100                            TENURE_TEST_LOCALBUCKET=http://127.0.0.1:9100
#   etcd          2379 (peer 2380, metrics 2381)  TENURE_TEST_ETCD=http://127.0.0.1:2379
#   etcd-cluster  23791-3 (peers 23801-3)         TENURE_TEST_ETCD_CLUSTER=http://127.0.0.1:23791,...
#                                                 TENURE_TEST_ETCD_CLUSTER_DIR=$STATE/etcd-cluster
#   redis         6379                            TENURE_TEST_REDIS=redis://127.0.0.1:6379
#
# Every S3 server has a bucket `tenure`, Azurite a container `tenure`:
#   moto         any key/secret (tests use test/test, region us-east-1); honours all conditions,
#                atomically only because servers/moto-serial.py serialises its requests
#   rgw          key test / secret test (Ceph RGW 16, memstore); only unquoted ETags in If-Match
#   s3rver       key S3RVER / secret S3RVER; NEGATIVE fixture: ignores every condition
#   localbucket  credentials not checked; NEGATIVE fixture: honours If-None-Match, ignores If-Match
#   azurite      account devstoreaccount1 with the well-known development key
#
# etcd cluster failover: $TENURE_TEST_ETCD_CLUSTER_DIR holds e1.pid e2.pid e3.pid
# (one pid per file; `kill $(cat e2.pid)` stops that member), eN.log, the data
# dirs, and an executable `member` script:
#   "$TENURE_TEST_ETCD_CLUSTER_DIR/member" start e2   # restart it (waits until healthy)
#   "$TENURE_TEST_ETCD_CLUSTER_DIR/member" stop e2    # same as: scripts/servers.sh etcd-member stop e2
#
# Not a server: the hung-storage test (crates/tenure-cli/tests/it/hung_storage.rs)
# mounts a bindfs (FUSE) directory of its own and freezes its daemon; it needs
# only bindfs and /dev/fuse (scripts/install-deps.sh), and skips without them
# (fails under TENURE_REQUIRE_SERVERS=1).
#
# `start` on a server that is not running starts it from a clean data dir.
# TENURE_REQUIRE_SERVERS is not printed by `env`: CI sets it itself.
#
# Environment:
#   TENURE_SERVERS_DIR      state: pid files, logs, data (default: <repo>/.servers)
#   TENURE_TOOLS_DIR        where scripts/install-deps.sh put venv and npm (default: <repo>/.tools)
#   TENURE_SERVERS_TIMEOUT  seconds to wait for health (default 60; RGW gets 2x)
#
# Install the servers first with scripts/install-deps.sh. Logs: $STATE/<name>/*.log.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$REPO/scripts"
TOOLS="${TENURE_TOOLS_DIR:-$REPO/.tools}"
STATE="${TENURE_SERVERS_DIR:-$REPO/.servers}"
TIMEOUT="${TENURE_SERVERS_TIMEOUT:-60}"
ALL=(moto moto-py rgw azurite s3rver localbucket etcd etcd-cluster redis)
BUCKET=tenure
H=127.0.0.1

mkdir -p "$STATE"
STATE="$(cd "$STATE" && pwd)"
if [ -d "$TOOLS" ]; then TOOLS="$(cd "$TOOLS" && pwd)"; fi

# etcd and etcdctl read ETCD_* / ETCDCTL_* variables from the environment and
# complain when they clash with flags; the command lines below say everything.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^ETCD(CTL)?_' || true)
export ETCDCTL_API=3

die() { echo "servers.sh: ERROR: $*" >&2; exit 1; }
log() { echo "servers.sh: $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ------------------------------------------------------------ processes ----

# alive PID: the process exists and is not a zombie.
alive() {
    local pid="$1" st
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    st=$(sed -E 's/^.*\) ([A-Za-z]).*$/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$st" != Z ] && [ "$st" != X ]
}

# ours PIDFILE PATTERN: the pid file names a live process whose command line
# contains PATTERN (guards against a recycled pid).
ours() {
    local pidfile="$1" pattern="$2" pid
    [ -s "$pidfile" ] || return 1
    pid=$(cat "$pidfile")
    alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern"
}

# group_alive PGID: some non-zombie process is still in that process group.
group_alive() {
    ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

# launch PIDFILE LOGFILE DIR CMD...: run CMD in the background in its own
# session (so stop can kill the whole group), cwd DIR, output to LOGFILE.
launch() {
    local pidfile="$1" logfile="$2" dir="$3"
    shift 3
    rm -f "$pidfile"
    mkdir -p "$dir"
    {
        echo "=== $(date -u '+%Y-%m-%dT%H:%M:%SZ') servers.sh starts: $*"
    } >>"$logfile"
    # shellcheck disable=SC2016 # $$ and $0 belong to the inner bash
    (
        cd "$dir"
        exec setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
            </dev/null >>"$logfile" 2>&1
    ) &
    local _
    for _ in $(seq 50); do
        [ -s "$pidfile" ] && return 0
        sleep 0.1
    done
    die "could not launch $1 (no pid file $pidfile); see $logfile"
}

# kill_pidfile PIDFILE PATTERN: TERM the process group, KILL it after 10 s.
kill_pidfile() {
    local pidfile="$1" pattern="$2" pid
    if ! ours "$pidfile" "$pattern"; then
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        group_alive "$pid" || alive "$pid" || break
        sleep 0.1
    done
    if group_alive "$pid" || alive "$pid"; then
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            group_alive "$pid" || alive "$pid" || break
            sleep 0.1
        done
    fi
    if group_alive "$pid" || alive "$pid"; then
        echo "servers.sh: WARNING: process group $pid ($pattern) survived SIGKILL" >&2
        return 1
    fi
    rm -f "$pidfile"
}

# port_busy PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/$H/$1") 2>/dev/null; }

# require_free NAME PORTS...: fail if a port is taken by a process we did not start.
require_free() {
    local name="$1" p
    shift
    for p in "$@"; do
        if port_busy "$p"; then
            die "$name: port $p on $H is already in use by a process servers.sh did not start; stop it first"
        fi
    done
}

# wait_healthy NAME LOG TIMEOUT CHECK... : poll CHECK until it succeeds; fail early
# when one of the pids in $WATCH (space separated pid files) dies.
WATCH=""
wait_healthy() {
    local name="$1" logf="$2" limit="$3" t0 pf
    shift 3
    t0=$(date +%s)
    while :; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        for pf in $WATCH; do
            if ! alive "$(cat "$pf" 2>/dev/null)"; then
                tail -n 25 "$logf" >&2 || true
                die "$name exited while starting; see $logf"
            fi
        done
        if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then
            tail -n 25 "$logf" >&2 || true
            die "$name did not become healthy within ${limit}s; see $logf"
        fi
        sleep 0.2
    done
}

# http_up URL: the server answers HTTP at all (any status).
http_up() {
    local code
    code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" || true)
    [ -n "$code" ] && [ "$code" != 000 ]
}

# s3 KEY:SECRET CURL-ARGS...: SigV4-signed request; prints the HTTP status.
s3() {
    local creds="$1"
    shift
    curl -s -o /dev/null -m 10 -w '%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 \
        --user "$creds" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@" || true
}

# ensure_bucket NAME URL KEY:SECRET: create bucket `tenure` unless it exists.
ensure_bucket() {
    local name="$1" url="$2" creds="$3" code
    code=$(s3 "$creds" -I "$url/$BUCKET")
    [ "$code" = 200 ] && return 0
    code=$(s3 "$creds" -X PUT "$url/$BUCKET")
    case "$code" in
        200 | 409) ;;
        *) die "$name: creating bucket $BUCKET at $url failed (HTTP $code)" ;;
    esac
    code=$(s3 "$creds" -I "$url/$BUCKET")
    [ "$code" = 200 ] || die "$name: bucket $BUCKET not visible after creation (HTTP $code)"
}

need_tool() { [ -x "$1" ] || die "$2 is not installed ($1 missing); run scripts/install-deps.sh"; }
need_cmd() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; run scripts/install-deps.sh"; }

# fresh_dir NAME: an empty state dir for a server; the previous one (logs,
# data) is kept as $STATE/<name>.prev until the next fresh start.
fresh_dir() {
    local d="$STATE/$1"
    if [ -d "$d" ]; then
        rm -rf "$d.prev"
        mv "$d" "$d.prev"
    fi
    mkdir -p "$d"
}

# ------------------------------------------------------- simple servers ----
# One process each. Table: name -> pattern, port(s), command, health, setup.

pidf() { echo "$STATE/$1/$1.pid"; }
logf() { echo "$STATE/$1/$1.log"; }

pattern_of() {
    case "$1" in
        moto | moto-py) echo moto-serial ;;
        azurite) echo azurite-blob ;;
        s3rver) echo s3rver ;;
        localbucket) echo localbucket ;;
        etcd) echo "$STATE/etcd/data" ;;
        redis) echo redis-server ;;
    esac
}

ports_of() {
    case "$1" in
        moto) echo 5000 ;;
        moto-py) echo 5001 ;;
        rgw) echo 7480 3300 ;;
        azurite) echo 10000 ;;
        s3rver) echo 4568 ;;
        localbucket) echo 9100 ;;
        etcd) echo 2379 2380 2381 ;;
        etcd-cluster) echo 23791 23792 23793 23801 23802 23803 ;;
        redis) echo 6379 ;;
    esac
}

url_of() {
    case "$1" in
        moto | moto-py) echo "http://$H:$(ports_of "$1")" ;;
        rgw) echo "http://$H:7480" ;;
        azurite) echo "http://$H:10000" ;;
        s3rver) echo "http://$H:4568" ;;
        localbucket) echo "http://$H:9100" ;;
        etcd) echo "http://$H:2379" ;;
        etcd-cluster) echo "http://$H:23791,http://$H:23792,http://$H:23793" ;;
        redis) echo "redis://$H:6379" ;;
    esac
}

var_of() {
    case "$1" in
        moto) echo TENURE_TEST_S3_MOTO ;;
        moto-py) echo TENURE_TEST_S3_MOTO_PY ;;
        rgw) echo TENURE_TEST_S3_RGW ;;
        azurite) echo TENURE_TEST_AZURITE ;;
        s3rver) echo TENURE_TEST_S3RVER ;;
        localbucket) echo TENURE_TEST_LOCALBUCKET ;;
        etcd) echo TENURE_TEST_ETCD ;;
        etcd-cluster) echo TENURE_TEST_ETCD_CLUSTER ;;
        redis) echo TENURE_TEST_REDIS ;;
    esac
}

# cmd_of NAME: set CMD to the command line (printed into the log by launch).
# Data lives under $STATE/<name>/.
CMD=()
cmd_of() {
    local d="$STATE/$1"
    case "$1" in
        moto | moto-py)
            # One request at a time: moto's conditional PUT is check-then-write
            # (see servers/moto-serial.py).
            need_tool "$TOOLS/venv/bin/moto_server" moto
            CMD=("$TOOLS/venv/bin/python" "$HERE/servers/moto-serial.py" "$H" "$(ports_of "$1")")
            ;;
        azurite)
            need_tool "$TOOLS/npm/node_modules/.bin/azurite-blob" azurite
            CMD=("$TOOLS/npm/node_modules/.bin/azurite-blob" --blobHost "$H" --blobPort 10000
                --inMemoryPersistence --silent --disableTelemetry)
            ;;
        s3rver)
            need_tool "$TOOLS/npm/node_modules/.bin/s3rver" s3rver
            CMD=("$TOOLS/npm/node_modules/.bin/s3rver" -a "$H" -p 4568 -d "$d/data"
                --configure-bucket "$BUCKET" --no-vhost-buckets)
            ;;
        localbucket)
            need_tool "$TOOLS/venv/bin/localbucket" localbucket
            CMD=("$TOOLS/venv/bin/localbucket" --host "$H" --port 9100 "$d/data")
            ;;
        etcd)
            need_cmd etcd
            CMD=(etcd --name single --data-dir "$d/data"
                --listen-client-urls "http://$H:2379" --advertise-client-urls "http://$H:2379"
                --listen-peer-urls "http://$H:2380" --initial-advertise-peer-urls "http://$H:2380"
                --initial-cluster "single=http://$H:2380" --initial-cluster-token tenure-single
                --initial-cluster-state new --listen-metrics-urls "http://$H:2381")
            ;;
        redis)
            need_cmd redis-server
            CMD=(redis-server --bind "$H" --port 6379 --protected-mode yes --daemonize no
                --appendonly no --save '' --dir "$d")
            ;;
    esac
}

healthy_of() {
    case "$1" in
        moto | moto-py) [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$(url_of "$1")/")" = 200 ] ;;
        azurite) http_up "http://$H:10000/devstoreaccount1?comp=list" ;;
        s3rver) http_up "http://$H:4568/" ;;
        localbucket) [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$H:9100/")" = 200 ] ;;
        etcd) etcdctl --endpoints="http://$H:2379" --command-timeout=2s endpoint health ;;
        redis) [ "$(redis-cli -h "$H" -p 6379 ping 2>/dev/null)" = PONG ] ;;
    esac
}

setup_of() {
    case "$1" in
        moto | moto-py) ensure_bucket "$1" "$(url_of "$1")" test:test ;;
        s3rver) ensure_bucket s3rver "http://$H:4568" S3RVER:S3RVER ;;
        localbucket) ensure_bucket localbucket "http://$H:9100" test:test ;;
        azurite)
            local py=python3
            [ -x "$TOOLS/venv/bin/python" ] && py="$TOOLS/venv/bin/python"
            "$py" "$HERE/servers/azurite-container.py" "http://$H:10000" "$BUCKET" >/dev/null \
                || die "azurite: creating container $BUCKET failed; see $(logf azurite)"
            ;;
        *) ;;
    esac
}

running_simple() { ours "$(pidf "$1")" "$(pattern_of "$1")"; }

start_simple() {
    local name="$1" t0
    t0=$(now)
    if running_simple "$name"; then
        WATCH="$(pidf "$name")"
        wait_healthy "$name" "$(logf "$name")" "$TIMEOUT" healthy_of "$name"
        setup_of "$name"
        log "$name: already running (pid $(cat "$(pidf "$name")")), healthy, $(url_of "$name")"
        return 0
    fi
    # shellcheck disable=SC2046
    require_free "$name" $(ports_of "$name")
    cmd_of "$name"
    fresh_dir "$name"
    case "$name" in
        localbucket) mkdir -p "$STATE/$name/data/$BUCKET" ;; # a bucket is a directory
        s3rver) mkdir -p "$STATE/$name/data" ;;
    esac
    launch "$(pidf "$name")" "$(logf "$name")" "$STATE/$name" "${CMD[@]}"
    WATCH="$(pidf "$name")"
    wait_healthy "$name" "$(logf "$name")" "$TIMEOUT" healthy_of "$name"
    setup_of "$name"
    log "$name: started in $(since "$t0")s (pid $(cat "$(pidf "$name")")), $(url_of "$name")"
}

stop_simple() {
    local name="$1"
    if running_simple "$name"; then
        kill_pidfile "$(pidf "$name")" "$(pattern_of "$name")"
        log "$name: stopped"
    else
        rm -f "$(pidf "$name")"
        log "$name: not running"
    fi
}

status_simple() {
    local name="$1"
    if running_simple "$name"; then
        if healthy_of "$name" >/dev/null 2>&1; then
            log "$name: running (pid $(cat "$(pidf "$name")")), healthy, $(url_of "$name")"
        else
            log "$name: running (pid $(cat "$(pidf "$name")")), NOT healthy; see $(logf "$name")"
            return 1
        fi
    else
        log "$name: stopped"
        return 1
    fi
}

# ------------------------------------------------------------ Ceph RGW -----
# mon + memstore osd + radosgw, auth none, user test/test. Each daemon runs in
# the foreground (-f) under its own pid file: $STATE/rgw/{mon,osd,radosgw}.pid.
RGW="$STATE/rgw"
RGW_DAEMONS=(radosgw osd mon) # stop order
rgw_pattern() {
    case "$1" in
        mon) echo ceph-mon ;;
        osd) echo ceph-osd ;;
        radosgw) echo radosgw ;;
    esac
}
rgw_count() { # number of our daemons alive
    local n=0 d
    for d in "${RGW_DAEMONS[@]}"; do
        if ours "$RGW/$d.pid" "$(rgw_pattern "$d")"; then n=$((n + 1)); fi
    done
    echo "$n"
}
rgw_healthy() { http_up "http://$H:7480/"; }

rgw_write_conf() {
    local fsid="$1"
    cat >"$RGW/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = v2:$H:3300
public addr = $H
# without this the OSD's cluster and heartbeat messengers bind 0.0.0.0
cluster addr = $H
ms bind msgr1 = false
# radosgw defaults to "secure", which cannot work with auth none: it would hang
# for 300 s and exit with "failed to fetch mon config".
ms mon client mode = crc secure
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
# A shared or small disk must not stop the test monitor (its default refuses
# to run below 5 % free).
mon data avail crit = 1
mon data avail warn = 2
mon warn on pool no redundancy = false
mon max pg per osd = 1000
# Every osdmap change (radosgw creates ~8 pools) waits for the paxos batching
# interval, 1 s by default; 0.1 s cuts the bootstrap from ~14.5 s to a few.
paxos propose interval = 0.1
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 1073741824
run dir = $RGW/run
log file = $RGW/log/\$name.log
admin socket = $RGW/run/\$name.asok
mon data = $RGW/mon.\$id
osd data = $RGW/osd\$id
keyring = $RGW/keyring
[client.rgw.ci]
rgw frontends = beast endpoint=$H:7480 tcp_nodelay=1
rgw data = $RGW/rgw
CONF
}

start_rgw() {
    local t0 limit=$((TIMEOUT * 2)) fsid uuid id code
    t0=$(now)
    for c in ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool; do need_cmd "$c"; done
    if [ "$(rgw_count)" = 3 ]; then
        WATCH="$RGW/mon.pid $RGW/osd.pid $RGW/radosgw.pid"
        wait_healthy rgw "$RGW/rgw.log" "$limit" rgw_healthy
        rgw_setup
        log "rgw: already running (pids $(cat "$RGW/mon.pid") $(cat "$RGW/osd.pid") $(cat "$RGW/radosgw.pid")), healthy, http://$H:7480"
        return 0
    fi
    stop_rgw quiet # a partial cluster (memstore: data is gone anyway)
    # shellcheck disable=SC2046
    require_free rgw $(ports_of rgw)
    fresh_dir rgw
    mkdir -p "$RGW"/{run,log,mon.a,rgw}
    local L="$RGW/rgw.log" C=(-c "$RGW/ceph.conf")
    fsid=$(cat /proc/sys/kernel/random/uuid)
    rgw_write_conf "$fsid"
    {
        ceph-authtool --create-keyring "$RGW/keyring" --gen-key -n mon. --cap mon 'allow *'
        ceph-authtool "$RGW/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *'
        monmaptool --create --addv a "[v2:$H:3300]" --fsid "$fsid" "$RGW/monmap"
        ceph-mon "${C[@]}" --mkfs -i a --monmap "$RGW/monmap" --keyring "$RGW/keyring"
    } >>"$L" 2>&1 || die "rgw: monitor bootstrap failed; see $L"
    launch "$RGW/mon.pid" "$L" "$RGW" ceph-mon "${C[@]}" -f -i a
    WATCH="$RGW/mon.pid"
    uuid=$(cat /proc/sys/kernel/random/uuid)
    id=$(timeout "$limit" ceph "${C[@]}" osd new "$uuid" 2>>"$L") \
        || die "rgw: 'ceph osd new' failed (monitor not reachable?); see $L and $RGW/log/mon.a.log"
    mkdir -p "$RGW/osd$id"
    ceph-osd "${C[@]}" -i "$id" --mkfs --osd-uuid "$uuid" >>"$L" 2>&1 \
        || die "rgw: ceph-osd --mkfs failed; see $L"
    launch "$RGW/osd.pid" "$L" "$RGW" ceph-osd "${C[@]}" -f -i "$id"
    launch "$RGW/radosgw.pid" "$L" "$RGW" radosgw "${C[@]}" -f -n client.rgw.ci
    WATCH="$RGW/mon.pid $RGW/osd.pid $RGW/radosgw.pid"
    wait_healthy rgw "$RGW/log/client.rgw.ci.log" "$limit" rgw_healthy
    rgw_setup
    log "rgw: started in $(since "$t0")s (pids $(cat "$RGW/mon.pid") $(cat "$RGW/osd.pid") $(cat "$RGW/radosgw.pid")), http://$H:7480"
}

rgw_setup() {
    local L="$RGW/rgw.log" C=(-c "$RGW/ceph.conf" -n client.rgw.ci)
    if ! timeout 60 radosgw-admin "${C[@]}" user info --uid test >/dev/null 2>&1; then
        timeout 60 radosgw-admin "${C[@]}" user create --uid test --display-name test \
            --access-key test --secret-key test >>"$L" 2>&1 \
            || die "rgw: creating user test failed; see $L"
    fi
    ensure_bucket rgw "http://$H:7480" test:test
}

stop_rgw() {
    local d n
    n=$(rgw_count)
    for d in "${RGW_DAEMONS[@]}"; do
        kill_pidfile "$RGW/$d.pid" "$(rgw_pattern "$d")"
    done
    if [ "${1:-}" != quiet ]; then
        if [ "$n" -gt 0 ]; then log "rgw: stopped (mon, osd, radosgw)"; else log "rgw: not running"; fi
    fi
}

status_rgw() {
    local n
    n=$(rgw_count)
    if [ "$n" = 3 ] && rgw_healthy; then
        log "rgw: running (pids $(cat "$RGW/mon.pid") $(cat "$RGW/osd.pid") $(cat "$RGW/radosgw.pid")), healthy, http://$H:7480"
    elif [ "$n" = 0 ]; then
        log "rgw: stopped"
        return 1
    else
        log "rgw: $n of 3 daemons running, NOT healthy; see $RGW/rgw.log and $RGW/log/"
        return 1
    fi
}

# --------------------------------------------------------- etcd cluster ----
EC="$STATE/etcd-cluster"
MEMBERS=(e1 e2 e3)
member_n() {
    case "$1" in
        e1) echo 1 ;;
        e2) echo 2 ;;
        e3) echo 3 ;;
        *) die "unknown etcd member '$1' (expected e1, e2 or e3)" ;;
    esac
}
member_url() { echo "http://$H:2379$(member_n "$1")"; }
member_running() { ours "$EC/$1.pid" "$EC/$1.data"; }
member_healthy() { etcdctl --endpoints="$(member_url "$1")" --command-timeout=2s endpoint health; }
cluster_healthy() {
    etcdctl --endpoints="$(url_of etcd-cluster)" --command-timeout=2s endpoint health
}
cluster_count() {
    local n=0 m
    for m in "${MEMBERS[@]}"; do
        if member_running "$m"; then n=$((n + 1)); fi
    done
    echo "$n"
}

launch_member() {
    local m="$1" n
    n=$(member_n "$m")
    require_free "etcd member $m" "2379$n" "2380$n"
    need_cmd etcd
    launch "$EC/$m.pid" "$EC/$m.log" "$EC" etcd --name "$m" --data-dir "$EC/$m.data" \
        --listen-client-urls "http://$H:2379$n" --advertise-client-urls "http://$H:2379$n" \
        --listen-peer-urls "http://$H:2380$n" --initial-advertise-peer-urls "http://$H:2380$n" \
        --initial-cluster "e1=http://$H:23801,e2=http://$H:23802,e3=http://$H:23803" \
        --initial-cluster-token tenure-cluster --initial-cluster-state new
}

write_member_script() {
    cat >"$EC/member" <<SCRIPT
#!/usr/bin/env bash
# Start (and wait until healthy) or stop one member of the tenure test etcd cluster.
# Usage: member start|stop|status e1|e2|e3
exec env TENURE_SERVERS_DIR=$(printf %q "$STATE") TENURE_TOOLS_DIR=$(printf %q "$TOOLS") \\
    $(printf %q "$HERE/servers.sh") etcd-member "\$@"
SCRIPT
    chmod +x "$EC/member"
    cat >"$EC/README" <<TEXT
Three-member etcd cluster (e1, e2, e3) for failover tests.
  clients: $(url_of etcd-cluster)
  peers:   http://$H:23801 http://$H:23802 http://$H:23803
  eN.pid   pid of member eN (kill it to simulate a crash)
  eN.log   its log;  eN.data  its data dir (kept across restarts)
  ./member start eN    restart a stopped/killed member, wait until healthy
  ./member stop eN     stop it (TERM, then KILL after 10 s)
TEXT
}

start_cluster() {
    local t0 m
    t0=$(now)
    local n
    n=$(cluster_count)
    if [ "$n" = 0 ]; then
        # shellcheck disable=SC2046
        require_free etcd-cluster $(ports_of etcd-cluster)
        fresh_dir etcd-cluster
        for m in "${MEMBERS[@]}"; do launch_member "$m"; done
    else
        for m in "${MEMBERS[@]}"; do
            if ! member_running "$m"; then
                [ -d "$EC/$m.data" ] || die "etcd-cluster: member $m has no data dir; run: $0 stop etcd-cluster && $0 start etcd-cluster"
                launch_member "$m"
            fi
        done
    fi
    write_member_script
    WATCH="$EC/e1.pid $EC/e2.pid $EC/e3.pid"
    wait_healthy etcd-cluster "$EC/e1.log" "$TIMEOUT" cluster_healthy
    if [ "$n" = 3 ]; then
        log "etcd-cluster: already running (pids $(cat "$EC/e1.pid") $(cat "$EC/e2.pid") $(cat "$EC/e3.pid")), healthy, $(url_of etcd-cluster)"
    else
        log "etcd-cluster: started in $(since "$t0")s (pids $(cat "$EC/e1.pid") $(cat "$EC/e2.pid") $(cat "$EC/e3.pid")), $(url_of etcd-cluster)"
    fi
}

stop_cluster() {
    local m n
    n=$(cluster_count)
    for m in "${MEMBERS[@]}"; do kill_pidfile "$EC/$m.pid" "$EC/$m.data"; done
    if [ "$n" -gt 0 ]; then log "etcd-cluster: stopped"; else log "etcd-cluster: not running"; fi
}

status_cluster() {
    local m rc=0
    for m in "${MEMBERS[@]}"; do
        if member_running "$m"; then
            if member_healthy "$m" >/dev/null 2>&1; then
                log "etcd-cluster: $m running (pid $(cat "$EC/$m.pid")), healthy, $(member_url "$m")"
            else
                log "etcd-cluster: $m running (pid $(cat "$EC/$m.pid")), NOT healthy; see $EC/$m.log"
                rc=1
            fi
        else
            log "etcd-cluster: $m stopped"
            rc=1
        fi
    done
    return "$rc"
}

etcd_member() {
    local action="${1:-}" m="${2:-}" t0
    [ -n "$m" ] || die "usage: $0 etcd-member start|stop|status e1|e2|e3"
    member_n "$m" >/dev/null
    case "$action" in
        start)
            t0=$(now)
            if member_running "$m"; then
                WATCH="$EC/$m.pid"
                wait_healthy "etcd member $m" "$EC/$m.log" "$TIMEOUT" member_healthy "$m"
                log "etcd member $m: already running (pid $(cat "$EC/$m.pid")), healthy"
                return 0
            fi
            [ -d "$EC/$m.data" ] || die "etcd member $m has no data dir; start the cluster with: $0 start etcd-cluster"
            [ "$(cluster_count)" -gt 0 ] || log "etcd member $m: warning: no other member is running; it cannot become healthy without a quorum"
            launch_member "$m"
            WATCH="$EC/$m.pid"
            wait_healthy "etcd member $m" "$EC/$m.log" "$TIMEOUT" member_healthy "$m"
            log "etcd member $m: started in $(since "$t0")s (pid $(cat "$EC/$m.pid")), $(member_url "$m")"
            ;;
        stop)
            if member_running "$m"; then
                kill_pidfile "$EC/$m.pid" "$EC/$m.data"
                log "etcd member $m: stopped"
            else
                rm -f "$EC/$m.pid"
                log "etcd member $m: not running"
            fi
            ;;
        status)
            if member_running "$m"; then
                log "etcd member $m: running (pid $(cat "$EC/$m.pid"))"
            else
                log "etcd member $m: stopped"
                return 1
            fi
            ;;
        *) die "usage: $0 etcd-member start|stop|status e1|e2|e3" ;;
    esac
}

# ---------------------------------------------------------------- main -----

is_running() {
    case "$1" in
        rgw) [ "$(rgw_count)" = 3 ] ;;
        etcd-cluster) [ "$(cluster_count)" -gt 0 ] ;;
        *) running_simple "$1" ;;
    esac
}

do_one() { # action name
    case "$2" in
        rgw) "$1"_rgw ;;
        etcd-cluster) "$1"_cluster ;;
        moto | moto-py | azurite | s3rver | localbucket | etcd | redis) "$1"_simple "$2" ;;
        *) die "unknown server '$2' (known: ${ALL[*]})" ;;
    esac
}

print_env() {
    local name
    for name in "$@"; do
        is_running "$name" || continue
        echo "export $(var_of "$name")=$(url_of "$name")"
        if [ "$name" = etcd-cluster ]; then
            echo "export TENURE_TEST_ETCD_CLUSTER_DIR=$(printf %q "$EC")"
        fi
    done
}

main() {
    local action="${1:-}"
    [ $# -gt 0 ] && shift
    case "$action" in
        etcd-member)
            etcd_member "$@"
            return
            ;;
        start | stop | status | env) ;;
        *)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 2
            ;;
    esac
    local names=("$@")
    [ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
    local n
    for n in "${names[@]}"; do
        case " ${ALL[*]} " in *" $n "*) ;; *) die "unknown server '$n' (known: ${ALL[*]})" ;; esac
    done
    case "$action" in
        env) print_env "${names[@]}" ;;
        start)
            # All at once (each waits for its own health), each one's output
            # kept apart and printed in order once it is done.
            local t0 out i pids=() failed=()
            t0=$(now)
            out="$STATE/.start.$$"
            rm -rf "$out"
            mkdir -p "$out"
            for n in "${names[@]}"; do
                (do_one start "$n") >"$out/$n.out" 2>"$out/$n.err" &
                pids+=("$!")
            done
            for i in "${!names[@]}"; do
                wait "${pids[$i]}" || failed+=("${names[$i]}")
                cat "$out/${names[$i]}.out"
                cat "$out/${names[$i]}.err" >&2
            done
            rm -rf "$out"
            [ ${#failed[@]} -eq 0 ] || die "not started: ${failed[*]} (see above)"
            log "all started in $(since "$t0")s; use: eval \"\$($0 env)\""
            ;;
        stop)
            for n in "${names[@]}"; do do_one stop "$n"; done
            ;;
        status)
            local rc=0
            for n in "${names[@]}"; do do_one status "$n" || rc=3; done
            return "$rc"
            ;;
    esac
}

main "$@"
