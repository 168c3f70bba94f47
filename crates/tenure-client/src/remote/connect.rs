//! Reaching the servers: connections made on first use and again when lost,
//! each greeted with a hello, and the servers' identities, by which names are
//! placed.

use super::*;

impl TenureStore {
    /// The servers' identities in list order (`None` for a store of one
    /// server, which places nothing), learned from every server of the list
    /// before the first name is placed. A server that cannot be reached then
    /// makes this an error: the name could be its, and is not placed on a
    /// guess. Two addresses of one server are refused, naming both.
    pub(super) async fn placement(&self) -> Result<Option<&[Arc<str>]>> {
        if self.endpoints.len() == 1 {
            return Ok(None);
        }
        if let Some(ids) = self.placement.get() {
            return Ok(Some(ids));
        }
        let _learning = self.learning.lock().await;
        if let Some(ids) = self.placement.get() {
            return Ok(Some(ids));
        }
        let connected = join_all(self.endpoints.iter().map(|e| self.conn(e))).await;
        let op = "placing names (every server of the list must say its identity first; none is placed on a guess)";
        let mut ids: Vec<Arc<str>> = Vec::with_capacity(self.endpoints.len());
        for (i, (e, c)) in self.endpoints.iter().zip(connected).enumerate() {
            if let Err(err) = c {
                return Err(match err {
                    // Its operation ("connecting to ADDR") and cause, under this one.
                    Error::Store { op: inner, source, .. } => Error::store(&self.url, op, format!("{inner}: {source}")),
                    other => other,
                });
            }
            let id =
                e.id.lock().clone().ok_or_else(|| Error::store(&self.url, op, format!("{}: no identity", e.addr)))?;
            if let Some(j) = ids.iter().position(|other| *other == id) {
                return Err(Error::InvalidStore {
                    url: self.url.clone(),
                    reason: format!(
                        "{} and {} are one server (identity {id}): list each server once",
                        self.endpoints[j].addr, self.endpoints[i].addr
                    ),
                });
            }
            ids.push(id);
        }
        Ok(Some(self.placement.get_or_init(|| ids.into())))
    }

    /// A connection to `server` for acquisitions: in a store of several
    /// servers, one that has told its server the list's identities, so that
    /// the server checks each name asked for is placed on it.
    pub(super) async fn placed_conn(&self, server: usize) -> Result<Arc<Conn>> {
        let e = &self.endpoints[server];
        let conn = self.conn(e).await?;
        if let Some(ids) = self.placement.get()
            && !conn.placed.load(Ordering::Acquire)
        {
            let op = "telling the server the server list";
            let list = Request::Servers(ids.iter().map(|id| &**id).collect());
            let (_, body) = conn.call_raw(&list).await.map_err(|m| Error::store(&self.url, op, m))?;
            match self.decode_in(op, &body)? {
                ResponseIn::Done => conn.placed.store(true, Ordering::Release),
                other => return Err(self.unexpected(op, &other)),
            }
        }
        Ok(conn)
    }

    /// Asks the server on a new connection `conn` (which said hello with
    /// `version`) for its identity, and checks it is the one it said before: a
    /// server whose identity changed may own other names now.
    pub(super) async fn identify(&self, e: &Endpoint, conn: &Conn, version: u16, op: &str) -> Result<()> {
        if version < wire::IDENTITY_VERSION {
            return Err(Error::unsupported(
                &self.url,
                format!(
                    "{op}: the server speaks protocol {version}, which does not say the server's identity, and a \
                     list of several servers places names by identity (protocol {}): upgrade the servers first",
                    wire::IDENTITY_VERSION
                ),
            ));
        }
        let (_, body) = conn.call_raw(&Request::Identify).await.map_err(|m| Error::store(&self.url, op, m))?;
        let id = match self.decode_in(op, &body)? {
            ResponseIn::Identity(id) => id,
            other => return Err(self.unexpected(op, &other)),
        };
        wire::check_server_id(&id).map_err(|m| self.hostile(op, m))?;
        let mut known = e.id.lock();
        match known.as_deref() {
            Some(before) if *before != *id => Err(Error::unsupported(
                &self.url,
                format!(
                    "{op}: the server there is now {id}, and was {before}: names may have moved between servers, \
                     so this store places none on it; open the store anew once every lease of the old list has \
                     expired (see the README on changing the server list)"
                ),
            )),
            Some(_) => Ok(()),
            None => {
                *known = Some(id.into());
                Ok(())
            }
        }
    }

    /// What server `index` said in its hello (connecting if needed).
    pub async fn server_info(&self, index: usize) -> Result<ServerInfo> {
        let e = self.endpoints.get(index).ok_or_else(|| Error::unsupported(&self.url, "no such server"))?;
        self.conn(e).await?;
        e.info.lock().ok_or_else(|| Error::store(&self.url, "hello", "no hello answer"))
    }

    /// Server time minus this store's wall clock at the last answer of server
    /// `index`, in µs (every answer carries the server's time; the network delay
    /// of the answer is included).
    pub fn skew_us(&self, index: usize) -> Option<i64> {
        let e = self.endpoints.get(index)?;
        e.slots.iter().find_map(|s| s.lock().as_ref().map(|c| c.skew_us()))
    }

    pub(super) async fn conn(&self, e: &Endpoint) -> Result<Arc<Conn>> {
        // One connection (the default): no shared counter to bump on every call.
        let i = match e.slots.len() {
            1 => 0,
            n => e.next.fetch_add(1, Ordering::Relaxed) % n,
        };
        if let Some(c) = e.slots[i].lock().as_ref().filter(|c| !c.is_dead()) {
            return Ok(c.clone());
        }
        // Connecting is rare, and its future large (resolving, connecting, the
        // TLS handshake, the hello): boxed, it does not make the future of
        // every call that might connect that large too (which would allocate
        // and copy it on each call).
        Box::pin(self.reconnect(e, i)).await
    }

    /// Connects slot `i` of `e` (unless another caller just did).
    pub(super) async fn reconnect(&self, e: &Endpoint, i: usize) -> Result<Arc<Conn>> {
        let _connecting = e.connecting[i].lock().await;
        if let Some(c) = e.slots[i].lock().as_ref().filter(|c| !c.is_dead()) {
            return Ok(c.clone());
        }
        let op = format!("connecting to {}", e.addr);
        let hello = Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: self.opts.auth_token.as_deref() };
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        let (conn, answer) = loop {
            // Connecting and the TLS handshake: one deadline for both.
            let socket = match tokio::time::timeout(self.opts.timeout, self.connect(e, &op)).await {
                Ok(socket) => socket?,
                Err(_) if self.opts.tls.is_some() => {
                    let why = format!(
                        "no TLS connection within {} (is the server up, and serving TLS on this port?)",
                        tenure_core::human_duration(self.opts.timeout)
                    );
                    return Err(Error::store(&self.url, op, why));
                }
                Err(_) => return Err(Error::store(&self.url, op, "timed out")),
            };
            let conn = Arc::new(Conn::start(socket, self.opts.timeout, self.opts.spin, self.clock.clone()));
            let hello_wait = HELLO_WAIT.min(self.opts.timeout);
            let Ok(answer) = tokio::time::timeout(hello_wait, conn.call_raw(&hello)).await else {
                // Transient all the same: a lease server too busy to answer in
                // time would answer the next attempt.
                let why = format!(
                    "no answer to the hello within {}: not a tenure lease server (a server of another kind, or a \
                     silent listener), or one too busy to answer",
                    tenure_core::human_duration(hello_wait)
                );
                return Err(Error::store(&self.url, op, why));
            };
            match answer {
                Ok((_, body)) => match wire::decode::<Response>(&body) {
                    Ok(answer) => break (conn, answer),
                    // A frame, by chance, but no answer of ours.
                    Err(m) => {
                        let why =
                            format!("{op}: its answer to the hello is undecodable ({m}): not a tenure lease server");
                        return Err(Error::unsupported(&self.url, why));
                    }
                },
                // The server refused this client before its hello, for good: a
                // plaintext client at a TLS server, say.
                Err(_)
                    if let Some((code @ (ErrorCode::Version | ErrorCode::Unauthorized), message)) =
                        conn.last_word() =>
                {
                    return Err(self.server_error(&op, code, message));
                }
                // Something other than a lease server is listening there: a
                // mistake in the URL, which no retry mends.
                Err(m) if conn.not_a_server() => return Err(Error::unsupported(&self.url, format!("{op}: {m}"))),
                // Closed before the hello was answered, and quickly: a server
                // crowded by connections that never say hello closes its oldest
                // ones, and a connection that waited too long to be read may be
                // one. A fresh connection is the newest again.
                Err(_) if attempt + 1 < HELLO_ATTEMPTS && started.elapsed() < self.opts.timeout / 2 => attempt += 1,
                Err(m) => return Err(Error::store(&self.url, op, m)),
            }
        };
        match answer {
            Response::Hello { version, public_key, max_lease_ms, quarantine_left_ms: _, started_us } => {
                if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
                    let why = format!(
                        "the server speaks protocol {version}, this client {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
                    );
                    return Err(Error::unsupported(&self.url, why));
                }
                wire::check_max_lease(max_lease_ms).map_err(|m| self.hostile(&op, m))?;
                let max_lease = Duration::from_millis(max_lease_ms);
                if self.endpoints.len() > 1 {
                    self.identify(e, &conn, version, &op).await?;
                }
                *e.info.lock() = Some(ServerInfo { public_key, max_lease, started_us, protocol: version });
            }
            Response::Error { code, message } => return Err(self.server_error(&op, code, message)),
            other => return Err(Error::store(&self.url, op, format!("hello: {}", unexpected_answer(&other)))),
        }
        *e.slots[i].lock() = Some(conn.clone());
        Ok(conn)
    }

    /// A socket to server `e`, TLS if the store speaks it. The auth token is
    /// checked here, before anything is sent: without TLS it goes only to this
    /// machine (the addresses the host resolves to, of which only loopback ones
    /// are used), unless `allow_plaintext_auth`.
    pub(super) async fn connect(&self, e: &Endpoint, op: &str) -> Result<Socket> {
        let mut addrs: Vec<std::net::SocketAddr> =
            tokio::net::lookup_host(&e.addr).await.map_err(|err| Error::store(&self.url, op, err))?.collect();
        let guard_token = self.opts.tls.is_none() && self.opts.auth_token.is_some() && !self.opts.allow_plaintext_auth;
        if guard_token {
            let all = addrs.len();
            addrs.retain(|a| a.ip().to_canonical().is_loopback());
            if addrs.is_empty() {
                let to = if all == 1 { "an address" } else { "addresses" };
                return Err(Error::InvalidStore {
                    url: self.url.clone(),
                    reason: format!(
                        "refusing to send the auth token in plaintext to {}, {to} not on this machine: connect \
                         with tls=true (the server needs --tls-cert and --tls-key), or add \
                         allow_plaintext_auth=true to send it unencrypted anyway",
                        e.addr
                    ),
                });
            }
        }
        let tcp = tokio::net::TcpStream::connect(&addrs[..]).await.map_err(|err| Error::store(&self.url, op, err))?;
        // Requests are small writes, and so are a handshake's flights.
        let _ = tcp.set_nodelay(true);
        crate::keepalive(&tcp);
        let Some(tls) = &self.opts.tls else { return Ok(Socket::Plain(tcp)) };
        match tls.connect(&e.addr, tcp).await {
            Ok(s) => Ok(Socket::Tls(Box::new(s))),
            Err(HandshakeError::Permanent(why)) => Err(Error::unsupported(&self.url, format!("{op}: {why}"))),
            Err(HandshakeError::Transient(why)) => Err(Error::store(&self.url, op, why)),
        }
    }
}
