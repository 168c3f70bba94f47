//! GCS versions objects by generation, but answers a conditional GET by ETag,
//! the MD5 of the content. Rewriting an object with the same bytes gives it a
//! new generation and the same ETag: a handle that trusted a 304 would keep the
//! old generation and lose every conditional write. No emulator has GCS's
//! preconditions, so this runs on a stand-in with exactly those two rules.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UpdateVersion,
};
use tenure_core::FencedRecord;
use tenure_object::{ObjectBackend, Provider};

/// GCS's two rules over `InMemory`: the version is a generation that changes
/// with every write (here `InMemory`'s ETag counter), and the ETag is a hash of
/// the content, which `If-None-Match` compares.
#[derive(Debug, Default)]
struct GenerationStore(InMemory);

impl std::fmt::Display for GenerationStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GenerationStore")
    }
}

fn content_etag(bytes: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    format!("\"{:016x}\"", h.finish())
}

fn generation(inner_etag: Option<String>) -> Option<String> {
    inner_etag.map(|e| e.trim_matches('"').to_string())
}

#[async_trait::async_trait]
impl ObjectStore for GenerationStore {
    async fn put_opts(&self, p: &Path, payload: PutPayload, mut o: PutOptions) -> Result<PutResult> {
        let etag = content_etag(&Bytes::from(payload.clone()));
        if let PutMode::Update(v) = &o.mode {
            let inner = v.version.as_ref().map(|g| format!("\"{g}\""));
            o.mode = PutMode::Update(UpdateVersion { e_tag: inner, version: None });
        }
        let r = self.0.put_opts(p, payload, o).await?;
        Ok(PutResult { e_tag: Some(etag), version: generation(r.e_tag), extensions: r.extensions })
    }
    async fn put_multipart_opts(&self, p: &Path, o: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(p, o).await
    }
    async fn get_opts(&self, p: &Path, mut o: GetOptions) -> Result<GetResult> {
        let if_none_match = o.if_none_match.take();
        let content = self.0.get(p).await?.bytes().await?;
        let etag = content_etag(&content);
        if if_none_match.as_deref() == Some(etag.as_str()) {
            return Err(object_store::Error::NotModified { path: p.to_string(), source: "same content".into() });
        }
        let mut r = self.0.get_opts(p, o).await?;
        r.meta.version = generation(r.meta.e_tag.take());
        r.meta.e_tag = Some(etag);
        Ok(r)
    }
    fn delete_stream(&self, paths: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        self.0.delete_stream(paths)
    }
    fn list(&self, p: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.0.list(p)
    }
    async fn list_with_delimiter(&self, p: Option<&Path>) -> Result<ListResult> {
        self.0.list_with_delimiter(p).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> Result<()> {
        self.0.copy_opts(from, to, o).await
    }
}

fn handle(store: &Arc<GenerationStore>) -> Arc<ObjectBackend> {
    Arc::new(ObjectBackend::new(store.clone(), Path::from("locks"), Provider::Gcs, "gs://test/locks"))
}

#[tokio::test]
async fn a_fenced_record_rewritten_with_the_same_bytes_stays_writable_from_another_handle() {
    let store = Arc::new(GenerationStore::default());
    let (holder, other) = (handle(&store), handle(&store));
    let mine = FencedRecord::new(holder.clone(), "state").expect("fence");
    let theirs = FencedRecord::new(other.clone(), "state").expect("fence");

    let first = mine.write(5, Bytes::from_static(b"same")).await.expect("token 5 writes");
    let seen = theirs.read().await.expect("read").expect("written");
    assert_eq!(seen.version, first.version);
    // The same token writes the same value again: a new generation, the same ETag.
    let second = mine.write(5, Bytes::from_static(b"same")).await.expect("token 5 writes again");
    assert_ne!(second.version, first.version, "every write is a new generation");

    // The other handle must see the new generation, not a 304 for the old one.
    let seen = theirs.read().await.expect("read").expect("written");
    assert_eq!(seen.version, second.version);
    theirs.write(6, Bytes::from_static(b"newer")).await.expect("token 6 writes over the rewritten record");
    assert_eq!(other.requests().get_not_modified, 0, "{}", other.requests());
}
