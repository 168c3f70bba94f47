//! The NFS tests' side of `scripts/nfs.sh`: a real NFS server (nfs-ganesha in a
//! network namespace) and two client kernels (user-mode-linux guests `a` and `b`,
//! each with its own NFS client and caches), brought up per test and torn down
//! when the [`Cluster`] is dropped, even after a failed assertion. If the test
//! process itself is killed, the script's watchdog tears the cluster down.
//!
//! Guests run commands from a shared directory (hostfs: the guests' root is the
//! host's `/`), so they run the `tenure` binary built for this test, and what they
//! log lands in host files that the tests read and check here.
//!
//! Where the machine cannot run it (not root, no /dev/net/tun, no network
//! namespaces, packages missing) [`Cluster::up`] prints why and returns `None`;
//! with `TENURE_REQUIRE_SERVERS=1` (CI) it fails the test instead — unless the
//! host's kernel cannot run a user-mode-linux guest's programs at all
//! (`nfs.sh check` exits 78), which no install step can fix: then it skips,
//! saying so, in CI too.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const TENURE: &str = env!("CARGO_BIN_EXE_tenure");

/// One cluster at a time per process (`cargo test` runs tests on threads; the
/// nextest group `nfs` keeps processes apart).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nfs.sh")
}

/// A running server and two client guests.
pub struct Cluster {
    dir: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Brings up the server and both guests; `up_args` go to `nfs.sh up` (e.g.
    /// `["--vers", "3"]`, `["--opts-b", "actimeo=60"]`). `None`: skipped (printed).
    pub fn up(up_args: &[&str]) -> Option<Cluster> {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let check = Command::new(script()).arg("check").output().expect("run scripts/nfs.sh check");
        if !check.status.success() {
            let why = String::from_utf8_lossy(&check.stdout).trim().to_string();
            // 78: the host's kernel cannot run the guests at all, which no
            // install step can change; said loudly, and skipped even in CI.
            if check.status.code() == Some(78) {
                eprintln!("SKIPPED, a limit of this host: {why}");
                return None;
            }
            if std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
                panic!("TENURE_REQUIRE_SERVERS=1 but the NFS harness cannot run: {why}");
            }
            eprintln!("skipped: {why}");
            return None;
        }
        // Under the build's target dir: the guests mount over /proc, /sys, /dev and /run.
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let dir = tempfile::Builder::new().prefix("nfs-").tempdir_in(parent).expect("harness dir");
        let started = Instant::now();
        let out = Command::new(script())
            .args(["up", "--dir"])
            .arg(dir.path())
            .args(["--owner", &std::process::id().to_string()])
            .args(up_args)
            .env("TENURE_BIN", TENURE)
            .output()
            .expect("run scripts/nfs.sh up");
        let cluster = Cluster { dir, _turn: turn };
        assert!(
            out.status.success(),
            "scripts/nfs.sh up {up_args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::create_dir_all(cluster.work()).expect("work dir");
        eprintln!(
            "NFS cluster up in {:.1}s: {}",
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Some(cluster)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The NFS mount point, the same path in both guests.
    pub fn mnt(&self) -> PathBuf {
        self.dir().join("mnt")
    }

    /// The exported directory on the server's own disk (a host path).
    pub fn export(&self) -> PathBuf {
        self.dir().join("export")
    }

    /// A directory both guests and the host see directly (not NFS): scripts, logs.
    pub fn work(&self) -> PathBuf {
        self.dir().join("work")
    }

    /// A directory store on the export, as `file://` URL (same in both guests),
    /// made as a user makes one (tenure never creates a store's directory
    /// unless asked), writable by the guests whatever their user maps to.
    pub fn store(&self, name: &str) -> String {
        self.made(name);
        format!("file://{}", self.mnt().join(name).display())
    }

    /// Makes the directory `name` on the export, writable by every guest user.
    pub fn made(&self, name: &str) {
        let path = self.export().join(name);
        std::fs::create_dir_all(&path).expect("mkdir on the export");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }

    fn nfs(&self) -> Command {
        let mut c = Command::new(script());
        c.env("TENURE_NFS_DIR", self.dir()).env("TENURE_BIN", TENURE);
        c
    }

    /// `bash -c script bash args…` in `guest`, started; its stdout and stderr are piped.
    pub fn spawn(&self, guest: &str, limit: Duration, script: &str, args: &[&str]) -> Child {
        self.nfs()
            .args(["run", "--timeout", &limit.as_secs().max(1).to_string(), guest, "--", "bash", "-c", script, "bash"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn scripts/nfs.sh run")
    }

    /// Runs `bash -c script bash args…` in `guest` to its end (killed in the guest
    /// after `limit`).
    pub fn run(&self, guest: &str, limit: Duration, script: &str, args: &[&str]) -> Output {
        self.spawn(guest, limit, script, args).wait_with_output().expect("wait for scripts/nfs.sh run")
    }

    /// Like [`Cluster::run`], and the command must succeed; returns its stdout.
    pub fn ok(&self, guest: &str, script: &str, args: &[&str]) -> String {
        let out = self.run(guest, Duration::from_secs(120), script, args);
        assert!(
            out.status.success(),
            "guest {guest}: {script:?} {args:?} failed ({:?}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `nfs.sh server stop|cont|restart`.
    pub fn server(&self, what: &str) {
        let out = self.nfs().args(["server", what]).output().expect("nfs.sh server");
        assert!(out.status.success(), "nfs.sh server {what}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Cuts `guest` off the network (`false`) or connects it again (`true`).
    pub fn link(&self, guest: &str, up: bool) {
        let out = self.nfs().args(["link", guest, if up { "up" } else { "down" }]).output().expect("nfs.sh link");
        assert!(out.status.success(), "nfs.sh link {guest}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Writes an executable script into the work directory; returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.work().join(name);
        std::fs::write(&path, body).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// Each guest's clock against the host's: guest time minus host time, in
    /// seconds, with its uncertainty, keyed by the guest's host name.
    ///
    /// UML guests read the host's clock (clocksource `timer`, checked here) so they
    /// run at its rate, but each starts with an offset of its own, fixed at boot
    /// (tens of ms, measured). Measured without a round trip: the guest reads its
    /// clock (t0), creates a file on hostfs, reads its clock again (t1); the host's
    /// kernel stamped the file's ctime with the host's clock in between (its coarse
    /// clock, up to one tick — 4 ms — behind). So offset ∈ [t0 − ctime − 4 ms,
    /// t1 − ctime]; five samples are intersected, and measured again (up to
    /// three times) when they do not intersect.
    pub fn clock_offsets(&self) -> Offsets {
        const STAMP: &str = r#"
            cat /sys/devices/system/clocksource/clocksource0/current_clocksource
            for i in 1 2 3 4 5; do
              t0=$EPOCHREALTIME; : > "$1/$GUEST-$i"; t1=$EPOCHREALTIME; echo "$i $t0 $t1"; sleep 0.1
            done"#;
        let mut offsets = Offsets::default();
        for guest in ["a", "b"] {
            // On a loaded VM the host's tick (and so its coarse clock) can come
            // late, and a sample then disagrees with the others: measure again,
            // a few times, before calling the guest's clock broken.
            let mut attempts = Vec::new();
            let found = (0..3).find_map(|attempt| {
                let dir = self.work().join(format!("clock-{attempt}"));
                std::fs::create_dir_all(&dir).expect("clock dir");
                let out = self.ok(guest, STAMP, &[&dir.display().to_string()]);
                let mut lines = out.lines();
                assert_eq!(lines.next(), Some("timer"), "guest {guest}'s clocksource is not UML's host-clock timer");
                let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
                for line in lines {
                    let f: Vec<&str> = line.split(' ').collect();
                    let (t0, t1): (f64, f64) = (f[1].parse().expect("t0"), f[2].parse().expect("t1"));
                    let ctime = std::fs::metadata(dir.join(format!("{guest}-{}", f[0]))).expect("stamp file");
                    let ctime = std::os::unix::fs::MetadataExt::ctime(&ctime) as f64
                        + std::os::unix::fs::MetadataExt::ctime_nsec(&ctime) as f64 / 1e9;
                    lo = lo.max(t0 - ctime - 0.004);
                    hi = hi.min(t1 - ctime);
                }
                attempts.push((lo, hi));
                (lo <= hi).then_some((lo, hi))
            });
            let Some((lo, hi)) = found else {
                panic!(
                    "guest {guest}'s clock does not run at the host's rate: offsets disagree in 3 measurements {attempts:?}"
                )
            };
            offsets.0.insert(format!("nfs-client-{guest}"), ((lo + hi) / 2.0, (hi - lo) / 2.0));
        }
        offsets
    }

    /// Watches, in `guest`, for the process whose PID a hold script writes to
    /// `<log>.pid`, and prints (guest clock) when it is gone: an upper bound of the
    /// hold's end even when the command was SIGKILLed before it could log (stuck
    /// in a hung NFS call when its SIGTERM came). Runs on the shared directory, not
    /// on NFS, so a hung server or a cut network does not stop it.
    pub fn watch_gone(&self, guest: &str, log: &Path) -> Child {
        let script = format!(
            r#"{WAIT_GONE}
               while [ ! -s "$1.pid" ]; do sleep 0.05; done
               read -r p < "$1.pid"; wait_gone "$p""#
        );
        self.spawn(guest, Duration::from_secs(600), &script, &[&log.display().to_string()])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Keep the logs of a failed test (or of any, with TENURE_NFS_KEEP=1).
        if std::thread::panicking() || std::env::var_os("TENURE_NFS_KEEP").is_some() {
            eprintln!("keeping the NFS harness's files in {}", self.dir().display());
            self.dir.disable_cleanup(true);
        }
        let out = self.nfs().arg("down").output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!("scripts/nfs.sh down failed: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => eprintln!("scripts/nfs.sh down could not run: {e}"),
        }
    }
}

/// A bash function: `wait_gone PID` returns when PID has exited (gone or a
/// zombie) and prints the time it saw that. No process is forked in its loop (a
/// fork costs tens of ms in a loaded UML guest): it reads /proc with `read`, sleeps
/// 5 ms with `read -t` on a pipe nobody writes, and reads `$EPOCHREALTIME`.
/// The pipe is a FIFO under the guest's own /run, opened read-write (so the
/// open does not block) and unlinked at once: a guest has no /dev/fd, so
/// `<(:)` cannot give one, and a `read -t` on a bad descriptor returns at once.
pub const WAIT_GONE: &str = r#"
wait_gone() {
  local line st fifo="/run/wait_gone.$BASHPID.$RANDOM"
  mkfifo -m 600 "$fifo" && exec 9<> "$fifo" && rm -f "$fifo" \
    || { echo "wait_gone: no pipe to sleep on at $fifo" >&2; return 1; }
  while { read -r line < "/proc/$1/stat"; } 2>/dev/null; do
    st=${line##*) }; st=${st%% *}
    [ "$st" = Z ] && break
    read -t 0.005 -u 9 _
  done
  echo "$EPOCHREALTIME"
}
"#;

/// Host wall-clock time, seconds since the epoch.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The lines of a file (empty if it does not exist).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(str::to_string).collect()).unwrap_or_default()
}

/// Polls `f` until it is true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Guest clock minus host clock (seconds) and its uncertainty, per guest host name.
#[derive(Clone, Debug, Default)]
pub struct Offsets(pub std::collections::BTreeMap<String, (f64, f64)>);

impl Offsets {
    /// `t` read on `client`'s clock, as host time.
    pub fn host_time(&self, client: &str, t: f64) -> f64 {
        t - self.0.get(client).map_or(0.0, |o| o.0)
    }

    /// The uncertainty of [`Offsets::host_time`] for `client`.
    pub fn error(&self, client: &str) -> f64 {
        self.0.get(client).map_or(0.0, |o| o.1)
    }

    /// The largest offset between two clients, and the largest uncertainty, in ms.
    pub fn summary(&self) -> String {
        let parts: Vec<String> =
            self.0.iter().map(|(c, (o, e))| format!("{c} {:+.1} ± {:.1} ms", o * 1000.0, e * 1000.0)).collect();
        parts.join(", ")
    }
}

/// One hold of a lease, from the command's own log: it started at `start` (the
/// lease was granted before) and ended at `end` (it exited, or took SIGTERM).
#[derive(Clone, Debug)]
pub struct Hold {
    pub token: u64,
    pub client: String,
    pub start: f64,
    pub end: Option<f64>,
    pub how: String,
}

/// The hold script: logs `start`, then `end` (or `term`) with times and token to
/// `$1`, and sleeps `$2` seconds in between (a SIGTERM ends it at once, logged).
/// Times come from bash's `$EPOCHREALTIME`, not from a `date` process that the
/// signal stopping the group could kill half-way.
pub const HOLD: &str = r#"#!/bin/bash
log=$1
echo $$ > "$log.pid"
echo "start $EPOCHREALTIME $TENURE_TOKEN $(hostname) $TENURE_DEADLINE" >> "$log"
trap 'echo "term $EPOCHREALTIME $TENURE_TOKEN" >> "$log"; exit 143' TERM
sleep "${2:-0.05}" & wait
echo "end $EPOCHREALTIME $TENURE_TOKEN" >> "$log"
"#;

/// Reads hold logs (lines `start T token client …`, `end T token`, `term T token`),
/// times converted to the host's clock.
pub fn holds(logs: &[PathBuf], clocks: &Offsets) -> Vec<Hold> {
    let mut by_token: std::collections::BTreeMap<u64, Hold> = Default::default();
    for log in logs {
        for line in lines(log) {
            let f: Vec<&str> = line.split(' ').collect();
            let (t, token): (f64, u64) = (f[1].parse().expect("time"), f[2].parse().expect("token"));
            match f[0] {
                "start" => {
                    let client = f[3].to_string();
                    let start = clocks.host_time(&client, t);
                    let h = Hold { token, client, start, end: None, how: String::new() };
                    assert!(by_token.insert(token, h).is_none(), "token {token} was granted twice");
                }
                "end" | "term" => {
                    let h = by_token.get_mut(&token).expect("an end without a start");
                    h.end = Some(clocks.host_time(&h.client, t));
                    h.how = f[0].to_string();
                }
                other => panic!("bad hold log line {other:?} in {}", log.display()),
            }
        }
    }
    by_token.into_values().collect()
}

/// The interval check (as Jepsen's lock workloads do, on one clock): sorted by
/// token, every hold has ended before the next one starts — by more than the
/// uncertainty of the two clients' clock offsets — so tokens also increase with
/// time. Returns the smallest gap between one hold's end and the next start.
pub fn assert_no_overlap(holds: &[Hold], clocks: &Offsets) -> f64 {
    let mut min_gap = f64::INFINITY;
    for pair in holds.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let end = a.end.unwrap_or_else(|| panic!("hold of token {} ({}) has no logged end", a.token, a.client));
        let gap = b.start - end;
        assert!(
            gap > clocks.error(&a.client) + clocks.error(&b.client),
            "holds overlap: token {} on {} ran until {end:.6}, token {} on {} started at {:.6}",
            a.token,
            a.client,
            b.token,
            b.client,
            b.start
        );
        min_gap = min_gap.min(gap);
    }
    min_gap
}

/// The time a [`Cluster::watch_gone`] job printed, on the host's clock.
pub fn gone_at(job: Child, client: &str, clocks: &Offsets) -> f64 {
    let out = job.wait_with_output().expect("watch_gone");
    assert!(out.status.success(), "watch_gone: {}", String::from_utf8_lossy(&out.stderr));
    let t: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("gone time");
    clocks.host_time(client, t)
}
