//! `tenure serve` as a child process, for the `serve_*` tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A `tenure serve` process, killed (SIGKILL) when dropped.
pub(crate) struct Serve {
    child: Child,
    /// The address it listens on for lease clients.
    pub(crate) addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tenure serve <args>` and waits until it listens.
pub(crate) fn serve(args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tenure serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines.next().expect("tenure serve exited before listening").expect("read stdout");
        if let Some(addr) = line.strip_prefix("tenure serve: listening on tenure://") {
            break addr.to_string();
        }
    };
    // Keep reading, so the server never writes into a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Serve { child, addr }
}
