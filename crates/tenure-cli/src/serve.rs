//! `tenure serve`: the lease server.
//!
//! The server keeps every lease in RAM, signs a witness for every grant, and
//! grants nothing for `--max-lease` + 1 s after it starts, or longer if an
//! earlier run on its port had a longer `--max-lease` (the restart rule, see
//! the `tenure_server` docs; the bound, and the server's identity, are kept in
//! `--state`, see [`state_file`]). It prints one line per listener on stdout, e.g.
//! `tenure serve: listening on tenure://127.0.0.1:7777` (`…?tls=true` with
//! `--tls-cert` and `--tls-key`), then serves until SIGINT or SIGTERM, when it
//! stops gracefully.
//!
//! Every resource a client can make it spend is bounded by a flag: connections
//! before and after their hello, deadlines for the hello, each frame, each batch
//! of answers and idle clients, live leases and retained records, and the same
//! for the HTTP port (see `tenure serve --help` and the README's resource
//! bounds).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use tenure::SystemClock;
use tenure::limits::{MAX_DURATION, MAX_TTL, check_duration};
use tenure_server::http::HttpOptions;
use tenure_server::state::StateFile;
use tenure_server::{Core, CoreOptions, Server, ServerOptions, ServerTls, Signer};

use crate::durations::duration;
use crate::exit::Fail;

/// `tenure serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address for lease clients (`tenure://` stores).
    #[arg(long, default_value = "127.0.0.1:7777")]
    pub(crate) listen: SocketAddr,
    /// Address for the status page and Prometheus `/metrics` (off if omitted).
    #[arg(long)]
    pub(crate) http: Option<SocketAddr>,
    /// Most connections to the HTTP port at once; a newer one closes the oldest.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub(crate) http_max_connections: usize,
    /// An HTTP connection must send a complete request head within this of
    /// connecting (its TLS handshake included) or of its previous answer (idle
    /// keep-alive connections too).
    #[arg(long, value_parser = duration, default_value = "10s", value_name = "DURATION")]
    pub(crate) http_idle_timeout: Duration,
    /// An HTTP client must take a whole answer within this of its first byte.
    #[arg(long, value_parser = duration, default_value = "10s", value_name = "DURATION")]
    pub(crate) http_timeout: Duration,
    /// Longest lease granted; also how long a (re)started server grants nothing.
    #[arg(long, value_parser = duration, default_value = "60s")]
    pub(crate) max_lease: Duration,
    /// File where the server keeps the longest lease it may have granted, written
    /// before its first grant, so that a restart with a lower --max-lease still
    /// waits out every grant from before it. Default: `serve-PORT.state` in
    /// `$STATE_DIRECTORY` (systemd's StateDirectory=), else in
    /// `$XDG_STATE_HOME/tenure`, else in `~/.local/state/tenure`; none with
    /// `--listen` on port 0 (nobody can come back to that address).
    #[arg(long, value_name = "FILE")]
    pub(crate) state: Option<PathBuf>,
    /// This server's identity, by which clients of several servers place names
    /// (1 to 64 ASCII letters, digits, '.', '_', '-'). Default: the one kept in
    /// --state, made at the first start (random for a server on port 0, or
    /// without a state file). Changing it is a change of the server list.
    #[arg(long, value_name = "ID")]
    pub(crate) server_id: Option<String>,
    /// ed25519 witness key: 64 hex digits in a file, created (mode 0600) if missing.
    /// Without it, a fresh key is made for this run only.
    #[arg(long, value_name = "FILE")]
    pub(crate) key: Option<PathBuf>,
    /// File holding a shared secret that clients must present
    /// (`--store-opt auth_token_file=…` or `TENURE_AUTH_TOKEN` on their side).
    /// The token travels only over TLS or within this machine: without
    /// --tls-cert, a --listen address that is not loopback is refused unless
    /// --allow-plaintext-auth.
    #[arg(long, value_name = "FILE")]
    pub(crate) auth_token_file: Option<PathBuf>,
    /// Accept --auth-token-file without TLS on an address that is not loopback,
    /// where the token crosses the network unencrypted (a trusted network only).
    #[arg(long)]
    pub(crate) allow_plaintext_auth: bool,
    /// Certificate chain for TLS (PEM, the server's own certificate first).
    /// With --tls-key, the lease port and the HTTP port speak TLS only; clients
    /// connect with `tenure://HOST:PORT?tls=true`, adding `&ca_file=CA.pem` for
    /// a private CA.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM, unencrypted: PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Close clients (past their hello) that send nothing for this long.
    #[arg(long, value_parser = duration, default_value = "5m")]
    pub(crate) idle_timeout: Duration,
    /// A frame must be complete within this of its first byte, however slowly the
    /// rest comes, and a batch of answers taken within this of being written.
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub(crate) io_timeout: Duration,
    /// A new connection must complete its hello (its TLS handshake included)
    /// within this of being accepted.
    #[arg(long, value_parser = duration, default_value = "5s", value_name = "DURATION")]
    pub(crate) hello_timeout: Duration,
    /// Most client connections past their hello at once; a hello beyond is refused.
    #[arg(long, default_value_t = 4096)]
    pub(crate) max_connections: usize,
    /// Most connections still before their hello, on top of --max-connections; a
    /// newer one closes the oldest, so they never take a client's place.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub(crate) max_pre_hello: usize,
    /// Most leases with a live grant at once; each shared holder, each
    /// reservation and each queued waiter counts as one more (a lease has at
    /// most 1024 of each).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) max_leases: usize,
    /// Released lease records kept for their watermark and metadata (oldest dropped first).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) retain: usize,
    /// Threads serving client connections, each keeping its connections for their
    /// whole life (default: one per core; 0 serves them as tasks of the shared runtime).
    #[arg(long)]
    pub(crate) connection_threads: Option<usize>,
    /// After answering, how long a connection polls for its client's next
    /// requests before sleeping, while that client tends to send them that soon
    /// (0 turns it off). Cheaper than a wake-up on most VMs; costs CPU while busy.
    #[arg(long, value_parser = duration, default_value = "50us", value_name = "DURATION")]
    pub(crate) spin: Duration,
}

/// 2020-01-01: a wall clock before this is unset, and tokens would not grow across restarts.
const PLAUSIBLE_WALL_MS: u64 = 1_577_836_800_000;

/// Refuses flags no server can work with: zero or absurd durations and limits.
fn check_args(args: &ServeArgs) -> Result<()> {
    if args.max_lease < Duration::from_millis(10) {
        bail!("--max-lease {:?} is too short (at least 10ms)", args.max_lease);
    }
    check_duration("--max-lease", args.max_lease, MAX_TTL)?;
    for (flag, d) in [
        ("--idle-timeout", args.idle_timeout),
        ("--io-timeout", args.io_timeout),
        ("--hello-timeout", args.hello_timeout),
        ("--http-idle-timeout", args.http_idle_timeout),
        ("--http-timeout", args.http_timeout),
    ] {
        if d < Duration::from_millis(1) {
            bail!("{flag} must be at least 1ms");
        }
        check_duration(flag, d, MAX_DURATION)?;
    }
    if let Some(id) = &args.server_id {
        tenure_server::wire::check_server_id(id).map_err(|m| anyhow::anyhow!("--server-id: {m}"))?;
    }
    if args.auth_token_file.is_some()
        && args.tls_cert.is_none()
        && !args.listen.ip().to_canonical().is_loopback()
        && !args.allow_plaintext_auth
    {
        bail!(
            "--auth-token-file without TLS on {}, which is not a loopback address: clients would send the token \
             over the network in plaintext. Add --tls-cert and --tls-key (clients then connect with tls=true), \
             listen on a loopback address, or add --allow-plaintext-auth to accept that",
            args.listen
        );
    }
    for (flag, n) in [
        ("--max-connections", args.max_connections),
        ("--max-pre-hello", args.max_pre_hello),
        ("--http-max-connections", args.http_max_connections),
        ("--max-leases", args.max_leases),
    ] {
        if n == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard limit, and warns if even
/// that is below what the connection limits can use: past it, accepting fails
/// and nobody new gets in.
fn raise_file_limit(needed: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let below = match (limit.current, limit.maximum) {
        (Some(current), Some(maximum)) => current < maximum,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if below {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(error = %e, "could not raise the open-file limit");
        }
    }
    let have = getrlimit(Resource::Nofile).current;
    if have.is_some_and(|n| n < needed) {
        tracing::warn!(
            limit = ?have,
            needed,
            "the open-file limit is below what the connection limits need; lower them or raise it (ulimit -n)"
        );
    }
}

pub(crate) async fn run(args: ServeArgs) -> Result<ExitCode> {
    // A flag or a file it names that cannot be used is the user's to fix: exit 64.
    let usage = |e: anyhow::Error| anyhow::Error::from(Fail::usage(format!("{e:#}")));
    check_args(&args).map_err(usage)?;
    // Read first: a certificate that cannot be used stops the start before anything else.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::from_files(cert, key).map_err(|e| usage(e.into()))?),
        _ => None,
    };
    let sockets = [args.max_connections, args.max_pre_hello, args.http_max_connections]
        .iter()
        .fold(64u64, |sum, &n| sum.saturating_add(u64::try_from(n).unwrap_or(u64::MAX)));
    raise_file_limit(sockets);
    let clock = SystemClock::shared();
    if clock.wall_ms() < PLAUSIBLE_WALL_MS {
        bail!(
            "the wall clock reads before 2020; fencing tokens would not stay monotonic across restarts. Set the clock first"
        );
    }
    if clock.wall_ms() > tenure::limits::MAX_TIME_MS {
        bail!(
            "the wall clock reads after the year 9999; tokens and deadlines would leave their range. Set the clock first"
        );
    }
    let signer = match &args.key {
        Some(path) => load_or_create_key(path).map_err(usage)?,
        None => {
            tracing::warn!("no --key: witnesses are signed with a key made for this run only");
            Signer::generate()
        }
    };
    let auth_token = match &args.auth_token_file {
        Some(p) => Some(
            read_small(p)
                .with_context(|| format!("reading {}", p.display()))
                .map_err(usage)?
                .trim()
                .as_bytes()
                .to_vec(),
        )
        .filter(|t| !t.is_empty()),
        None => None,
    };
    // Bound first: the port names the default state file, and the port is
    // this server's alone while it runs, so no other server writes that file.
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listening on {}", args.listen))?;
    let state = state_file(args.state.as_deref(), args.listen.port(), |k| std::env::var_os(k)).map_err(usage)?;
    // Written before the table exists, so before anything is granted.
    let (longest, kept_id) = match &state {
        Some(state) => state.start(args.max_lease).map_err(|e| usage(e.into()))?,
        None => (args.max_lease, tenure_server::server::random_server_id()),
    };
    let server_id = args.server_id.clone().unwrap_or_else(|| kept_id.clone());
    let mut core_opts = CoreOptions::after(args.max_lease, longest);
    core_opts.max_live = args.max_leases;
    core_opts.retain = args.retain;
    let core = Arc::new(Core::new(clock, core_opts));
    if let Some(state) = state.filter(|_| longest > args.max_lease) {
        tokio::spawn(lower_state_after_quarantine(state, core.clone(), args.max_lease, kept_id));
    }
    let opts = ServerOptions {
        auth_token,
        idle_timeout: args.idle_timeout,
        io_timeout: args.io_timeout,
        hello_timeout: args.hello_timeout,
        max_connections: args.max_connections,
        max_pre_hello: args.max_pre_hello,
        spin: args.spin,
        tls: tls.clone(),
        server_id: server_id.clone(),
        connection_threads: args
            .connection_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)),
        ..ServerOptions::default()
    };
    let public_key = signer.public_key_hex();
    let server = Server::from_listener(listener, core.clone(), signer, opts);
    let http = match args.http {
        Some(addr) => {
            Some(tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr} (--http)"))?)
        }
        None => None,
    };
    // Best effort: a closed stdout (the reader went away) must not stop a server.
    let banner = || -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        let (query, scheme) = if tls.is_some() { ("?tls=true", "https") } else { ("", "http") };
        writeln!(out, "tenure serve: listening on tenure://{}{query}", server.local_addr()?)?;
        if let Some(h) = &http {
            writeln!(out, "tenure serve: status page on {scheme}://{}/", h.local_addr()?)?;
        }
        writeln!(out, "tenure serve: server identity {server_id}")?;
        writeln!(out, "tenure serve: witness public key {public_key}")?;
        let earlier = if longest > args.max_lease {
            format!(" (an earlier run granted leases up to {})", tenure_core::human_duration(longest))
        } else {
            String::new()
        };
        writeln!(
            out,
            "tenure serve: restart quarantine, no grants for {}{earlier}",
            tenure_core::human_duration(core.quarantine_left())
        )?;
        out.flush()
    };
    if let Err(e) = banner() {
        tracing::warn!(error = %e, "could not print the start-up lines");
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let shared = server.shared().clone();
    let serving = server.run(stopped(stop_rx.clone()));
    let http_serving = async {
        if let Some(listener) = http {
            let opts = HttpOptions {
                max_connections: args.http_max_connections,
                idle_timeout: args.http_idle_timeout,
                response_timeout: args.http_timeout,
                tls: tls.clone(),
                ..HttpOptions::default()
            };
            tenure_server::http::serve(listener, shared, opts, stopped(stop_rx.clone())).await;
        }
    };
    let signals = async {
        wait_for_signal().await;
        eprintln!("tenure serve: stopping");
        let _ = stop_tx.send(true);
    };
    tokio::select! {
        _ = async { tokio::join!(serving, http_serving) } => {}
        () = async { signals.await; std::future::pending::<()>().await } => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// The state file: `--state`, or `serve-PORT.state` in the first of
/// `$STATE_DIRECTORY`, `$XDG_STATE_HOME/tenure`, `$HOME/.local/state/tenure`
/// that is set (`env` reads the environment). None for port 0: a server there
/// gets a new address each run, which no client can come back to.
fn state_file(
    flag: Option<&Path>,
    port: u16,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Option<StateFile>> {
    if let Some(path) = flag {
        return Ok(Some(StateFile::new(path)));
    }
    if port == 0 {
        return Ok(None);
    }
    // Only absolute directories, as the XDG rules say: a relative one would
    // move with the working directory, and a restart would not find the file.
    let dir = |k: &str| env(k).map(PathBuf::from).filter(|p| p.is_absolute());
    let dir = dir("STATE_DIRECTORY")
        .or_else(|| dir("XDG_STATE_HOME").map(|d| d.join("tenure")))
        .or_else(|| dir("HOME").map(|d| d.join(".local/state/tenure")));
    match dir {
        Some(dir) => Ok(Some(StateFile::new(dir.join(format!("serve-{port}.state"))))),
        None => bail!(
            "no --state, and none of STATE_DIRECTORY, XDG_STATE_HOME and HOME is set to an absolute directory \
             for the default: give --state FILE (where the server keeps the longest lease it may have granted)"
        ),
    }
}

/// Lowers the recorded bound to this run's `max_lease` once the quarantine,
/// which covered the recorded one, is over: every grant made under it has
/// ended. A failure leaves the higher bound, which is safe (a restart waits
/// longer), so it is only logged.
async fn lower_state_after_quarantine(state: StateFile, core: Arc<Core>, max_lease: Duration, server_id: String) {
    loop {
        let left = core.quarantine_left();
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left).await;
    }
    match tokio::task::spawn_blocking(move || state.lower(max_lease, &server_id)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not lower the recorded longest lease (a restart will wait longer)")
        }
        Err(e) => tracing::warn!(error = %e, "lowering the recorded longest lease failed"),
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The largest secret file `serve` reads (a token or a key is far smaller).
const MAX_SECRET_FILE: u64 = 64 * 1024;

/// Reads a small regular file whole, refusing one over [`MAX_SECRET_FILE`] (a
/// mistaken log file must not fill memory) and anything that is not a regular
/// file (`/dev/zero` never ends, a FIFO would block startup for good).
fn read_small(path: &Path) -> std::io::Result<String> {
    let bytes = tenure::limits::read_small_file(path, MAX_SECRET_FILE).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => {
            std::io::Error::new(e.kind(), format!("longer than {MAX_SECRET_FILE} bytes: not a token or key file"))
        }
        _ => e,
    })?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Reads a 64-hex-digit ed25519 seed, or creates one (mode 0600) if the file is absent.
fn load_or_create_key(path: &Path) -> Result<Signer> {
    match read_small(path) {
        Ok(text) => Signer::from_hex_seed(&text)
            .map_err(|_| anyhow::anyhow!("{}: not a key (64 hex digits expected)", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::os::unix::fs::OpenOptionsExt;
            let seed = Signer::generate_hex_seed();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("creating key file {}", path.display()))?;
            writeln!(f, "{seed}")?;
            f.sync_all()?;
            Ok(Signer::from_hex_seed(&seed)?)
        }
        Err(e) => Err(e).with_context(|| format!("reading key file {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_for(port: u16, vars: &[(&str, &str)]) -> Result<Option<PathBuf>> {
        let env = |k: &str| vars.iter().find(|(name, _)| *name == k).map(|(_, v)| v.into());
        Ok(state_file(None, port, env)?.map(|s| s.path().to_path_buf()))
    }

    #[test]
    fn the_default_state_file_is_per_port_in_the_first_state_directory_set() {
        let all = [("STATE_DIRECTORY", "/var/lib/tenure"), ("XDG_STATE_HOME", "/x"), ("HOME", "/home/u")];
        assert_eq!(path_for(7777, &all).expect("a default"), Some("/var/lib/tenure/serve-7777.state".into()));
        assert_eq!(path_for(7777, &all[1..]).expect("a default"), Some("/x/tenure/serve-7777.state".into()));
        assert_eq!(
            path_for(7777, &all[2..]).expect("a default"),
            Some("/home/u/.local/state/tenure/serve-7777.state".into())
        );
        assert_eq!(
            path_for(7777, &[("XDG_STATE_HOME", "rel"), ("HOME", "/h")]).expect("a default"),
            Some("/h/.local/state/tenure/serve-7777.state".into())
        );
        assert_eq!(path_for(0, &all).expect("a default"), None, "port 0: no address to come back to");
        let err = path_for(7777, &[]).expect_err("nowhere for the default").to_string();
        assert!(err.contains("--state FILE"), "{err}");
        let given =
            state_file(Some(Path::new("/s/f")), 0, |_| None).expect("a default").map(|s| s.path().to_path_buf());
        assert_eq!(given, Some("/s/f".into()));
    }
}
