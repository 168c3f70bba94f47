//! Helpers for the late-grant and overlap tests: a TCP proxy that delays a
//! store's answers, the stores themselves (directory, `tenure serve`, etcd,
//! moto) reachable directly or through such a proxy, `tenure lock` traced by
//! strace (to delay a syscall, and to see whether the command was ever
//! executed), a command that stamps the interval it held the lease, and the
//! interval checker.
//!
//! Network stores come from `scripts/servers.sh env` (`TENURE_TEST_ETCD`,
//! `TENURE_TEST_S3_MOTO`); a test that needs a missing one, or strace, is
//! skipped with a printed reason, and fails instead when
//! `TENURE_REQUIRE_SERVERS=1`.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

/// Whether missing servers and tools fail the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// Skips (prints why, returns `None`) or, under `TENURE_REQUIRE_SERVERS=1`, fails.
pub fn skip<T>(why: &str) -> Option<T> {
    assert!(!required(), "{why}, and TENURE_REQUIRE_SERVERS=1");
    eprintln!("skipped: {why}");
    None
}

/// The value of `var` (a test server's URL), if set.
pub fn server_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => skip(&format!("{var} is not set (start the servers: eval \"$(scripts/servers.sh env)\")")),
    }
}

// ------------------------------------------------------------------ proxy ---

/// A TCP proxy in front of one server: bytes from the client go through at
/// once; every chunk the server sends is held for the delay in force when it
/// arrived (each chunk from its own arrival, in order: a delay, not a throttle).
/// The delay can be changed while connections are open ([`DelayProxy::set_delay`]),
/// so a test can make the store slow only after its setup; and it can be kept
/// to the answers to one kind of HTTP/1.1 request ([`DelayProxy::only_after`]),
/// so that only writes, say, are slow.
#[derive(Debug)]
pub struct DelayProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    delay_ns: Arc<AtomicU64>,
    rule: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// HTTP/1.1 methods: a client chunk that starts with one starts a request.
const METHODS: [&[u8]; 7] = [b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ", b"PATCH ", b"OPTIONS "];

impl DelayProxy {
    /// A proxy to `upstream` (`host:port`), with no delay yet.
    pub fn start(upstream: &str) -> Self {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let delay_ns = Arc::new(AtomicU64::new(0));
        let rule: Arc<std::sync::Mutex<Option<Vec<u8>>>> = Arc::default();
        let (delay, only, upstream) = (delay_ns.clone(), rule.clone(), upstream.to_string());
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream.clone(), delay.clone(), only.clone()));
            }
        });
        Self { addr, delay_ns, rule, runtime: Some(runtime) }
    }

    /// Delays only the answers to HTTP/1.1 requests that start with `prefix`
    /// (e.g. `PUT `: the conditional writes that make a grant on S3); the
    /// answers to other requests pass at once. (One request at a time on a
    /// connection, as HTTP/1.1 clients without pipelining send them.)
    pub fn only_after(&self, prefix: &str) {
        *self.rule.lock().expect("rule") = Some(prefix.as_bytes().to_vec());
    }

    /// Holds every answer chunk that arrives from now on for `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ns.store(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// One proxied connection: requests straight through, answers delayed.
async fn relay(
    client: tokio::net::TcpStream,
    upstream: String,
    delay_ns: Arc<AtomicU64>,
    rule: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
) {
    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    // Whether the answers now coming are to a request the rule delays.
    let matching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let seen = matching.clone();
    let requests = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from_client.read(&mut buf).await {
            let chunk = &buf[..n];
            if METHODS.iter().any(|m| chunk.starts_with(m)) {
                let rule = rule.lock().expect("rule").clone();
                seen.store(rule.is_none_or(|prefix| chunk.starts_with(&prefix)), Ordering::SeqCst);
            }
            if to_server.write_all(chunk).await.is_err() {
                break;
            }
        }
        let _ = to_server.shutdown().await;
    };
    // Each chunk is stamped with its due time on arrival, so that chunks in
    // flight keep the delay they came with when the delay changes.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let answers_in = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from_server.read(&mut buf).await {
            let delay = if matching.load(Ordering::SeqCst) { delay_ns.load(Ordering::SeqCst) } else { 0 };
            let due = tokio::time::Instant::now() + Duration::from_nanos(delay);
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    let answers_out = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to_client.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(requests, answers_in, answers_out);
}

// ----------------------------------------------------------------- stores ---

/// The kinds of store these tests run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Serve,
    Etcd,
    Moto,
}

/// Where `tenure` finds a store: the URL and `--store-opt` values.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub opts: Vec<String>,
}

impl Target {
    /// `tenure lock <url> <name> <store opts…> <flags…> -- <command…>`, not started.
    pub fn lock(&self, name: &str, flags: &[&str], command: &[&str]) -> Command {
        let mut cmd = tenure();
        cmd.args(["lock", &self.url, name]);
        for opt in &self.opts {
            cmd.arg("--store-opt").arg(opt);
        }
        cmd.args(flags).arg("--").args(command);
        cmd
    }
}

/// A store for one test, with what keeps it alive (a temp dir, a server
/// process, a key prefix deleted afterwards).
pub struct Store {
    pub kind: Kind,
    /// The URL and options with `{ADDR}` where the server's address goes.
    url: String,
    opts: Vec<String>,
    /// The server's `host:port` (none for the directory store).
    pub upstream: Option<String>,
    /// A scratch directory for the test's files (markers, logs).
    pub scratch: tempfile::TempDir,
    _keep: Vec<Box<dyn std::any::Any>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("kind", &self.kind).field("url", &self.url).finish_non_exhaustive()
    }
}

impl Store {
    /// A fresh store of `kind` (`what` names the test, for a key prefix), or
    /// `None` when its server is not configured (see [`skip`]).
    pub fn open(kind: Kind, what: &str) -> Option<Self> {
        let scratch = tempfile::tempdir().expect("scratch dir");
        let unique = format!("{what}-{}-{}", std::process::id(), tenure_core::random_nonce());
        let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
        let (url, opts, upstream) = match kind {
            Kind::Dir => {
                let root = scratch.path().join("leases");
                std::fs::create_dir(&root).expect("the store's directory");
                (root.display().to_string(), Vec::new(), None)
            }
            Kind::Serve => serve_store(&mut keep)?,
            Kind::Etcd => etcd_store(&unique, &mut keep)?,
            Kind::Moto => {
                let endpoint = server_env("TENURE_TEST_S3_MOTO")?;
                let host = endpoint.trim_start_matches("http://").trim_end_matches('/').to_string();
                let opts = [
                    "aws_endpoint=http://{ADDR}",
                    "aws_allow_http=true",
                    "aws_access_key_id=test",
                    "aws_secret_access_key=test",
                    "aws_region=us-east-1",
                ];
                (format!("s3://tenure/{unique}"), opts.map(String::from).to_vec(), Some(host))
            }
        };
        Some(Self { kind, url, opts, upstream, scratch, _keep: keep })
    }

    fn at(&self, addr: &str) -> Target {
        Target {
            url: self.url.replace("{ADDR}", addr),
            opts: self.opts.iter().map(|o| o.replace("{ADDR}", addr)).collect(),
        }
    }

    /// The store as reached directly.
    pub fn direct(&self) -> Target {
        self.at(self.upstream.as_deref().unwrap_or(""))
    }

    /// The store as reached through `proxy`.
    pub fn via(&self, proxy: &DelayProxy) -> Target {
        self.at(&proxy.addr.to_string())
    }

    /// A proxy in front of this store's server.
    pub fn proxy(&self) -> DelayProxy {
        DelayProxy::start(self.upstream.as_deref().expect("a network store"))
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }
}

#[cfg(feature = "server")]
fn serve_store(keep: &mut Vec<Box<dyn std::any::Any>>) -> Option<(String, Vec<String>, Option<String>)> {
    let server = crate::serve_common::serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    let addr = server.addr.clone();
    keep.push(Box::new(server));
    // A fresh server grants nothing for its restart quarantine (max lease + 1 s):
    // wait it out here, so that no test measures it.
    let warm = Target { url: format!("tenure://{addr}"), opts: Vec::new() };
    let out = run(&mut warm.lock("warmup", &["--ttl", "2s", "--timeout", "20s"], &["true"]), LIMIT);
    assert!(out.status.success(), "tenure serve never granted a lease: {}", stderr(&out));
    Some(("tenure://{ADDR}".into(), Vec::new(), Some(addr)))
}

#[cfg(not(feature = "server"))]
fn serve_store(_: &mut Vec<Box<dyn std::any::Any>>) -> Option<(String, Vec<String>, Option<String>)> {
    skip("tenure-cli is built without the `server` feature")
}

#[cfg(feature = "etcd")]
fn etcd_store(unique: &str, keep: &mut Vec<Box<dyn std::any::Any>>) -> Option<(String, Vec<String>, Option<String>)> {
    let endpoint = server_env("TENURE_TEST_ETCD")?;
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/').to_string();
    let prefix = format!("tenure-test/{unique}");
    keep.push(Box::new(EtcdPrefix { endpoint, prefix: prefix.clone() }));
    Some((format!("etcd://{{ADDR}}/{prefix}"), Vec::new(), Some(host)))
}

#[cfg(not(feature = "etcd"))]
fn etcd_store(_: &str, _: &mut Vec<Box<dyn std::any::Any>>) -> Option<(String, Vec<String>, Option<String>)> {
    skip("tenure-cli is built without the `etcd` feature")
}

/// A key prefix on the test etcd, deleted when dropped.
#[cfg(feature = "etcd")]
struct EtcdPrefix {
    endpoint: String,
    prefix: String,
}

#[cfg(feature = "etcd")]
impl Drop for EtcdPrefix {
    fn drop(&mut self) {
        use tenure_etcd::proto::etcdserverpb::DeleteRangeRequest;
        use tenure_etcd::rpc::{Connect, Etcd, prefix_end};
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        let (endpoint, prefix) = (self.endpoint.clone(), format!("{}/", self.prefix));
        rt.block_on(async move {
            let how = Connect { connect_timeout: Duration::from_secs(3), ..Connect::default() };
            if let Ok(c) = Etcd::connect(&[endpoint], &how).await {
                let range_end = prefix_end(prefix.as_bytes());
                let req = DeleteRangeRequest { key: prefix.into_bytes(), range_end, ..DeleteRangeRequest::default() };
                let _ = c.kv().delete_range(req).await;
            }
        });
    }
}

// ----------------------------------------------------------------- strace ---

/// Whether strace can trace a child here.
pub fn strace_works() -> bool {
    Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// [`strace_works`], or skips (see [`skip`]).
pub fn strace_available() -> bool {
    strace_works()
        || skip::<()>("strace is missing or cannot trace here (scripts/install-deps.sh installs it)").is_some()
}

/// A command that appends `$TENURE_TOKEN` to a marker file: an executable
/// script of its own, so that a trace shows whether it was ever executed.
#[derive(Debug)]
pub struct Marker {
    pub script: PathBuf,
    pub file: PathBuf,
}

impl Marker {
    pub fn new(dir: &Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let (script, file) = (dir.join("command.sh"), dir.join("ran"));
        let body = format!("#!/bin/sh\necho \"$TENURE_TOKEN\" >> '{}'\n", file.display());
        std::fs::write(&script, body).expect("write the command");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Self { script, file }
    }

    /// The command line, for `tenure lock … --`.
    pub fn command(&self) -> String {
        self.script.display().to_string()
    }

    /// The tokens the command ran under, one per run.
    pub fn runs(&self) -> Vec<String> {
        lines(&self.file)
    }
}

/// A `tenure lock` run under strace (`-f`, so the guard and the command are
/// traced too): `execve` is always traced, `extra` adds what to trace and inject.
pub fn traced(cmd: &Command, trace_log: &Path, extra: &[&str]) -> Command {
    let mut traced = Command::new("strace");
    traced.args(["-f", "-qq", "--seccomp-bpf", "-s", "4096", "-o"]).arg(trace_log).args(extra);
    traced.arg("--").arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => traced.env(k, v),
            None => traced.env_remove(k),
        };
    }
    traced.stdin(Stdio::null());
    traced
}

/// How many times `program` was executed successfully, by a trace of [`traced`].
pub fn execs(trace_log: &Path, program: &Path) -> usize {
    let needle = format!("execve(\"{}\"", program.display());
    std::fs::read_to_string(trace_log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle) && l.trim_end().ends_with("= 0"))
        .count()
}

/// The exit code, for assertion messages that also show stderr.
pub fn outcome(out: &Output) -> String {
    format!("{:?}; stderr: {}", out.status, stderr(out).trim())
}

// ------------------------------------------------------- hold intervals ---

/// The command the overlap tests run under the lease: `python3 -S -c HOLD LOG
/// RUN HOLD_MS [UNTIL [TOUCH]]`. It appends `RUN PID TOKEN KIND NS` lines to LOG
/// (O_APPEND, one write each): `S` at its start, `H` every 10 ms while it holds
/// (at least HOLD_MS, and until the file UNTIL exists, if given; 30 s at most),
/// then it creates TOUCH (if given) and writes `E`. Stamps are CLOCK_BOOTTIME
/// nanoseconds: one clock for every process on the machine, never stepped.
pub const HOLD: &str = r#"
import os, sys, time
log, run, hold_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
until = sys.argv[4] if len(sys.argv) > 4 else ""
touch = sys.argv[5] if len(sys.argv) > 5 else ""
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
token, pid = os.environ.get("TENURE_TOKEN", "-"), os.getpid()
now = lambda: time.clock_gettime_ns(time.CLOCK_BOOTTIME)
def stamp(kind):
    os.write(fd, ("%s %d %s %s %d\n" % (run, pid, token, kind, now())).encode())
stamp("S")
start = now()
while now() < start + hold_ms * 1000000 or (until and not os.path.exists(until) and now() < start + 30 * 10**9):
    time.sleep(0.01)
    stamp("H")
if touch:
    open(touch, "w").close()
stamp("E")
"#;

/// The Python interpreter for [`HOLD`]: the system's, not a version manager's
/// shim (which costs a shell script's start-up before every command).
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" }
}

/// The [`HOLD`] command line.
pub fn hold_command(log: &Path, run: &str, hold_ms: u64, until: Option<&Path>, touch: Option<&Path>) -> Vec<String> {
    let mut cmd = vec![python().to_string(), "-S".into(), "-c".into(), HOLD.into()];
    cmd.push(log.display().to_string());
    cmd.push(run.into());
    cmd.push(hold_ms.to_string());
    cmd.push(until.map(|p| p.display().to_string()).unwrap_or_default());
    cmd.push(touch.map(|p| p.display().to_string()).unwrap_or_default());
    cmd
}

/// What one command showed of its hold: its first and last stamps.
///
/// The interval is what the command *did* under the lease — its own writes,
/// every 10 ms — and so a lower bound of the time it ran: it started a little
/// before its first stamp (exec, interpreter start-up) and, if it was killed,
/// died at most one heartbeat plus a scheduling delay after its last. An
/// overlap found is therefore always real (two commands wrote at interleaved
/// moments); an overlap shorter than a heartbeat, at a command's very start or
/// at a killed command's end, can go unseen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub run: String,
    pub pid: u32,
    pub token: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// It wrote its `E` stamp: it ended by itself, not killed.
    pub finished: bool,
}

impl std::fmt::Display for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run {} (pid {}, token {}): {}..{} ns ({} ms{})",
            self.run,
            self.pid,
            self.token,
            self.start_ns,
            self.end_ns,
            (self.end_ns - self.start_ns) / 1_000_000,
            if self.finished { "" } else { ", killed: last heartbeat" }
        )
    }
}

/// The holds in `text` (lines written by [`HOLD`]), one per run.
pub fn parse_holds(text: &str) -> Vec<Hold> {
    let mut holds: std::collections::BTreeMap<(String, u32), Hold> = Default::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(' ').collect();
        // A line cut short would be a broken log, not a killed command: O_APPEND
        // writes of a few dozen bytes land whole.
        assert_eq!(f.len(), 5, "malformed hold line {line:?}");
        let (pid, token, ns) = (f[1].parse().expect("pid"), f[2].parse().expect("token"), f[4].parse().expect("ns"));
        let h = holds.entry((f[0].to_string(), pid)).or_insert_with(|| Hold {
            run: f[0].to_string(),
            pid,
            token,
            start_ns: ns,
            end_ns: ns,
            finished: false,
        });
        assert_eq!(h.token, token, "one command saw two tokens: {line}");
        h.start_ns = h.start_ns.min(ns);
        h.end_ns = h.end_ns.max(ns);
        h.finished |= f[3] == "E";
    }
    holds.into_values().collect()
}

/// Every pair of holds that overlap, the earlier-starting one first.
pub fn overlaps(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut sorted = holds.to_vec();
    sorted.sort_by_key(|h| (h.start_ns, h.end_ns));
    let mut found = Vec::new();
    for (i, a) in sorted.iter().enumerate() {
        for b in sorted[i + 1..].iter().take_while(|b| b.start_ns < a.end_ns) {
            found.push((a.clone(), b.clone()));
        }
    }
    found
}

/// What [`assert_no_overlap`] says when any two holds overlap: both, with their tokens.
pub fn overlap_failure(holds: &[Hold], context: &str) -> Option<String> {
    let found = overlaps(holds);
    let listed: Vec<String> = found.iter().map(|(a, b)| format!("  {a}\n  overlaps {b}")).collect();
    (!found.is_empty()).then(|| format!("{context}: {} overlapping hold(s):\n{}", found.len(), listed.join("\n")))
}

/// Fails, naming both holds and their tokens, if any two overlap.
pub fn assert_no_overlap(holds: &[Hold], context: &str) {
    if let Some(failure) = overlap_failure(holds, context) {
        panic!("{failure}");
    }
}

/// What [`assert_overlaps_in_token_order`] says when two holds overlap with
/// the earlier one holding the higher token.
pub fn token_order_failure(holds: &[Hold], context: &str) -> Option<String> {
    let bad: Vec<String> = overlaps(holds)
        .into_iter()
        .filter(|(a, b)| a.token >= b.token)
        .map(|(a, b)| format!("  {a}\n  overlaps {b}"))
        .collect();
    (!bad.is_empty()).then(|| format!("{context}: overlaps out of token order:\n{}", bad.join("\n")))
}

/// Fails if two holds overlap with the earlier one holding the higher token:
/// overlaps are allowed only in the order in which fencing tokens still
/// protect what they write.
pub fn assert_overlaps_in_token_order(holds: &[Hold], context: &str) {
    if let Some(failure) = token_order_failure(holds, context) {
        panic!("{failure}");
    }
}

// ------------------------------------------------------------- randomness ---

/// A small deterministic generator (xorshift64*): the chaos schedule is
/// reproducible from the seed the test prints (`TENURE_CHAOS_SEED` sets it).
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn from_env() -> Self {
        let seed = std::env::var("TENURE_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
        });
        eprintln!("chaos seed {seed} (TENURE_CHAOS_SEED={seed} repeats the schedule's choices)");
        Self(seed | 1)
    }

    /// A generator of its own for a thread, from a number of another.
    pub fn seeded(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

// ------------------------------------------------------------- processes ---

/// The children of `pid`'s main thread (a `tenure`'s guard; a guard's command).
pub fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Sends `sig`, ignoring a process that is already gone.
pub fn try_signal(pid: u32, sig: rustix::process::Signal) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    rustix::process::kill_process(pid, sig).is_ok()
}
