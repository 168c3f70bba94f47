//! Bags on object storage: the shared behaviours on object_store's `InMemory`
//! and on real servers (moto and Ceph RGW for S3, Azurite for Azure Blob
//! Storage), plus damaged objects.

use crate::common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Harness, T0, options};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};
use tenure_bag::{Batch, Log, ReadOptions};
use tenure_core::{Clock, ManualClock};

/// The well-known development key of Azurite's `devstoreaccount1` (public).
const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

struct Store {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl Store {
    fn memory() -> Self {
        Self { url: "memory://bag".into(), store: Arc::new(InMemory::new()), prefix: Path::from("log") }
    }

    /// A fresh prefix on the S3-compatible server named by `var`, or `None` (with
    /// the reason printed) if it is unset.
    fn s3(var: &str) -> Option<Self> {
        let endpoint = tenure_conformance::server_from_env(var)?;
        Some(Self::open(
            "s3://tenure",
            &[
                ("aws_endpoint", endpoint),
                ("aws_access_key_id", "test".into()),
                ("aws_secret_access_key", "test".into()),
                ("aws_region", "us-east-1".into()),
                ("aws_allow_http", "true".into()),
            ],
        ))
    }

    /// A fresh prefix on Azurite (Azure Blob Storage's emulator).
    fn azurite() -> Option<Self> {
        let endpoint = tenure_conformance::server_from_env("TENURE_TEST_AZURITE")?;
        Some(Self::open(
            "az://tenure",
            &[
                ("azure_storage_account_name", "devstoreaccount1".into()),
                ("azure_storage_account_key", AZURITE_KEY.into()),
                ("azure_storage_endpoint", format!("{}/devstoreaccount1", endpoint.trim_end_matches('/'))),
                ("azure_allow_http", "true".into()),
            ],
        ))
    }

    fn open(base: &str, params: &[(&str, String)]) -> Self {
        let url = format!("{base}/bag-tests/{:016x}", rand::random::<u64>());
        let params = params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let (store, prefix) = tenure_bag::open_object_store(&url, &params).expect("open the object store");
        Self { url, store, prefix }
    }

    async fn put(&self, key: &str, bytes: &[u8]) {
        let path = Path::from(format!("{}/{key}", self.prefix));
        self.store
            .put_opts(&path, PutPayload::from(Bytes::copy_from_slice(bytes)), Default::default())
            .await
            .expect("put");
    }
}

impl Harness for Store {
    fn log(&self, clock: Arc<dyn Clock>) -> Log {
        Log::on_object_store(&self.url, self.store.clone(), self.prefix.clone(), options(clock))
    }
    async fn leave_prelock(&self, log: &Log, bucket: u64) {
        log.config_or_create().await.expect("config");
        self.put(&format!("b/{bucket:016}/prelock"), b"").await;
    }
}

macro_rules! shared {
    ($($name:ident),* $(,)?) => {
        mod memory {$(
            #[tokio::test]
            async fn $name() {
                super::common::$name(&super::Store::memory()).await;
            }
        )*}
        mod moto {$(
            #[tokio::test]
            async fn $name() {
                let Some(store) = super::Store::s3("TENURE_TEST_S3_MOTO") else { return };
                super::common::$name(&store).await;
            }
        )*}
        mod azurite {$(
            #[tokio::test]
            async fn $name() {
                let Some(store) = super::Store::azurite() else { return };
                super::common::$name(&store).await;
            }
        )*}
        mod rgw {$(
            #[tokio::test]
            async fn $name() {
                let Some(store) = super::Store::s3("TENURE_TEST_S3_RGW") else { return };
                super::common::$name(&store).await;
            }
        )*}
    };
}

common::every_behaviour!(shared);

#[tokio::test]
async fn garbage_and_truncated_batch_objects_are_skipped_and_a_bad_manifest_is_an_error() {
    let s = Store::memory();
    let clock = ManualClock::starting_at(T0);
    let log = s.log(clock.shared());
    log.writer("w").expect("writer").append(Batch::one(T0, "good")).await.expect("append");
    let frame = tenure_bag::frame::encode("x", 0, &[], &[(T0 + 1, "cut".into())]).expect("encode");
    s.put(&format!("b/{T0:016}/m/x.{:020}", 0), &frame[..frame.len() - 2]).await;
    s.put(&format!("b/{T0:016}/m/junk.{:020}", 0), b"\x00\x01garbage").await;
    let read = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(read.messages.len(), 1);
    assert!(read.ignored_bytes > 0);
    clock.advance(std::time::Duration::from_secs(3));
    log.close(T0).await.expect("close");
    assert_eq!(log.read(&ReadOptions::default()).await.expect("read").messages.len(), 1);
    s.put(&format!("b/{T0:016}/manifest"), b"tenure-bag-manifest 1\nbucket 1 1000\nend 00000000\n").await;
    assert!(matches!(log.read(&ReadOptions::default()).await, Err(tenure_core::Error::Corrupt { .. })));
}

/// `object_store` resends a PUT whose answer was lost; if the first attempt had
/// landed, the resend finds the name taken. Our own bytes there are our batch.
#[tokio::test]
async fn a_batch_object_already_there_with_our_bytes_is_our_resent_put_and_others_are_an_error() {
    let s = Store::memory();
    let clock = ManualClock::starting_at(T0);
    let log = s.log(clock.shared());
    log.config_or_create().await.expect("config");
    let frame = tenure_bag::frame::encode("w", 0, &[], &[(T0, "mine".into())]).expect("encode");
    s.put(&format!("b/{T0:016}/m/w.{:020}", 0), &frame).await;
    let out = log.writer("w").expect("writer").append(Batch::one(T0, "mine")).await.expect("a resent PUT");
    assert!(out.accepted, "{out:?}");
    assert_eq!(log.read(&ReadOptions::default()).await.expect("read").messages.len(), 1);

    let other = tenure_bag::frame::encode("v", 0, &[], &[(T0, "theirs".into())]).expect("encode");
    s.put(&format!("b/{T0:016}/m/v.{:020}", 0), &other).await;
    let err = log.writer("v").expect("writer").append(Batch::one(T0, "mine")).await.expect_err("name taken");
    assert!(err.to_string().contains("two writers share one writer id"), "{err}");
}

/// Delegates reads and lists; every write, delete or copy fails loudly.
#[derive(Debug)]
struct ReadOnly(Arc<dyn ObjectStore>);

impl std::fmt::Display for ReadOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadOnly({})", self.0)
    }
}

fn refused(what: &str) -> object_store::Error {
    object_store::Error::Generic { store: "ReadOnly", source: format!("a reader tried to {what}").into() }
}

#[async_trait::async_trait]
impl ObjectStore for ReadOnly {
    async fn put_opts(
        &self,
        _: &Path,
        _: PutPayload,
        _: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        Err(refused("put"))
    }
    async fn put_multipart_opts(
        &self,
        _: &Path,
        _: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        Err(refused("upload"))
    }
    async fn get_opts(&self, p: &Path, o: object_store::GetOptions) -> object_store::Result<object_store::GetResult> {
        self.0.get_opts(p, o).await
    }
    fn delete_stream(
        &self,
        _: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        Box::pin(futures::stream::once(async { Err(refused("delete")) }))
    }
    fn list(
        &self,
        p: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.0.list(p)
    }
    fn list_with_offset(
        &self,
        p: Option<&Path>,
        offset: &Path,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.0.list_with_offset(p, offset)
    }
    async fn list_with_delimiter(&self, p: Option<&Path>) -> object_store::Result<object_store::ListResult> {
        self.0.list_with_delimiter(p).await
    }
    async fn copy_opts(&self, _: &Path, _: &Path, _: object_store::CopyOptions) -> object_store::Result<()> {
        Err(refused("copy"))
    }
}

#[tokio::test]
async fn readers_of_an_object_store_log_never_write() {
    let s = Store::memory();
    let clock = ManualClock::starting_at(T0);
    let log = s.log(clock.shared());
    let nothing =
        Log::on_object_store(&s.url, Arc::new(ReadOnly(s.store.clone())), s.prefix.clone(), options(clock.shared()));
    assert!(nothing.read(&ReadOptions::default()).await.expect("a missing log reads as empty").messages.is_empty());
    let w = log.writer("w").expect("writer");
    w.append(Batch::one(T0, "closed")).await.expect("append");
    w.append(Batch::one(T0 + 4_000, "open")).await.expect("append");
    clock.advance(std::time::Duration::from_secs(4));
    log.close(T0).await.expect("close");
    log.compact().await.expect("compact");
    let reader =
        Log::on_object_store(&s.url, Arc::new(ReadOnly(s.store.clone())), s.prefix.clone(), options(clock.shared()));
    for opts in [ReadOptions::default(), ReadOptions { include_late: true, skip_snapshots: true, ..Default::default() }]
    {
        let read = reader.read(&opts).await.expect("read through a store that refuses writes");
        assert_eq!(read.messages.len(), 2);
        assert_eq!(read.open, [T0 + 4_000]);
    }
}

/// Bags rest on create-if-absent: on a store that ignores it (s3rver, the
/// negative fixture), two closers could both publish a manifest. Writers and
/// closers refuse it before their first write; readers never write, so they
/// still read; `trust_store` overrides.
#[tokio::test]
async fn writers_refuse_a_store_that_ignores_create_if_absent_and_readers_still_read() {
    let Some(endpoint) = tenure_conformance::server_from_env("TENURE_TEST_S3RVER") else { return };
    let s = Store::open(
        "s3://tenure",
        &[
            ("aws_endpoint", endpoint),
            ("aws_access_key_id", "S3RVER".into()),
            ("aws_secret_access_key", "S3RVER".into()),
            ("aws_region", "us-east-1".into()),
            ("aws_allow_http", "true".into()),
        ],
    );
    let clock = ManualClock::starting_at(T0);
    let log = s.log(clock.shared());
    let writer = log.writer("w").expect("writer");
    match writer.append(Batch::one(T0, "m")).await {
        Err(e @ tenure_core::Error::Unsupported { .. }) => {
            assert!(e.to_string().contains("create-if-absent") && e.to_string().contains("--trust-store"), "{e}")
        }
        other => panic!("a store that ignores create-if-absent must be refused, got {other:?}"),
    }
    match log.close(T0).await {
        Err(tenure_core::Error::Unsupported { .. }) => {}
        other => panic!("closing must be refused too, got {other:?}"),
    }
    assert!(log.read(&ReadOptions::default()).await.expect("readers never probe").messages.is_empty());
    let mut opts = options(clock.shared());
    opts.trust_store = true;
    let trusted = Log::on_object_store(&s.url, s.store.clone(), s.prefix.clone(), opts);
    trusted.writer("w").expect("writer").append(Batch::one(T0, "m")).await.expect("trusted: the append goes ahead");
}

#[tokio::test]
async fn an_idle_close_of_1ms_buckets_adds_a_bounded_number_of_objects_and_late_writers_are_rejected() {
    use futures::TryStreamExt;
    let s = Store::memory();
    let clock = ManualClock::starting_at(T0);
    let settings = tenure_bag::LogSettings {
        width: std::time::Duration::from_millis(1),
        grace: std::time::Duration::from_millis(10),
        max_skew: std::time::Duration::from_millis(5),
        chunk_buckets: 1000,
    };
    let log = Log::on_object_store(
        &s.url,
        s.store.clone(),
        s.prefix.clone(),
        options(clock.shared()).with_settings(settings),
    );
    assert!(log.writer("w").expect("writer").append(Batch::one(T0, "only")).await.expect("append").accepted);
    clock.advance(std::time::Duration::from_secs(20));
    let mut cursor = log.close_start(None).await.expect("start");
    let round = log.close_due(&mut cursor).await.expect("round");
    assert!(round.closed >= 20_000, "{round:?}");
    let objects: Vec<_> = s.store.list(Some(&s.prefix)).try_collect().await.expect("list");
    assert!(objects.len() < 30, "{} objects after an idle close of {} buckets", objects.len(), round.closed);
    // A late writer into a swept bucket is rejected, and never read.
    let late = log.writer("late").expect("writer");
    let out = late.append(Batch::one(T0 + 5_000, "late")).await.expect("a verdict");
    assert_eq!(out.decision, tenure_bag::Decision::NotInManifest);
    let read = log.read(&ReadOptions { to_ms: Some(T0 + 19_000), ..ReadOptions::default() }).await.expect("read");
    assert!(read.exact, "{read:?}");
    assert_eq!(read.messages.len(), 1);
}
