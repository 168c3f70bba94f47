//! An AWS profile from the shared config and credentials files, as the AWS
//! CLI and SDKs read them (feature `aws-profiles`, on by default).
//!
//! The profile is the store option `profile=NAME`, else `AWS_PROFILE`, else
//! `default`. The files are `AWS_CONFIG_FILE` (default `~/.aws/config`) and
//! `AWS_SHARED_CREDENTIALS_FILE` (default `~/.aws/credentials`). From the
//! profile, tenure takes:
//!
//! - its `region`, when neither the URL nor `AWS_REGION` / `AWS_DEFAULT_REGION`
//!   give one;
//! - its credentials (static keys, `role_arn` with `source_profile` or
//!   `credential_source`, `credential_process`, SSO), through the AWS SDK's
//!   `aws-config`, when no access key is configured: the AWS SDKs' order,
//!   where keys in the environment come before the profile.
//!
//! A profile named by `profile=` or `AWS_PROFILE` that neither file has is an
//! error naming both files; a missing `default` profile is not.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::provider::ProvideCredentials;
use aws_runtime::env_config::file::EnvConfigFiles;
use aws_smithy_http_client::tls::{Provider as TlsProvider, rustls_provider::CryptoMode};
use aws_types::os_shim_internal::{Env, Fs};
use aws_types::region::Region;
use object_store::CredentialProvider;
use object_store::aws::AwsCredential;

use crate::explain::clean;

/// Keys of a profile that make it a source of credentials.
const CREDENTIAL_KEYS: &[&str] = &[
    "aws_access_key_id",
    "role_arn",
    "credential_process",
    "credential_source",
    "source_profile",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
    "login_session",
];

/// A profile found in the shared files.
#[derive(Clone, Debug)]
pub(crate) struct AwsProfile {
    /// Its name.
    pub(crate) name: String,
    /// Its `region`, if it has one that looks like a region.
    pub(crate) region: Option<String>,
    /// Whether it can give credentials.
    pub(crate) has_credentials: bool,
}

/// Where the shared files are, for messages: `config, credentials`.
pub(crate) fn files() -> String {
    let home = std::env::var("HOME").map(|h| format!("{h}/.aws")).unwrap_or_else(|_| "~/.aws".into());
    let config = std::env::var("AWS_CONFIG_FILE").unwrap_or_else(|_| format!("{home}/config"));
    let credentials = std::env::var("AWS_SHARED_CREDENTIALS_FILE").unwrap_or_else(|_| format!("{home}/credentials"));
    format!("{config} and {credentials}")
}

/// The profile to use: `option` (the store option `profile=`), else
/// `AWS_PROFILE`, else `default`; and whether it was named rather than
/// defaulted.
fn selected(option: Option<&str>) -> (String, bool) {
    match option.map(str::to_string).or_else(|| std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty())) {
        Some(name) => (name, true),
        None => ("default".into(), false),
    }
}

/// The selected profile, `None` if it is `default` and the files lack it.
///
/// # Errors
/// A message (without the files' contents) if the files cannot be parsed or
/// a named profile is in neither.
pub(crate) fn load(option: Option<&str>) -> Result<Option<AwsProfile>, String> {
    let (name, named) = selected(option);
    // The files are read with std::fs inside: no runtime is needed to wait.
    let set = futures::executor::block_on(aws_config::profile::load(
        &Fs::real(),
        &Env::real(),
        &EnvConfigFiles::default(),
        Some(Cow::Owned(name.clone())),
    ))
    .map_err(|e| format!("cannot read the AWS shared config files ({}): {}", files(), clean(&e.to_string(), 200)))?;
    let Some(profile) = set.get_profile(&name) else {
        return if named {
            Err(format!(
                "AWS profile {name:?} (from {}) is in neither {}; fix the name or add the profile",
                if option.is_some() { "the store option profile" } else { "AWS_PROFILE" },
                files()
            ))
        } else {
            Ok(None)
        };
    };
    let region = profile.get("region").map(str::trim).filter(|r| crate::explain::is_region(r)).map(str::to_string);
    let has_credentials = CREDENTIAL_KEYS.iter().any(|k| profile.get(k).is_some());
    Ok(Some(AwsProfile { name, region, has_credentials }))
}

/// Credentials of `profile`, renewed before they expire.
pub(crate) fn credentials(profile: &AwsProfile) -> Arc<dyn CredentialProvider<Credential = AwsCredential>> {
    // HTTPS for STS and SSO, through ring, as the rest of tenure.
    let http = aws_smithy_http_client::Builder::new().tls_provider(TlsProvider::Rustls(CryptoMode::Ring)).build_https();
    let config = ProviderConfig::default().with_http_client(http).with_region(profile.region.clone().map(Region::new));
    let inner = ProfileFileCredentialsProvider::builder().configure(&config).profile_name(&profile.name).build();
    Arc::new(ProfileCredentials { name: profile.name.clone(), inner, cached: tokio::sync::Mutex::new(None) })
}

/// `e` and its sources, `: `-separated.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text.push_str(": ");
        text.push_str(&s.to_string());
        cur = s.source();
    }
    text
}

/// Renew credentials this long before they expire.
const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// `object_store`'s credential provider over the SDK's profile provider,
/// which does not cache (an assumed role would cost an STS call per request).
#[derive(Debug)]
struct ProfileCredentials {
    name: String,
    inner: ProfileFileCredentialsProvider,
    cached: tokio::sync::Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

#[async_trait::async_trait]
impl CredentialProvider for ProfileCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        if let Some((credential, expiry)) = &*cached {
            let fresh =
                expiry.is_none_or(|at| at.duration_since(SystemTime::now()).is_ok_and(|left| left > RENEW_BEFORE));
            if fresh {
                return Ok(credential.clone());
            }
        }
        let got = self.inner.provide_credentials().await.map_err(|e| object_store::Error::Generic {
            store: "S3",
            source: format!(
                "no credentials from AWS profile {:?} ({}): {}",
                self.name,
                files(),
                clean(&chain(&e), 300)
            )
            .into(),
        })?;
        let credential = Arc::new(AwsCredential {
            key_id: got.access_key_id().to_string(),
            secret_key: got.secret_access_key().to_string(),
            token: got.session_token().map(str::to_string),
        });
        *cached = Some((credential.clone(), got.expiry()));
        Ok(credential)
    }
}
