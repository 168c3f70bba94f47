//! What a `tenure://` URL's settings say: [`ClientOptions`], read with the
//! getters every store uses, and the store they make.

use super::*;

/// The largest `auth_token_file` read (a token is far smaller).
const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// The longest `spin=` a URL may ask for.
const MAX_SPIN: Duration = Duration::from_millis(10);

/// The most `connections=` a URL may ask for, per server.
const MAX_CONNECTIONS: usize = 64;

/// How a [`TenureStore`] talks to its servers.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Shared secret presented in the hello (param `auth_token`, or the contents
    /// of the file named by `auth_token_file`, or `TENURE_AUTH_TOKEN`).
    pub auth_token: Option<Vec<u8>>,
    /// Longest wait for an answer (param `timeout`, e.g. `timeout=5s`; default 10 s); the
    /// answer to a new connection's hello is waited for at most 1 s of it (a
    /// peer silent that long is named as no lease server).
    pub timeout: Duration,
    /// Connections per server, used in turn (param `connections`; default 1).
    pub connections: usize,
    /// How long a connection polls for answers before it sleeps, while answers
    /// tend to come that soon: a server on the same host or a close one (param
    /// `spin`, e.g. `spin=40us`; default 40 µs, at most 10 ms; `spin=0us`: never). It yields to other tasks while it polls,
    /// and polls only while at most 32 requests are on their way on the connection.
    pub spin: Duration,
    /// TLS (param `tls=true`, with `ca_file` and `server_name`); `None`: plaintext.
    pub tls: Option<ClientTls>,
    /// Send the auth token without TLS to a server that is not on this machine
    /// (param `allow_plaintext_auth=true`); without it, that is refused before
    /// anything is sent. To a loopback address the token does not leave the machine.
    pub allow_plaintext_auth: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            timeout: Duration::from_secs(10),
            connections: 1,
            spin: Duration::from_micros(40),
            tls: None,
            allow_plaintext_auth: false,
        }
    }
}

impl TenureStore {
    /// A store for `url` (`tenure://host:port[,host:port…][?key=value&…]`); no
    /// connection is made until the first request.
    ///
    /// Parameters: `auth_token`, `auth_token_file`, `timeout`, `spin`,
    /// `connections` (see [`ClientOptions`]); `tls=true` to speak TLS, trusting
    /// the platform's roots or only the CAs in `ca_file=PATH` (PEM), checking
    /// the URL's host or `server_name=NAME` against the certificate; and
    /// `allow_plaintext_auth=true`. Unknown keys are refused.
    pub fn new(url: &str, opts: &OpenOptions) -> Result<Self> {
        Self::from_url(&StoreUrl::parse(url, &opts.params)?, opts)
    }

    /// [`TenureStore::new`] for a parsed URL; `opts.params` go over its
    /// settings.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] saying what is wrong with the URL or a setting.
    pub fn from_url(url: &StoreUrl, opts: &OpenOptions) -> Result<Self> {
        let url = &url.with_params(&opts.params);
        let invalid = |reason: String| url.invalid(reason);
        if url.scheme() != "tenure" {
            return Err(invalid("not a tenure:// URL".into()));
        }
        if url.user().is_some() {
            return Err(invalid(
                "credentials in the URL are not supported (they would show in logs): use auth_token_file= \
                 or the TENURE_AUTH_TOKEN environment variable"
                    .into(),
            ));
        }
        if !url.path_str("path")?.chars().all(|c| c == '/') {
            return Err(invalid("a tenure:// URL has no path: tenure://host:port[,host:port…]".into()));
        }
        let mut copts = ClientOptions::default();
        url.retired("timeout_ms", |v| format!("timeout={v}ms"))?;
        url.retired("spin_us", |v| format!("spin={v}us"))?;
        let tls = url.flag("tls")?.unwrap_or(false);
        let ca_file = url.path_option("ca_file")?;
        let server_name = url.string("server_name");
        copts.allow_plaintext_auth = url.flag("allow_plaintext_auth")?.unwrap_or(false);
        copts.auth_token = url.string("auth_token").map(|t| t.as_bytes().to_vec());
        if let Some(path) = url.path_option("auth_token_file")? {
            let bytes = tenure_core::limits::read_small_file(&path, MAX_TOKEN_FILE)
                .map_err(|e| invalid(format!("auth_token_file={}: {e}", path.display())))?;
            copts.auth_token = Some(bytes.trim_ascii().to_vec());
        }
        copts.timeout = url.duration("timeout", Duration::from_millis(1)..=MAX_DURATION)?.unwrap_or(copts.timeout);
        copts.spin = url.duration("spin", Duration::ZERO..=MAX_SPIN)?.unwrap_or(copts.spin);
        if let Some(n) = url.count("connections", 1..=MAX_CONNECTIONS as u64)? {
            copts.connections = n as usize;
        }
        url.finish()?;
        if tls {
            let tls = ClientTls::new(ca_file.as_deref(), server_name).map_err(|e| invalid(e.to_string()))?;
            copts.tls = Some(tls);
        } else if ca_file.is_some() || server_name.is_some() {
            return Err(invalid("ca_file and server_name are TLS settings: add tls=true".into()));
        }
        if copts.auth_token.is_none()
            && let Ok(t) = std::env::var("TENURE_AUTH_TOKEN")
            && !t.is_empty()
        {
            copts.auth_token = Some(t.into_bytes());
        }
        if url.hosts().is_empty() {
            return Err(invalid("no server: expected tenure://host:port[,host:port…]".into()));
        }
        let mut endpoints = Vec::new();
        for host in url.hosts() {
            if host.port.is_none() {
                return Err(invalid(format!("{:?} is not host:port", host.host)));
            }
            let addr = host.to_string();
            if endpoints.iter().any(|e: &Endpoint| e.addr == addr) {
                return Err(invalid(format!("{addr} is listed twice")));
            }
            endpoints.push(Endpoint {
                addr,
                id: parking_lot::Mutex::new(None),
                slots: (0..copts.connections).map(|_| parking_lot::Mutex::new(None)).collect(),
                connecting: (0..copts.connections).map(|_| tokio::sync::Mutex::new(())).collect(),
                next: AtomicUsize::new(0),
                info: parking_lot::Mutex::new(None),
            });
        }
        let hosts = url.hosts().iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        Ok(Self {
            url: format!("tenure://{hosts}"),
            clock: opts.clock.clone(),
            endpoints,
            opts: copts,
            placement: std::sync::OnceLock::new(),
            learning: tokio::sync::Mutex::new(()),
        })
    }
}
