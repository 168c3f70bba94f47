//! What an object store's error answer means, in one line a user can act on.
//!
//! `object_store` keeps the status and the body of a failed request in an
//! error type it does not export; its message (`Server returned non-2xx
//! status code: 404 Not Found: <body>`, `Received redirect without
//! LOCATION…`) is read here, for the version in Cargo.lock (the tests against
//! moto and a canned server notice a change of wording). The body is XML (S3,
//! Azure, GCS's XML API) or JSON (GCS's JSON API) written by the server,
//! which may be hostile. Only two things are ever taken from it: the error
//! code (`<Code>NoSuchBucket</Code>`, `"reason": "notFound"`), and a region
//! name (`<Region>eu-west-1</Region>`), each only if it is short and made of
//! the characters such a name has. The body itself is never shown.
//!
//! | answer | [`Problem`] | tenure error | exit (CLI) |
//! |---|---|---|---|
//! | 404 `NoSuchBucket` (S3, GCS XML), `ContainerNotFound` (Azure), GCS "bucket does not exist" | [`Problem::NoBucket`] | [`Error::InvalidStore`] | 64 |
//! | a redirect without `Location` (S3's 301 for a wrong region), `PermanentRedirect`, `AuthorizationHeaderMalformed` naming a region | [`Problem::WrongRegion`] | [`Error::InvalidStore`] | 64 |
//! | 403 `AccessDenied` (S3, GCS), `AuthorizationFailure`, `AuthorizationPermissionMismatch` (Azure), any other 403 | [`Problem::Denied`] | [`Error::Store`], not transient | 69 |
//! | 401, `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `ExpiredToken`, `AuthenticationFailed`… | [`Problem::BadCredentials`] | [`Error::Store`], not transient | 69 |
//! | anything else | none | [`Error::Store`], with the body replaced by its status and code | 69 |

use tenure_core::BoxError;

/// Longest text taken from an error answer or shown from `object_store`'s
/// message.
const MAX_MESSAGE: usize = 400;

/// What a failed request says about the store's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The bucket (container) does not exist.
    NoBucket { code: String },
    /// The bucket is in another region; which one, if the answer said.
    WrongRegion { region: Option<String> },
    /// The credentials were recognised and lack a permission.
    Denied { code: String },
    /// The credentials are not valid (unknown key, bad signature, expired).
    BadCredentials { code: String },
}

/// The status, error code and region of the answer behind `e`, if `e` came
/// from an answer at all.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: Option<u16>,
    pub(crate) bare_redirect: bool,
    pub(crate) code: Option<String>,
    pub(crate) region: Option<String>,
}

/// `object_store`'s words before the status and body of an error answer.
const STATUS_PREFIX: &str = "Server returned non-2xx status code: ";
/// … before the body of an error in a 200 answer.
const RESPONSE_PREFIX: &str = "Server returned error response: ";
/// … for a redirect without `Location` (S3's answer for another region).
const BARE_REDIRECT: &str = "Received redirect without LOCATION";

/// The status (if known) and body of the answer behind `e`, and whether
/// it was a redirect without `Location`, read from the first error in `e`'s
/// chain that carries them.
fn status_and_body(e: &object_store::Error) -> Option<(Option<u16>, String, bool)> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        // The first occurrence is object_store's: a body can only follow it.
        if let Some(at) = text.find(STATUS_PREFIX) {
            let rest = &text[at + STATUS_PREFIX.len()..];
            let status = rest.split(' ').next().and_then(|s| s.parse().ok());
            let body = rest.split_once(": ").map_or("", |(_, b)| b);
            return Some((status, body.to_string(), false));
        }
        if let Some(at) = text.find(RESPONSE_PREFIX) {
            return Some((None, text[at + RESPONSE_PREFIX.len()..].to_string(), false));
        }
        if text.contains(BARE_REDIRECT) {
            return Some((None, String::new(), true));
        }
        cur = err.source();
    }
    None
}

/// What `e`'s answer said.
pub(crate) fn answer(e: &object_store::Error) -> Answer {
    let Some((status, body, bare_redirect)) = status_and_body(e) else { return Answer::default() };
    Answer {
        status,
        bare_redirect,
        code: xml_tag(&body, "Code").or_else(|| json_reason(&body)).filter(|c| is_code(c)),
        region: xml_tag(&body, "Region").filter(|r| is_region(r)),
    }
}

/// The problem `e` shows, if it is one of configuration.
pub(crate) fn problem(e: &object_store::Error) -> Option<Problem> {
    let a = answer(e);
    let code = a.code.clone().unwrap_or_default();
    let body_says_no_bucket = status_and_body(e).is_some_and(|(_, b, _)| gcs_no_bucket(head(&b)));
    match (a.status, code.as_str()) {
        (_, "NoSuchBucket" | "ContainerNotFound") => Some(Problem::NoBucket { code }),
        (Some(404), _) if body_says_no_bucket => Some(Problem::NoBucket { code: "notFound".into() }),
        (_, "PermanentRedirect" | "IllegalLocationConstraintException" | "AuthorizationHeaderMalformed")
            if a.region.is_some() || code != "AuthorizationHeaderMalformed" =>
        {
            Some(Problem::WrongRegion { region: a.region })
        }
        _ if a.bare_redirect || a.status == Some(301) => Some(Problem::WrongRegion { region: a.region }),
        (
            _,
            "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "ExpiredToken"
            | "InvalidToken"
            | "TokenRefreshRequired"
            | "AuthenticationFailed"
            | "InvalidAuthenticationInfo"
            | "authError"
            | "required",
        )
        | (Some(401), _) => Some(Problem::BadCredentials { code: fallback(code, "401") }),
        (Some(403), _) => Some(Problem::Denied { code: fallback(code, "403") }),
        _ => None,
    }
}

fn fallback(code: String, status: &str) -> String {
    if code.is_empty() { format!("HTTP {status}") } else { code }
}

/// How much of a body is searched for GCS's wording.
const MAX_BODY_SCAN: usize = 4096;

/// The first [`MAX_BODY_SCAN`] bytes of `body`, cut at a character.
fn head(body: &str) -> &str {
    let mut n = MAX_BODY_SCAN.min(body.len());
    while !body.is_char_boundary(n) {
        n -= 1;
    }
    &body[..n]
}

/// GCS's JSON API says a bucket is missing in words only.
fn gcs_no_bucket(body: &str) -> bool {
    body.contains("The specified bucket does not exist") || body.contains("bucket does not exist")
}

/// `object_store`'s message for `e` with any answer body replaced by its
/// status and code, without control characters, at most [`MAX_MESSAGE`]
/// bytes: what may be shown of an error nobody mapped.
pub(crate) fn sanitized(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    if let Some((_, body, _)) = status_and_body(e).filter(|(_, b, _)| !b.is_empty()) {
        let a = answer(e);
        let summary = match a.code {
            Some(code) => format!("(error code {code})"),
            None => "(body not shown)".to_string(),
        };
        text = text.replace(&body, &summary);
    }
    clean(&text, MAX_MESSAGE)
}

/// `text` with control characters replaced by spaces, cut at `max` bytes.
pub(crate) fn clean(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        if out.len() + c.len_utf8() > max {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

/// The text of the first `<tag>…</tag>` in the first [`MAX_BODY_SCAN`] bytes.
fn xml_tag(body: &str, tag: &str) -> Option<String> {
    let head = head(body);
    let open = format!("<{tag}>");
    let start = head.find(&open)? + open.len();
    let end = head[start..].find("</")? + start;
    Some(head[start..end].trim().to_string())
}

/// GCS's JSON error reason: `"reason": "notFound"`.
fn json_reason(body: &str) -> Option<String> {
    let head = head(body);
    let at = head.find("\"reason\"")? + "\"reason\"".len();
    let rest = head[at..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

/// An error code as services spell them: letters and digits, at most 64.
fn is_code(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A region name as AWS spells them (`eu-west-1`): at most 32 characters.
pub(crate) fn is_region(s: &str) -> bool {
    (1..=32).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// An error that retrying cannot fix (its kind says so to
/// [`tenure_core::Error::is_transient`]), with `message` as all its text.
pub(crate) fn permanent(message: String) -> BoxError {
    Box::new(std::io::Error::new(std::io::ErrorKind::PermissionDenied, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_regions_are_taken_only_when_they_look_like_one() {
        let s3 =
            "<?xml version=\"1.0\"?><Error><Code>AuthorizationHeaderMalformed</Code><Region>eu-west-1</Region></Error>";
        assert_eq!(xml_tag(s3, "Code").as_deref(), Some("AuthorizationHeaderMalformed"));
        assert_eq!(xml_tag(s3, "Region").filter(|r| is_region(r)).as_deref(), Some("eu-west-1"));
        let hostile = "<Error><Code>\u{1b}[31mrm -rf</Code><Region>EU West <b></Region></Error>";
        assert!(!xml_tag(hostile, "Code").is_some_and(|c| is_code(&c)));
        assert!(!xml_tag(hostile, "Region").is_some_and(|r| is_region(&r)));
        let gcs = r#"{"error": {"code": 404, "message": "The specified bucket does not exist.", "errors": [{"reason": "notFound"}]}}"#;
        assert_eq!(json_reason(gcs).as_deref(), Some("notFound"));
        assert!(gcs_no_bucket(gcs));
        assert_eq!(xml_tag(&"x".repeat(10_000), "Code"), None);
    }

    /// An error as `object_store` words an answer of `status` with `body`.
    fn answered(status: &str, body: &str) -> object_store::Error {
        let text = format!("Error performing GET x - {STATUS_PREFIX}{status}: {body}");
        object_store::Error::Generic { store: "test", source: text.into() }
    }

    #[test]
    fn gcs_and_azure_answers_map_like_s3s() {
        let gcs_404 = r#"{"error": {"code": 404, "message": "The specified bucket does not exist.", "errors": [{"message": "The specified bucket does not exist.", "domain": "global", "reason": "notFound"}]}}"#;
        assert_eq!(problem(&answered("404 Not Found", gcs_404)), Some(Problem::NoBucket { code: "notFound".into() }));
        let gcs_denied = r#"{"error": {"code": 403, "message": "x@y.iam.gserviceaccount.com does not have storage.objects.create access", "errors": [{"reason": "forbidden"}]}}"#;
        assert_eq!(problem(&answered("403 Forbidden", gcs_denied)), Some(Problem::Denied { code: "forbidden".into() }));
        assert_eq!(
            problem(&answered("401 Unauthorized", "")),
            Some(Problem::BadCredentials { code: "HTTP 401".into() })
        );
        let azure = |code: &str| {
            format!("\u{feff}<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>")
        };
        assert_eq!(
            problem(&answered("404 The specified container does not exist.", &azure("ContainerNotFound"))),
            Some(Problem::NoBucket { code: "ContainerNotFound".into() })
        );
        assert_eq!(
            problem(&answered("403 Forbidden", &azure("AuthorizationPermissionMismatch"))),
            Some(Problem::Denied { code: "AuthorizationPermissionMismatch".into() })
        );
        assert_eq!(
            problem(&answered("403 Forbidden", &azure("AuthenticationFailed"))),
            Some(Problem::BadCredentials { code: "AuthenticationFailed".into() })
        );
        // An absent object is no configuration problem.
        assert_eq!(problem(&answered("404 Not Found", &azure("BlobNotFound"))), None);
        assert_eq!(problem(&answered("404 Not Found", "<Error><Code>NoSuchKey</Code></Error>")), None);
        assert_eq!(problem(&object_store::Error::NotFound { path: "p".into(), source: "gone".into() }), None);
    }

    #[test]
    fn cleaning_drops_control_characters_and_caps_the_length() {
        assert_eq!(clean("a\nb\u{1b}c", 100), "a b c");
        let long = clean(&"é".repeat(1000), 10);
        assert!(long.len() <= 10 + '…'.len_utf8() && long.ends_with('…'), "{long}");
    }
}
