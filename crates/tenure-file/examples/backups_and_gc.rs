//! A backup repository's lease (`docs/design/backup-lease-file.md`): any number
//! of backups may write to a repository at once,
//! but garbage collection must run alone. Backups take a shared lease; the
//! collector an exclusive one, which it gets as soon as the backups are done.
//!
//! Run: `cargo run -p tenure-file --example backups_and_gc`

use std::time::{Duration, Instant};

use tenure_core::{Client, LeaseOptions, OpenOptions, StoreUrl};

#[tokio::main]
async fn main() -> tenure_core::Result<()> {
    // A fresh directory: the store makes it only when asked (a missing root is
    // most likely an unmounted file system or a typo).
    let dir = std::env::temp_dir().join(format!("tenure-example-{}", tenure_core::random_nonce()));
    let opts = OpenOptions::default().create();
    let store = tenure_file::open(&StoreUrl::parse(&dir.to_string_lossy(), &opts.params)?, &opts).await?;
    let ttl = Duration::from_secs(5);
    let start = Instant::now();

    let mut backups = Vec::new();
    for b in 0..3 {
        let client = Client::new(store.clone());
        backups.push(tokio::spawn(async move {
            let lease = client.acquire("repo", &LeaseOptions::shared().with_ttl(ttl)).await?;
            println!("{:>5}ms backup {b} writing (shared, token {})", start.elapsed().as_millis(), lease.token());
            tokio::time::sleep(Duration::from_millis(200 * (b + 1))).await;
            println!("{:>5}ms backup {b} done", start.elapsed().as_millis());
            lease.release().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let gc = Client::new(store.clone());
    let lease =
        gc.acquire("repo", &LeaseOptions::exclusive().with_ttl(ttl).with_timeout(Duration::from_secs(30))).await?;
    println!("{:>5}ms gc running alone (exclusive, token {})", start.elapsed().as_millis(), lease.token());
    for b in backups {
        b.await.map_err(|e| tenure_core::Error::store("example", "joining a backup", e))??;
    }
    lease.release().await?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
