//! Listings of any size, over real sockets: a server holding more than 100,000
//! leases (whose names alone are more than the largest frame) lists them all to
//! a `tenure://` client, page by page, and shows them a bounded page at a time
//! on its HTTP status page and `/status.json`; a normal client is served
//! meanwhile.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::abuse::{http_get, probe};
use tenure_core::{Holder, LeaseStore, ManualClock, Mode};
use tenure_server::http::pages::MAX_PAGE_BYTES;
use tenure_server::http::{HttpOptions, JSON_LIMIT, PAGE_LIMIT};
use tenure_server::leases::{Acquired, Ask};
use tenure_server::wire::MAX_RESPONSE;

const LEASES: usize = 100_001;

/// A lease name of about 100 bytes: 100,001 of them make about 10 MB of names.
fn name(i: usize) -> String {
    format!("bulk/{i:06}/{}/{}", "a".repeat(60), "b".repeat(24))
}

/// Fills the server's table directly (a wire round trip each would only be slower).
fn fill(core: &tenure_server::Core) {
    let holder = Arc::new(Holder::current());
    let names: Vec<String> = (0..LEASES).map(name).collect();
    for chunk in names.chunks(512) {
        let asks: Vec<Ask<'_>> = chunk
            .iter()
            .map(|n| Ask { name: n, mode: Mode::Exclusive, ttl_ms: 10_000, holder: &holder, retake: false, meta: None })
            .collect();
        assert!(matches!(core.acquire(&asks, false), Ok(Acquired::Granted(_))));
    }
}

fn encode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { char::from(b).to_string() } else { format!("%{b:02X}") }).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_leases_are_listed_page_by_page_while_clients_are_served() {
    let clock = ManualClock::new();
    let srv = common::start_open(&clock).await;
    fill(&srv.shared().core);
    let total_bytes: usize = (0..LEASES).map(|i| name(i).len()).sum();
    assert!(total_bytes > MAX_RESPONSE, "the names alone ({total_bytes} bytes) exceed any one frame");
    let prober = probe(srv.addr(), &clock, "probe");

    let store = common::store(&[&srv], &clock);
    let listed = tokio::time::timeout(Duration::from_secs(120), store.list("bulk/"))
        .await
        .expect("listed within two minutes")
        .expect("a listing of every lease");
    assert_eq!(listed.len(), LEASES);
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "in order, without repeats");
    assert_eq!(listed[0].as_str(), name(0));
    assert_eq!(listed[LEASES - 1].as_str(), name(LEASES - 1));
    assert!(prober.finish().await >= 1, "the normal client was served during the listing");
}

/// Serves the HTTP routes of `srv` on a loopback port.
async fn site(srv: &tenure_server::server::RunningServer) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = listener.local_addr().expect("addr");
    let opts = HttpOptions::default();
    (http, tokio::spawn(tenure_server::http::serve(listener, srv.shared().clone(), opts, std::future::pending())))
}

/// `/status.json` with these query parameters, checked to be a bounded page.
async fn json_page(http: std::net::SocketAddr, query: &str) -> serde_json::Value {
    let (head, body) = http_get(http, &format!("/status.json?{query}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.len() <= MAX_PAGE_BYTES + 64 * 1024, "a page is bounded: {} bytes", body.len());
    serde_json::from_str(&body).expect("json")
}

fn names_of(page: &serde_json::Value) -> Vec<String> {
    let leases = page["leases"].as_array().expect("leases");
    leases.iter().map(|l| l["name"].as_str().expect("a name").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_pages_of_a_hundred_thousand_leases_are_bounded_and_say_what_follows() {
    let clock = ManualClock::new();
    let srv = common::start_open(&clock).await;
    fill(&srv.shared().core);
    let (http, site) = site(&srv).await;

    // The HTML page: a page of leases, and how many more.
    let (head, page) = http_get(http, "/").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(page.len() <= MAX_PAGE_BYTES + 64 * 1024, "the page is bounded: {} bytes", page.len());
    assert!(page.contains(&name(0)) && page.contains(&name(PAGE_LIMIT - 1)), "the first leases, in order");
    assert!(!page.contains(&name(PAGE_LIMIT)), "no more than a page of them");
    let note = format!("{} more leases not shown", LEASES - PAGE_LIMIT);
    assert!(page.contains(&note) && page.contains("href=\"/?after="), "a note and a link to the next page");
    let prober = probe(srv.addr(), &clock, "probe");

    // /status.json: the first page, and where the next begins.
    let first = json_page(http, &format!("limit={JSON_LIMIT}")).await;
    let names = names_of(&first);
    assert_eq!(names.len(), JSON_LIMIT);
    assert_eq!((names[0].as_str(), names[JSON_LIMIT - 1].as_str()), (name(0).as_str(), name(JSON_LIMIT - 1).as_str()));
    assert!(first["remaining"].as_u64().is_some_and(|r| r >= (LEASES - JSON_LIMIT) as u64), "{}", first["remaining"]);
    let next = first["next"].as_str().expect("a cursor to the next page");
    let second = json_page(http, &format!("limit=3&after={}", encode(next))).await;
    assert_eq!(names_of(&second), (JSON_LIMIT..JSON_LIMIT + 3).map(name).collect::<Vec<_>>());
    // From a cursor near the end, to the end (the probe's idle leases come last).
    let near_end = format!("L{}", name(LEASES - 3));
    let last = json_page(http, &format!("limit={JSON_LIMIT}&after={}", encode(&near_end))).await;
    assert_eq!(&names_of(&last)[..2], &[name(LEASES - 2), name(LEASES - 1)]);
    assert!(last["next"].is_null() && last["remaining"] == 0, "the last page says nothing follows");
    assert!(prober.finish().await >= 1, "the normal client was served meanwhile");
    site.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_the_status_json_cursor_shows_every_lease_once() {
    let clock = ManualClock::new();
    let srv = common::start_open(&clock).await;
    let holder = Arc::new(Holder::current());
    let names: Vec<String> = (0..2_500).map(|i| format!("walk/{i:05}")).collect();
    for (i, n) in names.iter().enumerate() {
        let ask = Ask { name: n, mode: Mode::Exclusive, ttl_ms: 10_000, holder: &holder, retake: false, meta: None };
        let Ok(Acquired::Granted(g)) = srv.shared().core.acquire(&[ask], false) else { panic!("not granted") };
        // Every other one released: live leases come first, then idle ones.
        if i % 2 == 1 {
            assert!(srv.shared().core.release(n, g[0].token, None, &holder.nonce, false, None, None).expect("release"));
        }
    }
    let (http, site) = site(&srv).await;
    let mut seen = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..100 {
        let query = match &next {
            None => "limit=100".to_string(),
            Some(c) => format!("limit=100&after={}", encode(c)),
        };
        let page = json_page(http, &query).await;
        seen.extend(names_of(&page));
        match page["next"].as_str() {
            Some(c) => next = Some(c.to_string()),
            None => break,
        }
    }
    let live = names.iter().step_by(2).cloned();
    let idle = names.iter().skip(1).step_by(2).cloned();
    let expected: Vec<String> = live.chain(idle).collect();
    assert_eq!(seen, expected, "every lease once: live ones first, then idle ones, each by name");
    site.abort();
}
