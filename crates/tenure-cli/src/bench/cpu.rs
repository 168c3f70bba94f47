//! CPU per cycle: the server's and the load generator's own.
//!
//! A target that runs on a server says how much CPU that server has used so
//! far ([`super::Target::server_cpu`]); the bench reads it, and its own
//! ([`own_seconds`]), when the measured phase starts and when it ends, and
//! divides each difference by the cycles of that phase. Where it comes from:
//! - `tenure serve`, etcd: `process_cpu_seconds_total` of their Prometheus
//!   `/metrics` ([`prometheus_seconds`]); `tenure://` targets read the URL
//!   given with `--server-metrics`, etcd ones `http://ENDPOINT/metrics` of
//!   every endpoint, summed (etcd serves it on its client port);
//! - Redis: `used_cpu_sys` + `used_cpu_user` of `INFO cpu` ([`redis_info_seconds`]).
//!
//! Both are whole-process figures: a server that others use at the same time
//! counts their work too.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// More CPU seconds than a process can have used (three centuries of one core):
/// a figure above it is garbage, not a measurement.
const MAX_CPU_SECONDS: f64 = 1e10;

/// The most of a `/metrics` answer read.
const MAX_METRICS_BYTES: u64 = 8 << 20;

/// This process's CPU time so far, user + system, every thread.
pub(crate) fn own_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// A CPU-seconds figure as read: a finite number from zero to [`MAX_CPU_SECONDS`].
fn seconds(text: &str, what: &str) -> Result<f64> {
    let v: f64 = text.trim().parse().with_context(|| format!("{what}: {text:?} is not a number"))?;
    ensure!((0.0..=MAX_CPU_SECONDS).contains(&v), "{what}: {text:?} is not a number of CPU seconds");
    Ok(v)
}

/// `process_cpu_seconds_total` of a Prometheus text exposition: its one
/// sample (labels allowed, a timestamp after the value allowed).
pub(crate) fn parse_prometheus(text: &str) -> Result<f64> {
    const NAME: &str = "process_cpu_seconds_total";
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(NAME) else { continue };
        // `NAME 1.5`, `NAME{label="…"} 1.5`; not `NAME_other 1.5`.
        let rest = match rest.chars().next() {
            Some('{') => rest.split_once('}').map(|(_, v)| v).context("process_cpu_seconds_total: unclosed labels")?,
            Some(' ' | '\t') => rest,
            _ => continue,
        };
        let value = rest.split_whitespace().next().context("process_cpu_seconds_total: no value")?;
        ensure!(found.is_none(), "process_cpu_seconds_total: more than one sample");
        found = Some(seconds(value, NAME)?);
    }
    found.context("no process_cpu_seconds_total sample in the metrics")
}

/// `used_cpu_sys` + `used_cpu_user` of Redis's `INFO cpu` answer.
pub(crate) fn parse_redis_info(text: &str) -> Result<f64> {
    let field = |name: &str| -> Result<f64> {
        let value = text
            .lines()
            .find_map(|l| l.trim_end_matches('\r').strip_prefix(name)?.strip_prefix(':'))
            .with_context(|| format!("no {name} in INFO cpu"))?;
        seconds(value, name)
    };
    Ok(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// The summed `process_cpu_seconds_total` of every URL.
pub(crate) async fn prometheus_seconds(urls: &[String]) -> Result<f64> {
    let mut sum = 0.0;
    for url in urls {
        let body = http_get(url).await.with_context(|| format!("reading {url}"))?;
        sum += parse_prometheus(&body).with_context(|| format!("in {url}"))?;
    }
    Ok(sum)
}

/// The server CPU of a Redis server, from `INFO cpu`.
pub(crate) async fn redis_info_seconds(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.context("redis INFO cpu")?;
    parse_redis_info(&info)
}

/// Checks a `--server-metrics` URL: `http://host:port/path`.
pub(crate) fn metrics_url(s: &str) -> Result<String, String> {
    split_url(s).map(|_| s.to_string()).map_err(|e| format!("{e:#}"))
}

/// `http://host:port/path` → (`host:port`, `/path`).
fn split_url(url: &str) -> Result<(&str, &str)> {
    let rest = url.strip_prefix("http://").context("expected an http://host:port/path URL (no https)")?;
    let (host, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    ensure!(
        !host.is_empty() && !host.contains('@') && !path.contains(char::is_whitespace),
        "expected an http://host:port/path URL, got {url:?}"
    );
    Ok((host, path))
}

/// A plain HTTP/1.0 GET (the body ends when the server closes): all a
/// `/metrics` page needs, bounded in time and size.
async fn http_get(url: &str) -> Result<String> {
    let (host, path) = split_url(url)?;
    let get = async {
        let mut conn = tokio::net::TcpStream::connect(host).await?;
        conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes()).await?;
        let mut answer = Vec::new();
        conn.take(MAX_METRICS_BYTES).read_to_end(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), get).await.context("no answer within 5s")??;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").context("not an HTTP answer")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/1.") || status.split_whitespace().nth(1) != Some("200") {
        bail!("answered {status:?}");
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_cpu_is_the_one_sample_of_the_process_gauge() {
        let text = "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
                    # TYPE process_cpu_seconds_total counter\n\
                    process_cpu_seconds_total_other 99\n\
                    process_cpu_seconds_total 19.75\n\
                    tenure_grants_total 3\n";
        assert_eq!(parse_prometheus(text).expect("a sample"), 19.75);
        assert_eq!(parse_prometheus("process_cpu_seconds_total{pid=\"1\"} 2.5 1700000000\n").expect("labels"), 2.5);
        assert_eq!(parse_prometheus("process_cpu_seconds_total 1e3").expect("exponent"), 1000.0);
    }

    #[test]
    fn hostile_prometheus_text_is_refused_not_believed() {
        for text in [
            "",
            "garbage\n\u{0}\u{1}",
            "# TYPE process_cpu_seconds_total counter\n",
            "process_cpu_seconds_total\n",
            "process_cpu_seconds_total \n",
            "process_cpu_seconds_total{pid=\"1\" 2\n",
            "process_cpu_seconds_total abc\n",
            "process_cpu_seconds_total -1\n",
            "process_cpu_seconds_total NaN\n",
            "process_cpu_seconds_total +Inf\n",
            "process_cpu_seconds_total 1e300\n",
            "process_cpu_seconds_total 1\nprocess_cpu_seconds_total 2\n",
        ] {
            assert!(parse_prometheus(text).is_err(), "{text:?} was believed");
        }
    }

    #[test]
    fn redis_cpu_is_system_plus_user() {
        let info = "# CPU\r\nused_cpu_sys:0.782437\r\nused_cpu_user:0.818916\r\nused_cpu_sys_children:5.0\r\n\
                    used_cpu_user_children:7.0\r\nused_cpu_sys_main_thread:0.781361\r\n";
        let s = parse_redis_info(info).expect("cpu");
        assert!((s - 1.601353).abs() < 1e-9, "{s}");
    }

    #[test]
    fn hostile_redis_info_is_refused_not_believed() {
        for info in [
            "",
            "garbage",
            "used_cpu_sys:1.0\r\n",
            "used_cpu_user:1.0\r\n",
            "used_cpu_sys_children:1\r\nused_cpu_user_children:1\r\n",
            "used_cpu_sys:x\r\nused_cpu_user:1\r\n",
            "used_cpu_sys:-3\r\nused_cpu_user:1\r\n",
            "used_cpu_sys:inf\r\nused_cpu_user:1\r\n",
            "used_cpu_sys:1e400\r\nused_cpu_user:1\r\n",
            "used_cpu_sys:99999999999999\r\nused_cpu_user:1\r\n",
        ] {
            assert!(parse_redis_info(info).is_err(), "{info:?} was believed");
        }
    }

    #[test]
    fn metrics_urls_are_plain_http_with_a_host() {
        assert_eq!(split_url("http://127.0.0.1:7901/metrics").expect("url"), ("127.0.0.1:7901", "/metrics"));
        assert_eq!(split_url("http://localhost:80").expect("url"), ("localhost:80", "/"));
        for bad in ["https://h:1/metrics", "h:1/metrics", "http:///metrics", "http://u@h:1/", "http://h:1/a b"] {
            assert!(split_url(bad).is_err(), "{bad} was taken");
        }
    }
}
