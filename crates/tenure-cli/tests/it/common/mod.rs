//! Helpers shared by the CLI tests: the real `tenure` binary, stores in temp
//! directories, and process checks. Every test runs real processes.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The `tenure` binary under test.
pub const TENURE: &str = env!("CARGO_BIN_EXE_tenure");

/// How long any one step of a test may take before it fails: generous, for a
/// loaded machine.
pub const LIMIT: Duration = Duration::from_secs(30);

/// `tenure` with no ambient configuration from the developer's environment.
pub fn tenure() -> Command {
    let mut cmd = Command::new(TENURE);
    // TENURE_LEASE and TENURE_STORE too: tests run under `tenure lock` must not
    // look nested.
    for var in ["TENURE_LOG", "TENURE_MAX_SKEW", "TENURE_CORRUPT_TTL", "TENURE_LEASE", "TENURE_STORE"] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// A file store in a fresh temporary directory.
pub struct FileStore {
    pub dir: tempfile::TempDir,
}

impl FileStore {
    pub fn new() -> Self {
        Self::made(tempfile::tempdir().expect("temp dir"))
    }

    /// A file store in a fresh directory under `parent`.
    pub fn new_in(parent: impl AsRef<Path>) -> Self {
        Self::made(tempfile::tempdir_in(parent).expect("temp dir"))
    }

    /// The store's directory made in `dir`, as a user makes it: tenure never
    /// creates a store's directory unless asked (`--create`).
    fn made(dir: tempfile::TempDir) -> Self {
        std::fs::create_dir(dir.path().join("leases")).expect("mkdir leases");
        Self { dir }
    }

    /// The store URL (a plain path).
    pub fn url(&self) -> String {
        self.dir.path().join("leases").display().to_string()
    }

    /// A scratch path next to the store, for the commands' files.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `tenure lock <store> <name> <flags…> -- <command…>`, not yet started.
pub fn lock(store: &str, name: &str, flags: &[&str], command: &[&str]) -> Command {
    let mut cmd = tenure();
    cmd.args(["lock", store, name]).args(flags).arg("--").args(command);
    cmd
}

/// Runs `cmd` to completion, killing it and failing the test if it takes longer than `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn tenure");
    wait_output(child, limit)
}

/// Waits for `child` (with piped output), killing it and failing if it exceeds `limit`.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "process did not finish within {limit:?}; stdout: {} stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `child` (output not captured) for at most `limit`.
pub fn wait_status(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} did not finish within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `f` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` exists and is not a zombie (a zombie runs no code).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may contain spaces.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Those of `pids` that still run, each with its `/proc` stat line and command
/// line, for an assertion message ("" when none does).
pub fn survivors(pids: &[u32]) -> String {
    let describe = |p: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        format!("[{} | {}]", stat.trim(), String::from_utf8_lossy(&cmdline).replace('\0', " ").trim())
    };
    pids.iter().copied().filter(|&p| running(p)).map(describe).collect::<Vec<_>>().join(" ")
}

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    rustix::process::kill_process(pid, sig).expect("kill");
}

/// Reads the non-empty lines of `path`, or none if it does not exist yet.
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

/// Waits until `path` has at least `n` lines.
pub fn wait_lines(path: &Path, n: usize, limit: Duration) -> Vec<String> {
    assert!(eventually(limit, || lines(path).len() >= n), "{} never got {n} lines", path.display());
    lines(path)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts that a failure was reported as one line starting with `tenure:`, no panic.
pub fn assert_one_line_error(out: &Output) {
    let err = stderr(out);
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "a panic: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.len() == 1 || lines[0].starts_with("error:"),
        "expected one line (or clap's usage message), got: {err}"
    );
}

/// `tenure status <store> <name> --json`, parsed.
pub fn status_json(store: &str, name: &str) -> serde_json::Value {
    status_json_with(store, name, &[])
}

/// `tenure status <store> <name> --json <extra…>` (e.g. `--store-opt`s), parsed:
/// its `leases` array.
pub fn status_json_with(store: &str, name: &str, extra: &[String]) -> serde_json::Value {
    let out = run(tenure().args(["status", store, name, "--json"]).args(extra), Duration::from_secs(20));
    // 0: held, 1: not held; anything else is a failure.
    assert!(matches!(out.status.code(), Some(0 | 1)), "status failed: {}", stderr(&out));
    leases(&out.stdout)
}

/// The `leases` of a `tenure status --json` document, checking its schema version.
pub fn leases(json: &[u8]) -> serde_json::Value {
    let mut doc: serde_json::Value = serde_json::from_slice(json).expect("status --json prints JSON");
    assert_eq!(doc["schema_version"], 1, "{doc}");
    doc["leases"].take()
}

/// The live holders of `name` as `(pid, token)`.
pub fn holders(store: &str, name: &str) -> Vec<(u64, u64)> {
    holders_with(store, name, &[])
}

/// The live holders of `name` as `(pid, token)`, with extra store options.
pub fn holders_with(store: &str, name: &str, extra: &[String]) -> Vec<(u64, u64)> {
    let json = status_json_with(store, name, extra);
    json[0]["holders"]
        .as_array()
        .map(|hs| hs.iter().filter_map(|h| Some((h["holder"]["pid"].as_u64()?, h["token"].as_u64()?))).collect())
        .unwrap_or_default()
}

/// A command that starts two background sleeps in its group, records their pids
/// in `pids`, and waits.
pub fn sleepers(pids: &std::path::Path) -> String {
    format!("sleep 300 & echo $! >> '{p}'; sleep 301 & echo $! >> '{p}'; echo $$ >> '{p}'; wait", p = pids.display())
}

/// A shell that writes its pid to `marks`, then notes each SIGTERM there
/// (`term`) and carries on; its sleeps ignore nothing.
pub fn stubborn(marks: &Path) -> String {
    // `sleep & wait`: a trapped signal interrupts `wait` at once, so each SIGTERM
    // that arrives is its own `term` line (a foreground sleep would let two merge).
    format!(
        "trap 'echo term >> \"{m}\"' TERM; echo $$ >> \"{m}\"; while :; do sleep 0.05 & wait; done",
        m = marks.display()
    )
}

/// Starts `tenure lock <store> <name> <flags…> -- sh -c <script>`, its stderr piped.
pub fn start(store: &FileStore, name: &str, flags: &[&str], script: &str) -> Child {
    lock(&store.url(), name, flags, &["sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure lock")
}

/// The guard: the one child of `tenure`'s main thread (`tenure lock` starts
/// processes from it only).
pub fn guard_of(tenure: &Child) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", tenure.id())).expect("children");
    children.split_whitespace().next().expect("the guard").parse().expect("pid")
}

/// The pids in `path`, one a line, once it has `n` of them.
pub fn pids_of(path: &std::path::Path, n: usize) -> Vec<u32> {
    wait_lines(path, n, LIMIT).iter().map(|l| l.trim().parse().expect("pid")).collect()
}

/// Waits for `holder` to end and returns its exit code and what it printed on stderr.
pub fn finish(holder: &mut Child) -> (Option<i32>, String) {
    let status = wait_status(holder, LIMIT);
    let mut err = String::new();
    if let Some(mut pipe) = holder.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
    }
    (status.code(), err)
}

/// Whether the lease is free: `tenure lock --no-wait` gets it at once.
pub fn lease_is_free(store: &FileStore, name: &str) -> bool {
    let out = run(&mut lock(&store.url(), name, &["--no-wait"], &["true"]), LIMIT);
    out.status.code() == Some(0)
}

/// A fresh prefix of the S3 test server (moto, `TENURE_TEST_S3_MOTO`) and the
/// `--store-opt` arguments that reach it, or `None` (saying why) when it is not
/// set; under `TENURE_REQUIRE_SERVERS=1` a missing server fails the test.
pub fn moto_store(what: &str) -> Option<(String, Vec<String>)> {
    let Ok(endpoint) = std::env::var("TENURE_TEST_S3_MOTO") else {
        assert_ne!(std::env::var("TENURE_REQUIRE_SERVERS").as_deref(), Ok("1"), "TENURE_TEST_S3_MOTO is not set");
        eprintln!("skipped: TENURE_TEST_S3_MOTO is not set (start the servers: eval \"$(scripts/servers.sh env)\")");
        return None;
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let args = [
        format!("aws_endpoint={endpoint}"),
        "aws_allow_http=true".into(),
        "aws_access_key_id=test".into(),
        "aws_secret_access_key=test".into(),
        "aws_region=us-east-1".into(),
    ]
    .into_iter()
    .flat_map(|kv| ["--store-opt".to_string(), kv])
    .collect();
    Some((format!("s3://tenure/{what}-{}-{nanos}", std::process::id()), args))
}
