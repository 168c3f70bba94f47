//! From a store URL and options to an [`ObjectStore`] and a key prefix.
//!
//! The URL names the bucket (or container) and the prefix under which tenure keeps
//! its objects; everything else is configured the way `object_store` users expect:
//!
//! 1. environment variables, read as `object_store`'s `from_env()` reads them
//!    (`AWS_*` for S3, `GOOGLE_*` for GCS, `AZURE_*` for Azure);
//! 2. the URL's query (`s3://bucket/locks?aws_region=eu-west-1`);
//! 3. `params` (the CLI's `--store-opt key=value`), which override both.
//!
//! On S3, `profile=NAME` (or `aws_profile`) names the AWS profile to read
//! credentials and region from (feature `aws-profiles`, see the `profile`
//! module), and a store on AWS itself without a region is refused (see
//! [`aws_region_and_credentials`]).
//!
//! Keys are `object_store` config keys, case-insensitive: `aws_endpoint`,
//! `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `aws_allow_http`,
//! `aws_virtual_hosted_style_request`, `google_service_account_key`,
//! `azure_storage_account_name`, `azure_storage_use_emulator`, `azure_allow_http`…
//! An unknown key is an error, never silently ignored. Values never appear in
//! error messages (they may be secrets), but for those of flags and durations.
//!
//! Flags and durations are read in the one spelling every tenure store reads
//! (see [`tenure_core::store_url`]), stricter than `object_store` alone:
//!
//! | setting | spelling |
//! |---|---|
//! | flags: `aws_allow_http`, `azure_storage_use_emulator`, `aws_skip_signature`, `allow_http`… | `true` or `false` (`1`, `yes`, `on` refused) |
//! | durations: `timeout` (one request), `connect_timeout`, `pool_idle_timeout`… | a number with a unit, 1ms or more: `timeout=30s` (a bare `30` refused) |
//! | everything else | as `object_store` reads it |
//!
//! Requests are retried by `object_store` at most [`MAX_RETRIES`] times within
//! [`RETRY_TIMEOUT`] (its defaults, 10 times within 3 minutes, would keep a
//! `tenure lock` against a wrong endpoint silent for minutes).

use std::collections::BTreeMap;
use std::sync::{Arc, Once};
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::path::Path;
use object_store::{ClientConfigKey, ObjectStore, RetryConfig};
use tenure_core::{Error, Result, StoreUrl};

/// Retries of one request (timeouts, 5xx, connection errors) inside `object_store`.
pub const MAX_RETRIES: usize = 3;
/// Longest time `object_store` keeps retrying one request.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// Which service a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// Amazon S3 and S3-compatible stores (`s3://`, `s3a://`).
    S3,
    /// Google Cloud Storage (`gs://`, `gcs://`).
    Gcs,
    /// Azure Blob Storage (`az://`, `azure://`, `abfs://`, `abfss://`, `adl://`).
    Azure,
}

impl Provider {
    fn from_scheme(scheme: &str) -> Option<Self> {
        match scheme {
            "s3" | "s3a" => Some(Self::S3),
            "gs" | "gcs" => Some(Self::Gcs),
            "az" | "azure" | "abfs" | "abfss" | "adl" => Some(Self::Azure),
            _ => None,
        }
    }

    /// Where `object_store` takes credentials from, for error messages (S3's
    /// are worked out from the configuration).
    fn credential_sources(self) -> &'static str {
        match self {
            Self::S3 => "the configured AWS credentials",
            Self::Gcs => {
                "google_service_account(_key), GOOGLE_APPLICATION_CREDENTIALS, or application default credentials"
            }
            Self::Azure => {
                "the azure_* options or AZURE_* variables, the Azure CLI (azure_use_azure_cli) or a managed identity"
            }
        }
    }

    /// The permissions tenure needs, for error messages (see
    /// docs/object-stores.md#permissions).
    pub(crate) fn permissions(self) -> &'static str {
        match self {
            Self::S3 => "s3:GetObject, s3:PutObject and s3:DeleteObject on its objects and s3:ListBucket on the bucket",
            Self::Gcs => "roles/storage.objectUser on the bucket (storage.objects.get, create, delete, list)",
            Self::Azure => {
                "the Storage Blob Data Contributor role on the container (or a SAS with read, write, delete, list)"
            }
        }
    }

    /// Examples of config keys, for error messages.
    fn example_keys(self) -> &'static str {
        match self {
            Self::S3 => {
                "aws_endpoint, aws_region, aws_access_key_id, aws_secret_access_key, aws_session_token, aws_allow_http, aws_virtual_hosted_style_request"
            }
            Self::Gcs => "google_service_account, google_service_account_key, google_application_credentials",
            Self::Azure => {
                "azure_storage_account_name, azure_storage_account_key, azure_storage_endpoint, azure_storage_use_emulator, azure_allow_http"
            }
        }
    }
}

/// A parsed and built store URL.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) prefix: Path,
    pub(crate) provider: Provider,
    /// The URL without its query (which may hold secrets), for messages.
    pub(crate) display: String,
    /// The instance metadata endpoint, if no credentials were configured and
    /// it is the only place left to get them (S3 only).
    pub(crate) metadata_only: Option<String>,
    /// The bucket, region and credentials, for error messages.
    pub(crate) context: Context,
}

/// What error messages say about a store: its bucket (container), its
/// region and where its credentials come from (never the credentials).
#[derive(Clone, Debug, Default)]
pub(crate) struct Context {
    pub(crate) bucket: String,
    pub(crate) region: Option<String>,
    pub(crate) credentials: String,
}

impl Built {
    /// The backend over this store.
    pub(crate) fn backend(self) -> crate::ObjectBackend {
        let b =
            crate::ObjectBackend::new(self.store, self.prefix, self.provider, self.display).with_context(self.context);
        match self.metadata_only {
            Some(endpoint) => b.with_metadata_only_credentials(endpoint),
            None => b,
        }
    }
}

/// Opens the object store a tenure URL names and returns it with the key prefix
/// the URL's path gives (empty for `s3://bucket`).
///
/// `s3://bucket/prefix` (also `s3a://`), `gs://bucket/prefix` (also `gcs://`),
/// `az://container/prefix` (also `azure://`, `abfs[s]://container@account.dfs.core.windows.net/prefix`,
/// `adl://`). Configuration comes from the environment, the URL's query and
/// `params`, in increasing priority (see the module docs of `config`).
///
/// Nothing is sent to the store here; credentials are resolved on first use.
///
/// # Errors
/// [`Error::InvalidStore`] naming the URL and what is wrong: an unknown scheme, a
/// missing bucket, an unknown config key or a value `object_store` rejects.
pub fn object_store_from_url(url: &StoreUrl) -> Result<(Arc<dyn ObjectStore>, Path)> {
    let built = build_url(url)?;
    Ok((built.store, built.prefix))
}

#[cfg(test)]
fn build(url: &str, params: &BTreeMap<String, String>) -> Result<Built> {
    build_url(&StoreUrl::parse(url, params)?)
}

/// [`build`] for a parsed URL.
pub(crate) fn build_url(url: &StoreUrl) -> Result<Built> {
    let display = url.display().to_string();
    let invalid = |reason: String| url.invalid(reason);
    let provider = Provider::from_scheme(url.scheme()).ok_or_else(|| {
        invalid(format!(
            "unknown scheme {:?}; object stores are s3:// (s3a://), gs:// (gcs://) and az:// (azure://, abfs://, abfss://, adl://)",
            url.scheme()
        ))
    })?;
    let Some(parsed) = url.base() else { return Err(invalid("not a URL".into())) };
    if url.hosts().is_empty() {
        return Err(invalid("the URL names no bucket or container, as in s3://bucket/prefix".into()));
    }
    if url.hosts().len() > 1 || url.hosts().iter().any(|h| h.port.is_some()) || url.has_password() {
        return Err(invalid(
            "the bucket part cannot carry a port, a password or a second host; give the endpoint as an option, e.g. --store-opt aws_endpoint=http://127.0.0.1:9000".into(),
        ));
    }
    let prefix = Path::from_url_path(parsed.path()).map_err(|e| invalid(format!("bad key prefix: {e}")))?;

    // object_store's keys are case-insensitive.
    let options: BTreeMap<String, String> =
        url.options().iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    // Flags and durations in the one spelling every store reads, whatever
    // object_store would also take (`1`, `yes`, a bare number of seconds).
    // The refused value is shown, but never where it also is another
    // setting's value, which may be a secret.
    let refused = |key: &str, mut reason: String| {
        for (k, v) in options.iter().filter(|(k, v)| k.as_str() != key && v.len() >= 4) {
            reason = reason.replace(v.as_str(), &format!("<the value of {k}>"));
        }
        invalid(reason)
    };
    for (k, v) in &options {
        if is_flag(k) {
            tenure_core::store_url::parse_flag(k, v).map_err(|r| refused(k, r))?;
        } else if is_duration(k) {
            tenure_core::store_url::parse_duration(k, v, &TIMEOUTS).map_err(|r| refused(k, r))?;
        }
    }

    // What object_store's URL parsers see: the scheme it knows, no query.
    let base = match provider {
        Provider::Gcs if parsed.scheme() == "gcs" => format!("gs{}", &parsed.as_str()["gcs".len()..]),
        _ => parsed.to_string(),
    };

    install_crypto_provider();
    let retry = RetryConfig { max_retries: MAX_RETRIES, retry_timeout: RETRY_TIMEOUT, ..RetryConfig::default() };
    let unknown = |key: &str| {
        invalid(tenure_core::unknown_option(
            key,
            &format!("object_store's config keys, such as {}", provider.example_keys()),
        ))
    };
    // object_store quotes a value it cannot parse; a secret pasted into the wrong
    // key must not reach a terminal or a log, so values are named by their key.
    let built = |e: object_store::Error| {
        let mut message = e.to_string();
        for (k, v) in options.iter().filter(|(_, v)| v.len() >= 4) {
            message = message.replace(v.as_str(), &format!("<the value of {k}>"));
        }
        invalid(format!("cannot configure the store: {message}"))
    };
    let mut metadata_only = None;
    // abfs[s]://container@account.dfs.core.windows.net: the container is the user part.
    let bucket = match url.user() {
        Some(container) if provider == Provider::Azure && !container.is_empty() => container.to_string(),
        _ => url.hosts().first().map(|h| h.to_string()).unwrap_or_default(),
    };
    let mut context = Context { bucket, region: None, credentials: provider.credential_sources().into() };
    let store: Arc<dyn ObjectStore> = match provider {
        Provider::S3 => {
            let mut b = AmazonS3Builder::from_env().with_url(base).with_retry(retry);
            let mut profile = None;
            for (k, v) in &options {
                if PROFILE_KEYS.contains(&k.as_str()) {
                    profile = Some(v.as_str());
                    continue;
                }
                let key: AmazonS3ConfigKey = k.parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            let endpoint = b.get_config_value(&AmazonS3ConfigKey::Endpoint);
            let allow_http = b.get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp));
            check_http(&display, endpoint.as_deref(), allow_http.as_deref(), "aws_allow_http")?;
            let (b, aws) = aws_region_and_credentials(b, profile, url)?;
            metadata_only = aws.metadata_only;
            context = aws.context;
            Arc::new(b.build().map_err(built)?)
        }
        Provider::Gcs => {
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(base).with_retry(retry);
            for (k, v) in &options {
                let key: GoogleConfigKey = k.parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            Arc::new(b.build().map_err(built)?)
        }
        Provider::Azure => {
            let mut b = MicrosoftAzureBuilder::from_env().with_url(base).with_retry(retry);
            for (k, v) in &options {
                let key: AzureConfigKey = k.parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, v);
            }
            let emulator = b.get_config_value(&AzureConfigKey::UseEmulator);
            if !emulator.as_deref().is_some_and(truthy) {
                let endpoint = b.get_config_value(&AzureConfigKey::Endpoint);
                let allow_http = b.get_config_value(&AzureConfigKey::Client(ClientConfigKey::AllowHttp));
                check_http(&display, endpoint.as_deref(), allow_http.as_deref(), "azure_allow_http")?;
            }
            Arc::new(b.build().map_err(built)?)
        }
    };
    Ok(Built { store, prefix, provider, display, metadata_only, context })
}

/// The store options that name an AWS profile (read by tenure, not passed
/// to `object_store`).
const PROFILE_KEYS: &[&str] = &["profile", "aws_profile"];

/// What [`aws_region_and_credentials`] settled.
struct Aws {
    metadata_only: Option<String>,
    context: Context,
}

/// The region and the credentials of an S3 store, from where the AWS CLI
/// and SDKs take them: the URL's options, the environment, then the
/// profile (see the `profile` module). A store on AWS itself (no
/// `aws_endpoint`) without a region is refused, naming where it was looked
/// for; an S3-compatible endpoint keeps `object_store`'s `us-east-1`, which
/// such servers ignore or expect.
#[cfg_attr(not(feature = "aws-profiles"), allow(unused_mut))]
fn aws_region_and_credentials(
    mut b: AmazonS3Builder,
    profile_option: Option<&str>,
    url: &StoreUrl,
) -> Result<(AmazonS3Builder, Aws)> {
    use AmazonS3ConfigKey as K;
    #[cfg(feature = "aws-profiles")]
    let profile = crate::profile::load(profile_option).map_err(|r| url.invalid(r))?;
    #[cfg(not(feature = "aws-profiles"))]
    if std::env::var_os("AWS_PROFILE").is_some() && profile_option.is_none() {
        tracing::warn!(
            "AWS_PROFILE is set, but this build of tenure reads no AWS profiles (cargo feature aws-profiles): it is ignored"
        );
    }
    #[cfg(not(feature = "aws-profiles"))]
    if profile_option.is_some() {
        return Err(url.invalid(
            "this build of tenure reads no AWS profiles (cargo feature aws-profiles of tenure-object): \
             give the region and credentials as store options or AWS_* environment variables",
        ));
    }

    let mut region = b.get_config_value(&K::Region);
    #[cfg(feature = "aws-profiles")]
    if region.is_none()
        && let Some(r) = profile.as_ref().and_then(|p| p.region.clone())
    {
        b = b.with_region(&r);
        region = Some(r);
    }
    let endpoint = b.get_config_value(&K::Endpoint).or_else(|| b.get_config_value(&K::S3Endpoint));
    if region.is_none() && endpoint.is_none() {
        #[cfg(feature = "aws-profiles")]
        let profile_place = format!(
            ", the region of AWS profile {:?} in {}",
            profile.as_ref().map_or_else(|| "default".to_string(), |p| p.name.clone()),
            crate::profile::files()
        );
        #[cfg(not(feature = "aws-profiles"))]
        let profile_place = String::new();
        return Err(url.invalid(format!(
            "no AWS region: looked in the store options (aws_region), AWS_REGION, AWS_DEFAULT_REGION{profile_place}; \
             add ?aws_region=REGION (the bucket's region) or set AWS_REGION"
        )));
    }

    let set = |b: &AmazonS3Builder, k: K| b.get_config_value(&k).is_some();
    let mut credentials = if set(&b, K::AccessKeyId) {
        "the access key from aws_access_key_id or AWS_ACCESS_KEY_ID".to_string()
    } else if b.get_config_value(&K::SkipSignature).as_deref().is_some_and(truthy) {
        "none: aws_skip_signature=true".to_string()
    } else if set(&b, K::WebIdentityTokenFile) && set(&b, K::RoleArn) {
        "the web identity role AWS_ROLE_ARN".to_string()
    } else if set(&b, K::ContainerCredentialsRelativeUri) || set(&b, K::ContainerCredentialsFullUri) {
        "the container's role".to_string()
    } else {
        "the instance's role from the instance metadata service".to_string()
    };
    let mut metadata_only = aws_metadata_only(&b);
    // The AWS SDKs' order: keys in the environment, then the profile, then
    // web identity, the container's role and the instance's.
    #[cfg(feature = "aws-profiles")]
    if let Some(p) = profile.as_ref().filter(|p| p.has_credentials)
        && !set(&b, K::AccessKeyId)
        && !b.get_config_value(&K::SkipSignature).as_deref().is_some_and(truthy)
    {
        b = b.with_credentials(crate::profile::credentials(p));
        credentials = format!("AWS profile {:?}", p.name);
        metadata_only = None;
    }
    let bucket = url.hosts().first().map(|h| h.to_string()).unwrap_or_default();
    Ok((b, Aws { metadata_only, context: Context { bucket, region, credentials } }))
}

/// The instance metadata endpoint, if `object_store` will ask it for
/// credentials because nothing else was configured (its order: static keys,
/// web identity, container role, EKS pod identity, then the instance).
fn aws_metadata_only(b: &AmazonS3Builder) -> Option<String> {
    use AmazonS3ConfigKey as K;
    let set = |k: K| b.get_config_value(&k).is_some();
    let configured = set(K::AccessKeyId)
        || set(K::SecretAccessKey)
        || (set(K::WebIdentityTokenFile) && set(K::RoleArn))
        || set(K::ContainerCredentialsRelativeUri)
        || (set(K::ContainerCredentialsFullUri) && set(K::ContainerAuthorizationTokenFile))
        || b.get_config_value(&K::SkipSignature).as_deref().is_some_and(truthy);
    (!configured).then(|| b.get_config_value(&K::MetadataEndpoint).unwrap_or_else(|| "http://169.254.169.254".into()))
}

/// A flag, already checked to be `true` or `false` when it came from the
/// URL; the environment may still spell it as `object_store` reads it.
fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes" | "y")
}

/// The range of a duration setting (`timeout=5s`, `connect_timeout=2s`…).
const TIMEOUTS: std::ops::RangeInclusive<Duration> = Duration::from_millis(1)..=tenure_core::limits::MAX_DURATION;

/// Whether `key` (lower-case) is one of `object_store`'s flags: written
/// `true` or `false` here, as on every store.
fn is_flag(key: &str) -> bool {
    const FLAGS: &[&str] = &[
        "allow_http",
        "allow_invalid_certificates",
        "use_emulator",
        "skip_signature",
        "virtual_hosted_style_request",
        "unsigned_payload",
        "disable_tagging",
        "use_fabric_endpoint",
        "use_azure_cli",
        "http1_only",
        "http2_only",
        "s3_express",
        "imdsv1_fallback",
        "request_payer",
        "disable_bulk_delete",
    ];
    FLAGS.iter().any(|f| key == *f || key.strip_suffix(f).is_some_and(|p| p.ends_with('_')))
}

/// Whether `key` (lower-case) is one of `object_store`'s durations: written
/// with a unit here (`timeout=30s`), as on every store.
fn is_duration(key: &str) -> bool {
    key.ends_with("timeout") || key.ends_with("keep_alive_interval")
}

/// A plain-HTTP endpoint needs an explicit opt-in; say which, rather than let the
/// first request fail with a TLS-policy error.
fn check_http(url: &str, endpoint: Option<&str>, allow_http: Option<&str>, key: &str) -> Result<()> {
    let plain = endpoint.is_some_and(|e| e.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("http://")));
    if plain && !allow_http.is_some_and(truthy) {
        return Err(Error::InvalidStore {
            url: url.to_string(),
            reason: format!("the endpoint is plain http://; allow it with {key}=true (--store-opt {key}=true)"),
        });
    }
    Ok(())
}

/// Selects ring as rustls's crypto provider for this process, unless one is
/// already installed (by the application or another library): `object_store`
/// is built without aws-lc here.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn local_s3() -> BTreeMap<String, String> {
        params(&[
            ("aws_endpoint", "http://127.0.0.1:1"),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "k"),
            ("aws_secret_access_key", "s"),
            ("aws_region", "us-east-1"),
        ])
    }

    fn reason(r: Result<Built>) -> String {
        match r {
            Err(Error::InvalidStore { reason, .. }) => reason,
            other => panic!("expected InvalidStore, got {other:?}"),
        }
    }

    #[test]
    fn url_path_becomes_the_key_prefix() {
        let b = build("s3://tenure/ci/locks/", &local_s3()).expect("build");
        assert_eq!((b.provider, b.prefix.as_ref()), (Provider::S3, "ci/locks"));
        assert_eq!(build("s3a://tenure", &local_s3()).expect("build").prefix.as_ref(), "");
        let key = r#"{"gcs_base_url":"http://127.0.0.1:1","disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}"#;
        let b = build("gcs://bucket/a/b", &params(&[("google_service_account_key", key)])).expect("build gcs");
        assert_eq!((b.provider, b.prefix.as_ref(), b.display.as_str()), (Provider::Gcs, "a/b", "gcs://bucket/a/b"));
    }

    #[test]
    fn unknown_scheme_and_missing_bucket_are_named() {
        assert!(reason(build("ftp://bucket/p", &BTreeMap::new())).contains("unknown scheme \"ftp\""));
        assert!(reason(build("s3:///p", &local_s3())).contains("no bucket"));
        assert!(reason(build("not a url", &BTreeMap::new())).contains("unknown scheme \"file\""));
        assert!(reason(build("s3://b:9000/p", &BTreeMap::new())).contains("cannot carry a port"));
        assert!(reason(build("s3://a,b/p", &BTreeMap::new())).contains("a second host"));
    }

    #[test]
    fn unknown_option_is_an_error_not_ignored() {
        let mut p = local_s3();
        p.insert("aws_endpiont".into(), "x".into());
        let r = reason(build("s3://tenure/x", &p));
        assert!(r.contains("\"aws_endpiont\"") && r.contains("aws_endpoint"), "{r}");
    }

    #[test]
    fn plain_http_endpoint_needs_allow_http() {
        let mut p = local_s3();
        p.remove("aws_allow_http");
        let r = reason(build("s3://tenure/x", &p));
        assert!(r.contains("aws_allow_http=true"), "{r}");
    }

    #[test]
    fn secrets_never_appear_in_errors() {
        let mut p = local_s3();
        p.insert("aws_secret_access_key".into(), "hunter2-secret".into());
        p.insert("bogus".into(), "x".into());
        let err = build("s3://tenure/x?aws_session_token=tok-secret", &p).expect_err("bogus key").to_string();
        assert!(!err.contains("hunter2") && !err.contains("tok-secret"), "{err}");
    }

    #[test]
    fn query_options_are_read_and_params_override_them() {
        let p = params(&[("aws_allow_http", "true"), ("aws_access_key_id", "k"), ("aws_secret_access_key", "s")]);
        // The query alone would fail the http check; params supply allow_http.
        let b = build("s3://tenure/x?aws_endpoint=http://127.0.0.1:1&aws_region=us-east-1", &p);
        assert!(b.is_ok(), "{b:?}");
        let r = reason(build("s3://tenure/x?aws_endpoint=http://127.0.0.1:1", &params(&[("aws_allow_http", "false")])));
        let secret = reason(build("s3://tenure/x", &params(&[("aws_skip_signature", "hunter2-not-a-bool")])));
        assert!(!secret.contains("hunter2") && secret.contains("aws_skip_signature"), "{secret}");
        assert!(r.contains("aws_allow_http"), "{r}");
    }

    #[test]
    fn flags_are_true_or_false_and_durations_have_a_unit() {
        for (k, v, why) in [
            (
                "aws_allow_http",
                "1",
                "aws_allow_http=1 is not a flag: write aws_allow_http=true or aws_allow_http=false",
            ),
            ("aws_allow_http", "yes", "aws_allow_http=yes is not a flag"),
            ("aws_skip_signature", "on", "aws_skip_signature=on is not a flag"),
            ("timeout", "30", "timeout=30 has no unit: write timeout=30ms or timeout=30s"),
            ("connect_timeout", "0s", "connect_timeout=0s is out of range: from 1ms"),
        ] {
            let mut p = local_s3();
            p.insert(k.into(), v.into());
            let r = reason(build("s3://tenure/x", &p));
            assert!(r.contains(why), "{k}={v}: {r}");
        }
        let mut p = local_s3();
        p.insert("timeout".into(), "30s".into());
        p.insert("aws_virtual_hosted_style_request".into(), "false".into());
        assert!(build("s3://tenure/x", &p).is_ok());
    }

    #[test]
    fn only_a_store_with_no_credentials_configured_blames_missing_credentials() {
        use AmazonS3ConfigKey as K;
        // A builder without the environment, which may hold keys.
        let bare = || AmazonS3Builder::new().with_config(K::MetadataEndpoint, "http://127.0.0.1:1");
        assert_eq!(aws_metadata_only(&bare()).as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(aws_metadata_only(&AmazonS3Builder::new()).as_deref(), Some("http://169.254.169.254"));
        let keys = bare().with_config(K::AccessKeyId, "k").with_config(K::SecretAccessKey, "s");
        assert_eq!(aws_metadata_only(&keys), None);
        assert_eq!(aws_metadata_only(&bare().with_config(K::SkipSignature, "true")), None);
        let web = bare().with_config(K::WebIdentityTokenFile, "/t").with_config(K::RoleArn, "arn:aws:iam::1:role/r");
        assert_eq!(aws_metadata_only(&web), None);
        assert_eq!(aws_metadata_only(&bare().with_config(K::ContainerCredentialsRelativeUri, "/v2/c")), None);
        assert_eq!(build("s3://b/p", &local_s3()).expect("build").metadata_only, None);
    }
}
