//! `tenure bag` against logs shared with careless and hostile tenants, hung
//! storage and absurd arguments, as a user runs it: odd entries are reported and
//! never listed, followed or written through; bad files and arguments are clear
//! errors with tenure's exit codes, never a panic; and every command ends, with
//! an error, once its storage stops answering.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TENURE: &str = env!("CARGO_BIN_EXE_tenure");
/// Far beyond any deadline involved: a command running this long hung.
const HUNG: Duration = Duration::from_secs(90);

/// Waits for `child`, killing it (and failing) if it runs longer than `limit`.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Output {
    let started = Instant::now();
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} still ran after {limit:?}");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Runs `tenure bag …`: exit code, standard output, standard error.
fn bag(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(TENURE)
        .arg("bag")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tenure");
    let out = wait_bounded(child, HUNG, &format!("tenure bag {args:?}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!stderr.contains("panicked"), "tenure bag {args:?} panicked: {stderr}");
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64
}

/// A bucket's directory, as the directory log lays it out (1 s buckets).
fn bucket_dir(log: &Path, bucket: u64) -> PathBuf {
    log.join(format!("g{:012}", bucket / 1_000 / 4096)).join(format!("{bucket:016}"))
}

fn tree(root: &Path) -> Vec<(PathBuf, u64, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let meta = fs::symlink_metadata(entry.path()).expect("meta");
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.push((entry.path(), meta.len(), meta.permissions().mode()));
        }
    }
    out.sort();
    out
}

fn run_ok(cmd: &str, args: &[&str]) {
    let status = Command::new(cmd).args(args).status().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(status.success(), "{cmd} {args:?}: {status}");
}

/// Every kind of entry tenure did not write, named `<kind>.0.data` in `dir`,
/// linking to `outside` where a link is planted.
fn plant_odd_data_files(dir: &Path, outside: &Path) -> Vec<String> {
    let name = |k: &str| dir.join(format!("{k}.0.data"));
    fs::create_dir(name("dir")).expect("mkdir");
    symlink(outside.join("secret.0.data"), name("out")).expect("symlink");
    symlink(outside, name("outdir")).expect("symlink");
    symlink(outside.join("made-through-a-link"), name("dangling")).expect("symlink");
    symlink("/dev/zero", name("zero")).expect("symlink");
    run_ok("mkfifo", &[name("fifo").to_str().expect("utf8")]);
    run_ok("mknod", &[name("dev").to_str().expect("utf8"), "c", "1", "5"]);
    fs::File::create(name("huge")).expect("create").set_len(10 << 30).expect("sparse");
    ["dir", "out", "outdir", "dangling", "zero", "fifo", "dev", "huge"].iter().map(|k| format!("{k}.0.data")).collect()
}

#[test]
fn odd_entries_are_reported_by_read_and_never_listed_by_close() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (log, outside) = (tmp.path().join("log"), tmp.path().join("outside"));
    std::fs::create_dir(&log).expect("mkdir log");
    fs::create_dir(&outside).expect("mkdir");
    fs::write(outside.join("secret.0.data"), b"not the log's").expect("write");
    let logs = log.to_str().expect("utf8");
    let at = now_ms() - 4_000;
    let (code, out, _) = bag(&["append", logs, "--json", "--at", &at.to_string(), "one", "two"]);
    assert_eq!(code, 0, "{out}");
    let dir = bucket_dir(&log, at - at % 1_000);
    let planted = plant_odd_data_files(&dir, &outside);
    let before = tree(&outside);

    let (code, out, _) = bag(&["read", logs, "--json"]);
    assert_eq!(code, 0);
    let lines = json_lines(&out);
    let payloads: Vec<_> = lines.iter().filter_map(|l| l["payload"].as_str()).collect();
    assert_eq!(payloads, ["one", "two"]);
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!(summary["skipped_total"].as_u64(), Some(planted.len() as u64), "{summary}");
    let skipped: Vec<String> = summary["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| format!("{} {}", s["path"].as_str().unwrap_or(""), s["reason"].as_str().unwrap_or("")))
        .collect();
    for name in &planted {
        assert!(skipped.iter().any(|s| s.contains(name.as_str())), "{name} not reported: {skipped:?}");
    }
    let (code, _, err) = bag(&["read", logs]);
    assert_eq!(code, 0);
    assert!(err.contains(&format!("skipped {} entries tenure did not write", planted.len())), "{err}");
    let (code, out, _) = bag(&["audit", logs, "--json"]);
    assert_eq!(code, 0);
    let lines = json_lines(&out);
    let audit = &lines.last().expect("summary")["summary"];
    assert_eq!(audit["skipped_total"].as_u64(), Some(planted.len() as u64), "{audit}");
    assert!(err.contains("a FIFO (named pipe) named like a data file"), "{err}");

    let (code, out, err) = bag(&["close", logs]);
    assert_eq!(code, 0, "{out}{err}");
    for name in &planted {
        assert!(err.contains(&format!("not listed: {}", dir.join(name).display())), "{name}: {err}");
    }
    let manifest = fs::read_to_string(dir.join("manifest")).expect("manifest");
    let items: Vec<_> = manifest.lines().filter(|l| l.starts_with("item ")).collect();
    assert_eq!(items.len(), 1, "only the writer's data file: {manifest}");
    let (code, out, _) = bag(&["read", logs, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json_lines(&out).iter().filter_map(|l| l["payload"].as_str()).count(), 2);
    assert_eq!(tree(&outside), before, "nothing outside the log was written");
    assert!(!outside.join("made-through-a-link").exists());
}

#[test]
fn a_bucket_that_cannot_be_closed_is_named_and_the_others_are_closed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let logs = log.to_str().expect("utf8");
    let (first, second) = (now_ms() - 6_000, now_ms() - 4_000);
    for (at, msg) in [(first, "first"), (second, "second")] {
        assert_eq!(bag(&["append", logs, "--at", &at.to_string(), msg]).0, 0);
    }
    let stuck = first - first % 1_000;
    fs::create_dir(bucket_dir(&log, stuck).join("manifest")).expect("mkdir");
    let (code, _, err) = bag(&["close", logs]);
    assert_eq!(code, 65, "an unclosable bucket is corrupt data: {err}");
    assert!(err.contains(&format!("cannot close bucket {stuck}")) && err.contains("manifest"), "{err}");
    assert!(bucket_dir(&log, second - second % 1_000).join("manifest").is_file(), "the next bucket is closed");
    let (code, out, err) = bag(&["read", logs]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(err.contains("the bucket cannot be closed"), "{err}");
}

#[test]
fn a_configuration_tenure_did_not_write_is_a_clear_error() {
    type Plant = Box<dyn Fn(&Path, &Path)>;
    let valid =
        "tenure-bag-config 1\nwidth_ms 1000\ngrace_ms 2000\nmax_skew_ms 500\nchunk_buckets 4\nfirst_bucket_ms 0\n";
    let cases: Vec<(&str, Plant)> = vec![
        ("a directory", Box::new(|p, _| fs::create_dir(p).expect("mkdir"))),
        (
            "a link to a valid one outside",
            Box::new(move |p, out| {
                fs::write(out.join("bag.conf"), valid).expect("write");
                symlink(out.join("bag.conf"), p).expect("symlink");
            }),
        ),
        ("a FIFO", Box::new(|p, _| run_ok("mkfifo", &[p.to_str().expect("utf8")]))),
        ("a device", Box::new(|p, _| run_ok("mknod", &[p.to_str().expect("utf8"), "c", "1", "5"]))),
        ("a huge file", Box::new(|p, _| fs::File::create(p).expect("create").set_len(1 << 40).expect("len"))),
        ("garbage", Box::new(|p, _| fs::write(p, b"\xff\x00 nonsense").expect("write"))),
        ("width 0", Box::new(move |p, _| fs::write(p, valid.replace("width_ms 1000", "width_ms 0")).expect("write"))),
    ];
    for (what, plant) in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (log, outside) = (tmp.path().join("log"), tmp.path().join("outside"));
        fs::create_dir(&log).expect("mkdir");
        fs::create_dir(&outside).expect("mkdir");
        plant(&log.join("bag.conf"), &outside);
        let logs = log.to_str().expect("utf8");
        for args in [&["read", logs][..], &["append", logs, "x"], &["close", logs], &["compact", logs]] {
            let (code, _, err) = bag(args);
            assert_eq!(code, 65, "{what}, {args:?}: {err}");
            assert!(err.contains("bag.conf"), "{what}, {args:?}: {err}");
        }
    }
}

#[test]
fn absurd_numbers_on_the_command_line_are_usage_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("log");
    let logs = log.to_str().expect("utf8");
    let bench = tmp.path().join("bench");
    let cases: Vec<Vec<&str>> = vec![
        vec!["append", logs, "--at", "18446744073709551615", "x"],
        vec!["append", logs, "--at", "253402300800000", "x"],
        vec!["append", logs, "--lag", "1000000y", "x"],
        vec!["append", logs, "--lease", "a", "--lease-store", logs, "--ttl", "365d", "x"],
        vec!["append", logs, "--bucket-width", "0", "x"],
        vec!["append", logs, "--bucket-width", "100000y", "x"],
        vec!["append", logs, "--grace", "0", "x"],
        vec!["append", logs, "--max-skew", "100000y", "x"],
        vec!["append", logs, "--chunk-buckets", "0", "x"],
        vec!["append", logs, "--chunk-buckets", "18446744073709551615", "x"],
        vec!["append", logs, "--store-opt", "timeout=0s", "x"],
        vec!["append", logs, "--store-opt", "no-such-option=1", "x"],
        vec!["read", logs, "--from", "18446744073709551615"],
        vec!["read", logs, "--to", "300000000000000"],
        vec!["close", logs, "--bucket", "18446744073709551615"],
        vec!["close", logs, "--loop", "--interval", "0"],
        vec!["close", logs, "--lookback", "100000y"],
        vec!["audit", logs, "--witness-skew", "100000y"],
    ];
    for args in &cases {
        let (code, _, err) = bag(args);
        assert_eq!(code, 64, "{args:?}: {err}");
    }
    assert!(!log.exists(), "no refused command created the log");
    for writers in ["0", "100000"] {
        let (code, _, err) = bag(&["bench", bench.to_str().expect("utf8"), "--writers", writers]);
        assert_eq!(code, 64, "--writers {writers}: {err}");
    }
    assert!(!bench.exists());
}

/// A FUSE mount whose daemon never answers: every file-system call under it
/// blocks in the kernel, as on a hard-mounted NFS whose server went away. Ends
/// (the connection aborted, the mount detached) when dropped.
struct HungMount {
    daemon: Child,
    dir: tempfile::TempDir,
}

impl HungMount {
    /// `None` (with the reason printed) where FUSE mounts are not possible.
    fn new() -> Option<Self> {
        let root = Command::new("id").arg("-u").output().ok().is_some_and(|o| o.stdout.starts_with(b"0\n"));
        if !root || !Path::new("/dev/fuse").exists() {
            eprintln!("skipping: a hung mount needs root and /dev/fuse");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        // The shell opens /dev/fuse as fd 3, mounts it, then holds it unanswered.
        let script = "exec 3<>/dev/fuse && mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0 \
                      tenure-hung \"$0\" && echo mounted && exec sleep 3600";
        let mut daemon = Command::new("bash")
            .args(["-c", script, dir.path().to_str().expect("utf8")])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("bash");
        let mut line = String::new();
        let stdout = daemon.stdout.take().expect("stdout");
        let _ = BufReader::new(stdout).read_line(&mut line);
        if line.trim() != "mounted" {
            let _ = daemon.kill();
            let _ = daemon.wait();
            eprintln!("skipping: could not mount a FUSE file system here");
            return None;
        }
        Some(Self { daemon, dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        // Closing /dev/fuse aborts the connection: every stuck call returns.
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = Command::new("umount").args(["-l", self.dir.path().to_str().unwrap_or("")]).status();
    }
}

#[test]
fn on_a_hung_mount_every_command_ends_with_an_error_at_its_deadline() {
    let Some(mount) = HungMount::new() else { return };
    let log = mount.path().join("log");
    let logs = log.to_str().expect("utf8");
    for args in [
        &["append", logs, "--store-opt", "timeout=1s", "x"][..],
        &["read", logs, "--store-opt", "timeout=1s"],
        &["close", logs, "--store-opt", "timeout=1s"],
        &["compact", logs, "--store-opt", "timeout=1s"],
        &["audit", &format!("file://{logs}?timeout=1s")],
    ] {
        let started = Instant::now();
        let (code, _, err) = bag(args);
        let took = started.elapsed();
        assert_eq!(code, 69, "{args:?}: {err}");
        assert!(err.contains("no answer from the file system within 1s"), "{args:?}: {err}");
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?} with a 1 s deadline");
    }
    // The default deadline is 10 s.
    let started = Instant::now();
    let (code, _, err) = bag(&["read", logs]);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("within 10s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(40), "took {:?}", started.elapsed());
    // A metronome keeps retrying, and SIGTERM still ends it at once.
    let child = Command::new(TENURE)
        .args(["bag", "close", logs, "--loop", "--store-opt", "timeout=1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(2_500));
    run_ok("kill", &["-TERM", &child.id().to_string()]);
    let started = Instant::now();
    let out = wait_bounded(child, HUNG, "close --loop after SIGTERM");
    assert!(out.status.success(), "{:?}", out.status);
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[test]
fn an_object_store_that_never_answers_ends_every_command_with_an_error() {
    // Accepts connections and never says a word.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("aws_endpoint=http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let opts = [
        "--store-opt",
        &endpoint,
        "--store-opt",
        "aws_allow_http=true",
        "--store-opt",
        "aws_access_key_id=x",
        "--store-opt",
        "aws_secret_access_key=y",
        "--store-opt",
        "aws_region=us-east-1",
        "--store-opt",
        "timeout=1s",
    ];
    for cmd in [&["append", "s3://tenure/hung", "x"][..], &["read", "s3://tenure/hung"], &["close", "s3://tenure/hung"]]
    {
        let args: Vec<&str> = cmd.iter().chain(opts.iter()).copied().collect();
        let started = Instant::now();
        let (code, _, err) = bag(&args);
        assert_eq!(code, 69, "{cmd:?}: {err}");
        assert!(started.elapsed() < Duration::from_secs(60), "{cmd:?} took {:?}", started.elapsed());
    }
}
