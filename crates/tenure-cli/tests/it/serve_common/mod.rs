//! `tenure serve` as a child process, for the `serve_*` tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A `tenure serve` process, killed (SIGKILL) when dropped.
pub(crate) struct Serve {
    child: Child,
    /// The address it listens on for lease clients.
    pub(crate) addr: String,
    /// Its URL as it printed it (`tenure://ADDR`, `…?tls=true` with TLS).
    #[allow(dead_code, reason = "not every test binary looks at it")]
    pub(crate) url: String,
    /// The address of its HTTP side (`--http`), if it has one.
    #[allow(dead_code, reason = "not every test binary looks at the HTTP side")]
    pub(crate) http: Option<String>,
    /// The identity it said it has.
    #[allow(dead_code, reason = "not every test binary looks at it")]
    pub(crate) id: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP GET of `path` from `addr` (host:port): the status code and the body.
#[allow(dead_code, reason = "not every test binary looks at the HTTP side")]
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let limit = std::time::Duration::from_secs(10);
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    s.set_read_timeout(Some(limit)).expect("timeout");
    s.set_write_timeout(Some(limit)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").expect("send");
    let mut answer = String::new();
    s.take(1 << 20).read_to_string(&mut answer).expect("an answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (code, body.to_string())
}

/// A state directory for the servers of this test process, emptied at its first use.
pub(crate) fn state_home() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tenure-serve-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    })
    .clone()
}

/// Starts `tenure serve <args>` and waits until it listens.
pub(crate) fn serve(args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("serve")
        .args(args)
        // The default state file (a restart at a fixed port keeps one) goes to a
        // directory of this test process, not the user's.
        .env("XDG_STATE_HOME", state_home())
        .env_remove("STATE_DIRECTORY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tenure serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (mut url, mut http, mut id) = (None, None, None);
    // The banner ends with the public key; the status page comes before it.
    loop {
        let line = lines.next().expect("tenure serve exited before listening").expect("read stdout");
        if let Some(u) = line.strip_prefix("tenure serve: listening on ") {
            url = Some(u.to_string());
        } else if let Some(h) = line.strip_prefix("tenure serve: status page on ") {
            let h = h.strip_prefix("http://").or_else(|| h.strip_prefix("https://")).expect("an HTTP URL");
            http = Some(h.trim_end_matches('/').to_string());
        } else if let Some(i) = line.strip_prefix("tenure serve: server identity ") {
            id = Some(i.to_string());
        } else if line.starts_with("tenure serve: witness public key") {
            break;
        }
    }
    // Keep reading, so the server never writes into a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let url = url.expect("tenure serve names its address");
    let addr = url.strip_prefix("tenure://").expect("a tenure:// URL");
    let addr = addr.split_once('?').map_or(addr, |(a, _)| a).to_string();
    Serve { child, addr, url, http, id: id.expect("tenure serve names its identity") }
}
