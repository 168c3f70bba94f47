//! `GET /metrics`: the server's counters in Prometheus text format.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::server::Shared;

/// Prometheus text format being written.
struct Metrics(String);

impl Metrics {
    /// One metric: HELP, TYPE and the sample.
    fn add(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.0, "# HELP tenure_{name} {help}\n# TYPE tenure_{name} {kind}\ntenure_{name} {value}");
    }
}

pub(super) async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let core = &shared.core;
    let s = core.stats();
    let c = &shared.conns;
    let (live, retired) = core.counts();
    let mut out = String::with_capacity(4096);
    let _ = writeln!(
        out,
        "# HELP tenure_build_info The running tenure version.\n# TYPE tenure_build_info gauge\n\
         tenure_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let mut m = Metrics(out);
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    m.add("leases_live", "gauge", "Lease records with a live grant or reservation.", n(live));
    m.add("leases_retired", "gauge", "Released records kept for their watermark and metadata.", n(retired));
    m.add("grants_total", "counter", "Grants, upgrades included.", load(&s.grants));
    m.add("busy_total", "counter", "Acquisitions refused because the lease was held.", load(&s.busy));
    m.add("waiters", "gauge", "Acquisitions waiting in the lease queues now.", n(core.waiting()));
    m.add("waits_total", "counter", "Acquisitions that queued to wait for their lease.", load(&s.parked));
    m.add("handovers_total", "counter", "Grants handed to a queued waiter when the lease freed.", load(&s.handovers));
    m.add("expired_takeovers_total", "counter", "Grants that took over an expired grant.", load(&s.expired_takeovers));
    m.add("renewals_total", "counter", "Successful renewals.", load(&s.renewals));
    m.add("renewals_lost_total", "counter", "Renewals of grants no longer held.", load(&s.renewals_lost));
    m.add("releases_total", "counter", "Releases that ended a grant.", load(&s.releases));
    m.add("breaks_total", "counter", "Leases broken by an administrator.", load(&s.breaks));
    m.add("tentative_total", "counter", "Tentative reservations granted.", load(&s.tentative));
    m.add("tentative_broken_total", "counter", "Reservations broken by a full request.", load(&s.tentative_broken));
    m.add("upgrades_failed_total", "counter", "Upgrades of broken or expired reservations.", load(&s.upgrades_failed));
    m.add("quarantined_total", "counter", "Requests refused during the restart quarantine.", load(&s.quarantined));
    m.add("records_dropped_total", "counter", "Retired records dropped, oldest first.", load(&s.dropped));
    m.add(
        "quarantine_remaining_seconds",
        "gauge",
        "Time left in the restart quarantine.",
        core.quarantine_left().as_secs_f64(),
    );
    m.add("connections_open", "gauge", "Open client connections, before and after their hello.", load(&c.open));
    m.add("connections_clients", "gauge", "Connections past their hello.", n(shared.clients_open()));
    m.add("connections_pre_hello", "gauge", "Connections that have not said hello yet.", n(shared.pre_hello_open()));
    m.add(
        "connections_evicted_total",
        "counter",
        "Connections closed before their hello to make room for newer ones.",
        shared.pre_hello_evicted(),
    );
    m.add("connections_timed_out_total", "counter", "Connections closed for a deadline.", load(&c.timed_out));
    m.add("connections_accepted_total", "counter", "Accepted client connections.", load(&c.accepted));
    m.add("connections_rejected_total", "counter", "Connections refused or closed for an error.", load(&c.rejected));
    m.add("requests_total", "counter", "Requests handled.", load(&c.requests));
    m.add("signatures_total", "counter", "Witness batch signatures.", load(&c.signatures));
    m.add("witnesses_total", "counter", "Witnesses signed.", load(&c.witnesses));
    m.add(
        "start_time_seconds",
        "gauge",
        "When this incarnation started (unix seconds).",
        core.started_us() / 1_000_000,
    );
    // The standard process gauge (no `tenure_` prefix), as Prometheus client
    // libraries and etcd name it: user + system CPU of every thread, so a
    // benchmark can divide it by the cycles it drove.
    let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let _ = writeln!(
        m.0,
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
         # TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {}.{:09}",
        cpu.tv_sec, cpu.tv_nsec
    );
    c.latency.render(&mut m.0);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.0)
}
