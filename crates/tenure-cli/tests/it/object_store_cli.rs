//! S3 as its users configure it, seen from the command line: credentials and
//! region from an AWS profile, a missing region refused before anything is
//! sent, a missing bucket and refused credentials in one line each.
//!
//! Profiles are checked against Ceph RGW, which verifies signatures (moto
//! accepts any key, so it could not tell a profile's key from none).

use std::path::Path;
use std::process::Command;
#[cfg(feature = "aws-profiles")]
use std::process::Output;
use std::time::Duration;

use crate::common::{assert_one_line_error, run, stderr, tenure};

const LIMIT: Duration = Duration::from_secs(60);

/// `tenure` with no AWS configuration from the developer's environment, and
/// a home without `~/.aws`.
fn clean_tenure(home: &Path) -> Command {
    let mut cmd = tenure();
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("AWS_")) {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home);
    cmd
}

/// `--store-opt` arguments reaching `endpoint` over plain HTTP.
fn endpoint_opts(endpoint: &str) -> Vec<String> {
    ["--store-opt", &format!("aws_endpoint={endpoint}"), "--store-opt", "aws_allow_http=true"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A test server's endpoint, `None` (the test skipped) if it is not set and
/// servers are not required.
fn server(var: &str) -> Option<String> {
    let Ok(endpoint) = std::env::var(var) else {
        assert_ne!(
            std::env::var("TENURE_REQUIRE_SERVERS").as_deref(),
            Ok("1"),
            "{var} is not set and TENURE_REQUIRE_SERVERS=1"
        );
        eprintln!("skipped: {var} is not set (start the servers: eval \"$(scripts/servers.sh env)\")");
        return None;
    };
    Some(endpoint)
}

#[cfg(feature = "aws-profiles")]
#[test]
fn a_missing_region_is_refused_naming_where_it_was_looked_for() {
    let home = tempfile::tempdir().expect("home");
    let out = run(clean_tenure(home.path()).args(["status", "s3://some-bucket/locks"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_one_line_error(&out);
    let err = stderr(&out);
    assert!(
        err.contains("no AWS region: looked in the store options (aws_region), AWS_REGION, AWS_DEFAULT_REGION")
            && err.contains("add ?aws_region=REGION"),
        "{err}"
    );
    assert!(err.contains("AWS profile \"default\" in") && err.contains(".aws/config"), "{err}");
}

#[cfg(feature = "aws-profiles")]
#[test]
fn a_named_profile_that_no_file_has_is_refused() {
    let home = tempfile::tempdir().expect("home");
    let out =
        run(clean_tenure(home.path()).env("AWS_PROFILE", "nowhere").args(["status", "s3://some-bucket/locks"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_one_line_error(&out);
    assert!(stderr(&out).contains("AWS profile \"nowhere\" (from AWS_PROFILE) is in neither"), "{}", stderr(&out));
}

#[test]
fn status_of_a_missing_bucket_is_one_line() {
    let Some(moto) = server("TENURE_TEST_S3_MOTO") else { return };
    let home = tempfile::tempdir().expect("home");
    let bucket = format!("tenure-missing-{}", tenure_core::random_nonce());
    let out = run(
        clean_tenure(home.path())
            .envs([("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"), ("AWS_REGION", "us-east-1")])
            .arg("status")
            .arg(format!("s3://{bucket}/locks"))
            .args(endpoint_opts(&moto)),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_one_line_error(&out);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("bucket {bucket:?} does not exist (NoSuchBucket): create it, or fix the URL")),
        "{err}"
    );
    assert!(!err.contains('<'), "{err}");
}

/// Shared config and credentials files with a good and a bad profile.
#[cfg(feature = "aws-profiles")]
fn profiles(dir: &Path) -> Vec<(&'static str, String)> {
    let config = dir.join("config");
    let credentials = dir.join("credentials");
    std::fs::write(&config, "[profile tenure-ci]\nregion = us-east-1\n\n[profile tenure-wrong]\nregion = us-east-1\n")
        .expect("config");
    std::fs::write(
        &credentials,
        "[tenure-ci]\naws_access_key_id = test\naws_secret_access_key = test\n\n\
         [tenure-wrong]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n",
    )
    .expect("credentials");
    vec![
        ("AWS_CONFIG_FILE", config.display().to_string()),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.display().to_string()),
    ]
}

#[cfg(feature = "aws-profiles")]
fn lock_with(home: &Path, env: &[(&str, String)], url: &str, extra: &[&str], endpoint: &str) -> Output {
    run(
        clean_tenure(home)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["lock", url, "profiled"])
            .args(endpoint_opts(endpoint))
            .args(extra)
            .args(["--", "true"]),
        LIMIT,
    )
}

#[cfg(feature = "aws-profiles")]
#[test]
fn a_profile_gives_the_credentials_and_region() {
    let Some(rgw) = server("TENURE_TEST_S3_RGW") else { return };
    let home = tempfile::tempdir().expect("home");
    let mut env = profiles(home.path());
    let url = format!("s3://tenure/tests/{}", tenure_core::random_nonce());

    // AWS_PROFILE names it; its keys pass RGW's signature check, its region
    // fills in the missing one.
    env.push(("AWS_PROFILE", "tenure-ci".into()));
    let out = lock_with(home.path(), &env, &url, &[], &rgw);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The store option profile= overrides AWS_PROFILE: its key is refused.
    let out = lock_with(home.path(), &env, &url, &["--store-opt", "profile=tenure-wrong"], &rgw);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert_one_line_error(&out);
    let err = stderr(&out);
    assert!(
        err.contains("refused the credentials (AWS profile \"tenure-wrong\") as invalid (InvalidAccessKeyId)"),
        "{err}"
    );
    assert!(!err.contains("nobody") && !err.contains("nothing") && !err.contains('<'), "{err}");

    // Keys in the environment come before the profile, as in the AWS SDKs.
    env.push(("AWS_ACCESS_KEY_ID", "test".into()));
    env.push(("AWS_SECRET_ACCESS_KEY", "test".into()));
    let out = lock_with(home.path(), &env, &url, &["--store-opt", "profile=tenure-wrong"], &rgw);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
