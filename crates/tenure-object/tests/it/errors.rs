//! A missing bucket, refused credentials, denied access and a wrong region,
//! each reported in one line that names the bucket and what to do, never
//! with the store's XML: against moto, Ceph RGW and Azurite, and against a
//! canned server answering as S3 does (and as a hostile server might).

use std::collections::BTreeMap;
use std::sync::Arc;

use tenure_core::backend::Key;
use tenure_core::{Backend, Error, OpenOptions, StoreUrl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{self, Server};

/// A backend on `url` with `server`'s options, without the probe.
fn backend(server: &Server, url: &str, extra: &[(&str, &str)]) -> tenure_object::ObjectBackend {
    let mut params = server.params.clone();
    for (k, v) in extra {
        params.insert(k.to_string(), v.to_string());
    }
    tenure_object::backend_from_url(&StoreUrl::parse(url, &params).expect("url")).expect("backend")
}

/// An error's text, checked to be one line without the store's XML.
fn one_line(e: &Error) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n') && !text.contains('<') && !text.contains("RequestId"), "{text}");
    text
}

async fn missing_bucket(server: Server, scheme: &str, code: &str) {
    let bucket = format!("tenure-missing-{}", tenure_core::random_nonce());
    let url = format!("{scheme}://{bucket}/locks");
    let b = backend(&server, &url, &[]);
    let key = Key::new("deploy").expect("key");
    // A read must not take the 404 for an absent record.
    for e in [b.get(&key).await.expect_err("read"), b.list("").await.expect_err("list")] {
        let text = one_line(&e);
        assert!(matches!(e, Error::InvalidStore { .. }), "{e:?}");
        assert!(text.contains(&format!("{bucket:?} does not exist ({code}): create it, or fix the URL")), "{text}");
    }
    // Opening for writes (the probe) says the same.
    let opts = OpenOptions { params: server.params.clone(), ..OpenOptions::default() };
    let Err(e) = common::open(&url, &opts).await else { panic!("opened a store whose bucket does not exist") };
    assert!(one_line(&e).contains("does not exist"), "{e}");
}

#[tokio::test]
async fn a_missing_bucket_is_named_on_moto() {
    let Some(server) = common::moto() else { return };
    missing_bucket(server, "s3", "NoSuchBucket").await;
}

#[tokio::test]
async fn a_missing_bucket_is_named_on_rgw() {
    let Some(server) = common::rgw() else { return };
    missing_bucket(server, "s3", "NoSuchBucket").await;
}

#[tokio::test]
async fn a_missing_container_is_named_on_azurite() {
    let Some(server) = common::azurite() else { return };
    missing_bucket(server, "az", "ContainerNotFound").await;
}

/// moto accepts any credentials (it does not check signatures unless told
/// to); RGW and Azurite check them.
#[tokio::test]
async fn refused_credentials_are_one_line_and_not_transient_on_rgw() {
    let Some(server) = common::rgw() else { return };
    let url = server.url();
    let b = backend(&server, &url, &[("aws_access_key_id", "not-a-key"), ("aws_secret_access_key", "nope")]);
    let e = b.get(&Key::new("deploy").expect("key")).await.expect_err("refused");
    let text = one_line(&e);
    assert!(
        text.contains("refused the credentials (the access key from aws_access_key_id or AWS_ACCESS_KEY_ID) as invalid (InvalidAccessKeyId)"),
        "{text}"
    );
    assert!(!text.contains("not-a-key") && !text.contains("nope"), "{text}");
    assert!(matches!(e, Error::Store { .. }) && !e.is_transient(), "{e:?}");
}

#[tokio::test]
async fn refused_credentials_are_one_line_on_azurite() {
    let Some(server) = common::azurite() else { return };
    let url = server.url();
    let wrong = "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXkgd3Jvbmcga2V5IHdyb25nIGtleQ==";
    let b = backend(&server, &url, &[("azure_storage_account_key", wrong)]);
    let e = b.get(&Key::new("deploy").expect("key")).await.expect_err("refused");
    let text = one_line(&e);
    // Azurite answers a bad signature with AuthorizationFailure, which Azure
    // itself sends for a request its network rules or role refuse (a bad
    // signature is AuthenticationFailed there): reported as denied access.
    assert!(
        text.contains("access denied (AuthorizationFailure)") && text.contains("Storage Blob Data Contributor"),
        "{text}"
    );
    assert!(!text.contains(wrong) && !e.is_transient(), "{text}");
}

/// A server that answers every request with `status`, `headers` and `body`,
/// and closes the connection.
async fn canned(status: &'static str, headers: &'static str, body: String) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    let params: BTreeMap<String, String> = [
        ("aws_endpoint", format!("http://{addr}")),
        ("aws_allow_http", "true".into()),
        ("aws_access_key_id", "k".into()),
        ("aws_secret_access_key", "s".into()),
        ("aws_region", "us-east-1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Server { base: "s3://canned".into(), params }
}

async fn read_error(server: &Server) -> Error {
    let b = Arc::new(backend(server, "s3://canned/locks", &[]));
    b.get(&Key::new("deploy").expect("key")).await.expect_err("an error answer")
}

#[tokio::test]
async fn access_denied_names_the_credentials_and_the_permissions_never_the_body() {
    let body =
        "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>\u{1b}[2J you have been pwned</Message>\
                <RequestId>R</RequestId></Error>"
            .to_string();
    let e = read_error(&canned("403 Forbidden", "Content-Type: application/xml\r\n", body).await).await;
    let text = one_line(&e);
    assert!(
        text.contains(
            "access denied (AccessDenied): the credentials (the access key from aws_access_key_id or AWS_ACCESS_KEY_ID) lack a permission tenure needs on s3://canned/locks"
        ) && text.contains("s3:PutObject")
            && text.contains("see docs/object-stores.md#permissions"),
        "{text}"
    );
    assert!(!text.contains("pwned") && !text.contains('\u{1b}'), "{text}");
    assert!(!e.is_transient());
}

#[tokio::test]
async fn a_redirect_without_location_is_a_wrong_region() {
    let body = "<Error><Code>PermanentRedirect</Code><Endpoint>canned.s3.eu-west-1.amazonaws.com</Endpoint></Error>";
    let e = read_error(&canned("301 Moved Permanently", "x-amz-bucket-region: eu-west-1\r\n", body.into()).await).await;
    let text = one_line(&e);
    assert!(matches!(e, Error::InvalidStore { .. }), "{e:?}");
    assert!(
        text.contains("bucket \"canned\" is not in region us-east-1") && text.contains("add ?aws_region=REGION"),
        "{text}"
    );
}

#[tokio::test]
async fn a_region_the_answer_names_is_the_one_to_add() {
    let body = "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region 'us-east-1' is wrong; expecting \
                'eu-west-1'</Message><Region>eu-west-1</Region></Error>";
    let e = read_error(&canned("400 Bad Request", "", body.into()).await).await;
    let text = one_line(&e);
    assert!(
        text.contains("bucket \"canned\" is in region eu-west-1, not us-east-1: add ?aws_region=eu-west-1"),
        "{text}"
    );
    // A region that is no region name is not repeated.
    let body = "<Error><Code>AuthorizationHeaderMalformed</Code><Region>rm -rf /; eu</Region></Error>";
    let e = read_error(&canned("400 Bad Request", "", body.into()).await).await;
    assert!(!one_line(&e).contains("rm -rf"), "{e}");
}

#[tokio::test]
async fn any_other_answer_is_summarised_and_capped() {
    let body = format!("<Error><Code>Teapot</Code><Message>{}</Message></Error>", "x".repeat(100_000));
    let e = read_error(&canned("418 I'm a teapot", "", body).await).await;
    let text = one_line(&e);
    assert!(text.contains("418") && text.contains("(error code Teapot)"), "{text}");
    assert!(text.len() < 1000, "{} bytes", text.len());
}
