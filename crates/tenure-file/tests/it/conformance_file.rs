//! The conformance suite on the file store, in a fresh temporary directory.

use std::sync::Arc;

use async_trait::async_trait;
use tenure_conformance::{Harness, Time, cas_options, conformance_tests};
use tenure_core::{Backend, CasStore, Clock, LeaseStore, ManualClock};
use tenure_file::FileBackend;

struct Files {
    clock: ManualClock,
    dir: tempfile::TempDir,
}

impl Files {
    fn backend(&self) -> FileBackend {
        FileBackend::new(self.dir.path())
    }
}

#[async_trait]
impl Harness for Files {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(CasStore::new(Arc::new(self.backend()), self.clock.shared(), cas_options()))
    }
    fn time(&self) -> Time {
        Time::Manual(self.clock.clone())
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(self.backend()))
    }
    /// Writes the damaged bytes as the newest version file, as a torn write on a
    /// disk without fsync, or a foreign program, would leave it.
    async fn corrupt(&self, name: &str, bytes: &[u8]) -> bool {
        let dir = self.dir.path().join(name);
        let newest = std::fs::read_dir(&dir)
            .expect("lease dir")
            .flatten()
            .filter_map(|e| {
                e.file_name().to_str().and_then(|n| n.strip_prefix('~')).and_then(|d| d.parse::<u64>().ok())
            })
            .max()
            .unwrap_or(0);
        let path = dir.join(format!("~{:020}", newest + 1));
        std::fs::write(&path, bytes).expect("write corrupt version");
        // The store's clock is the harness clock: stamp the file with it.
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.clock.wall_ms());
        std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(now)).expect("set mtime");
        true
    }
}

async fn files() -> Option<Files> {
    Some(Files { clock: ManualClock::new(), dir: tempfile::tempdir().expect("tempdir") })
}

conformance_tests!(files);
