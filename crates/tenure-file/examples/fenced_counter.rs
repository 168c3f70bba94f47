//! Four workers increment a counter in a directory, each increment under an
//! exclusive lease and written through a fenced record, so that even a worker
//! that lost its lease without noticing could not overwrite a newer value.
//!
//! Run: `cargo run -p tenure-file --example fenced_counter`

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tenure_core::{Backend, CasOptions, CasStore, Client, FencedRecord, LeaseOptions, SystemClock};
use tenure_file::FileBackend;

#[tokio::main]
async fn main() -> tenure_core::Result<()> {
    let dir = std::env::temp_dir().join(format!("tenure-example-{}", tenure_core::random_nonce()));
    let files: Arc<dyn Backend> = Arc::new(FileBackend::new(&dir).with_create(true));
    let counter = FencedRecord::new(files.clone(), "counter")?;
    let opts = LeaseOptions::exclusive().with_ttl(Duration::from_secs(5)).with_timeout(Duration::from_secs(30));

    let mut workers = Vec::new();
    for w in 0..4 {
        // Each worker is its own holder, as if it ran on its own machine.
        let store = Arc::new(CasStore::new(files.clone(), SystemClock::shared(), CasOptions::default()));
        let (client, counter, opts) = (Client::new(store), counter.clone(), opts.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..10 {
                let lease = client.acquire("counter", &opts).await?;
                let n = counter.read().await?.map_or(0, |f| String::from_utf8_lossy(&f.value).parse().unwrap_or(0));
                counter.write(lease.token(), Bytes::from((n + 1).to_string())).await?;
                lease.release().await?;
            }
            println!("worker {w} done");
            tenure_core::Result::Ok(())
        }));
    }
    for w in workers {
        w.await.map_err(|e| tenure_core::Error::store("example", "joining a worker", e))??;
    }
    let last = counter.read().await?.expect("written");
    println!("counter = {} (last written under fencing token {})", String::from_utf8_lossy(&last.value), last.token);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
