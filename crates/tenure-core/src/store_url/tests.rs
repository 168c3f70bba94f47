use super::*;

fn parse(text: &str) -> StoreUrl {
    StoreUrl::parse(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn refused(text: &str) -> String {
    match StoreUrl::parse(text, &BTreeMap::new()) {
        Err(Error::InvalidStore { reason, .. }) => reason,
        other => panic!("{text}: expected InvalidStore, got {other:?}"),
    }
}

#[test]
fn a_plain_path_is_a_directory_taken_as_written() {
    let u = parse("./locks%20x");
    assert_eq!((u.scheme(), u.is_plain_path()), ("file", true));
    assert_eq!(u.path(), std::path::Path::new("./locks%20x"));
    let why = refused("./d?fsync=false&password=hunter2");
    assert!(why.contains("a plain path takes no ?options") && why.contains("/d?fsync=false&password=…"), "{why}");
    assert!(!why.contains("hunter2"), "{why}");
}

#[test]
fn paths_keys_and_values_are_percent_decoded_and_plus_stays_a_plus() {
    let u = parse("file:///srv/my%20locks?time%6Fut=5s&auth_token=a%26b+c%3D");
    assert_eq!(u.path(), std::path::Path::new("/srv/my locks"));
    assert_eq!(u.options().get("timeout").map(String::as_str), Some("5s"));
    assert_eq!(u.options().get("auth_token").map(String::as_str), Some("a&b+c="));
    let raw = parse("file:///srv/%FF");
    assert_eq!(raw.path().as_os_str().as_encoded_bytes(), b"/srv/\xff");
    assert!(raw.path_str("prefix").is_err());
}

#[test]
fn options_given_apart_override_the_query_key_by_key() {
    let params = BTreeMap::from([("fsync".to_string(), "true".to_string())]);
    let u = StoreUrl::parse("file:///d?fsync=false&io=inline", &params).expect("parse");
    assert_eq!(u.options().get("fsync").map(String::as_str), Some("true"));
    assert_eq!(u.options().get("io").map(String::as_str), Some("inline"));
}

#[test]
fn a_pair_without_equals_and_an_empty_key_are_refused_and_the_last_of_a_key_counts() {
    let u = parse("file:///d?fsync=true&fsync=false");
    assert_eq!(u.options().get("fsync").map(String::as_str), Some("false"));
    assert!(refused("file:///d?fsync").contains("not KEY=VALUE"));
    assert!(refused("file:///d?=1").contains("no key"));
    assert!(refused("file:///d?k=%FF").contains("not UTF-8"));
}

#[test]
fn several_hosts_are_each_parsed_and_a_bad_one_is_named() {
    let u = parse("etcd://a:2379,[::1]:2380,b/locks/x");
    let hosts: Vec<String> = u.hosts().iter().map(ToString::to_string).collect();
    assert_eq!(hosts, ["a:2379", "[::1]:2380", "b"]);
    assert_eq!(u.path(), std::path::Path::new("/locks/x"));
    assert!(refused("etcd://a:1,,b:2/p").contains("host 2"));
    assert!(refused("etcd://a:1,b:99999/p").contains("host 2"));
    assert!(refused("tenure://a:99999").contains("port \"99999\" is not a number"));
    assert!(refused("tenure://a:07433").contains("port \"07433\""));
    assert!(refused("s3://a%20b/p").contains("a host is letters"));
}

#[test]
fn secrets_are_never_shown() {
    let e = StoreUrl::parse("etcd://u:hunter2@h:1/p?password=hunter2&k", &BTreeMap::new()).expect_err("k");
    let shown = e.to_string();
    assert!(!shown.contains("hunter2"), "{shown}");
    let u = parse("s3://b/p?aws_secret_access_key=hunter2");
    assert!(!format!("{u} {u:?}").contains("hunter2"));
    let u = parse("etcd://u:hunter2@h:1/p");
    assert!(u.has_password() && !format!("{u} {u:?}").contains("hunter2"));
    // A password with a '/' or a '#' it should have encoded.
    for text in ["s3://AKIA:se/cret@bucket/p", "etcd://u:p#w@h/x", "tenure://u:a/b@h:1?x=1"] {
        let e = StoreUrl::parse(text, &BTreeMap::new()).map(|u| u.to_string()).unwrap_or_else(|e| e.to_string());
        assert!(!e.contains("cret") && !e.contains("p#w") && !e.contains("a/b"), "{text}: {e}");
    }
}

#[test]
fn fragments_nul_bytes_and_absurd_lengths_are_refused() {
    assert!(refused("s3://b/p#x").contains("fragment"));
    assert!(refused("file:///a%00b").contains("NUL"));
    for dots in ["etcd://h/a/../b", "file:///srv/./x", "s3://b/%2E%2e/p", "etcd://h/.."] {
        assert!(refused(dots).contains("'..' segment"), "{dots}");
    }
    assert_eq!(parse("../locks").path(), std::path::Path::new("../locks"), "a plain path is as written");
    assert!(refused("file:///srv/locks\\..\\..\\etc").contains("'\\'"));
    assert!(refused("etcd://h:/locks").contains("no port"));
    assert!(refused("etcd://[::1]:/locks").contains("no port"));
    assert_eq!(parse("az://$web/locks").hosts()[0].host, "$web");
    for near in [" file:///a", "9p://x", "/tmp/a://b"] {
        assert!(refused(near).contains("may not contain '://'"), "{near:?}");
    }
    assert!(refused("/a\0b").contains("NUL"));
    assert!(refused(&format!("file:///{}", "a".repeat(MAX_URL_LEN))).contains("longer than"));
    assert!(refused("").contains("empty"));
    for bad in ["file:///a\nb", "file:///a\tb", "file:///a ", "etcd://h/p\r"] {
        assert!(refused(bad).contains("control characters"), "{bad:?}");
    }
    assert_eq!(parse("file://").path(), std::path::Path::new(""), "no path is not the root");
}

#[test]
fn schemes_are_letters_before_colon_slash_slash_and_anything_else_is_a_path() {
    assert_eq!(scheme("s3://b/p"), Some("s3"));
    assert_eq!(scheme("/tmp/a://b"), None);
    assert_eq!(scheme("9p://x"), None);
    assert_eq!(parse("S3://b/p").scheme(), "s3");
}

fn settings(query: &str) -> StoreUrl {
    parse(&format!("etcd://h/p?{query}"))
}

fn why(r: Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::InvalidStore { reason, .. }) => reason,
        other => panic!("expected InvalidStore, got {other:?}"),
    }
}

#[test]
fn a_flag_is_true_or_false_and_nothing_else() {
    let u = settings("a=true&b=false");
    assert_eq!(
        (u.flag("a").expect("valid"), u.flag("b").expect("valid"), u.flag("c").expect("valid")),
        (Some(true), Some(false), None)
    );
    let twice = why(settings("tls=hunter2&password=hunter2").flag("tls"));
    assert!(!twice.contains("hunter2") && twice.contains("tls=<the value of password>"), "{twice}");
    let long = why(settings("tls=hunter2-secret-token").flag("tls"));
    assert!(!long.contains("hunter2") && long.contains("tls=true or tls=false"), "{long}");
    for other in ["1", "0", "yes", "on", "TRUE", ""] {
        let r = why(settings(&format!("tls={other}")).flag("tls"));
        assert!(r.contains(&format!("tls={other}")) && r.contains("tls=true or tls=false"), "{r}");
    }
}

#[test]
fn a_duration_has_a_unit_and_a_range() {
    let range = Duration::from_millis(1)..=Duration::from_secs(3600);
    let u = settings("a=500ms&b=30s&c=2m");
    assert_eq!(u.duration("a", range.clone()).expect("valid"), Some(Duration::from_millis(500)));
    assert_eq!(u.duration("b", range.clone()).expect("valid"), Some(Duration::from_secs(30)));
    assert_eq!(u.duration("c", range.clone()).expect("valid"), Some(Duration::from_secs(120)));
    assert_eq!(u.duration("d", range.clone()).expect("valid"), None);
    let bare = why(settings("timeout=500").duration("timeout", range.clone()));
    assert!(bare.contains("timeout=500 has no unit") && bare.contains("timeout=500ms"), "{bare}");
    let out = why(settings("timeout=2h").duration("timeout", range.clone()));
    assert!(out.contains("timeout=2h is out of range: from 1ms to 1h"), "{out}");
    let zero = why(settings("timeout=0s").duration("timeout", range.clone()));
    assert!(zero.contains("out of range"), "{zero}");
    assert!(why(settings("timeout=fast").duration("timeout", range)).contains("not a duration"));
}

#[test]
fn a_count_has_a_range_and_a_path_is_not_empty() {
    let u = settings("n=4&big=65&p=/etc/x&e=");
    assert_eq!(u.count("n", 1..=64).expect("valid"), Some(4));
    let r = why(u.count("big", 1..=64));
    assert!(r.contains("big=65") && r.contains("from 1 to 64"), "{r}");
    assert!(why(settings("n=-1").count("n", 0..=9)).contains("n=-1"));
    assert_eq!(u.path_option("p").expect("valid"), Some(PathBuf::from("/etc/x")));
    assert!(why(u.path_option("e")).contains("e= is empty"));
    assert_eq!(settings("s=a%26b").string("s"), Some("a&b"));
}

#[test]
fn an_old_spelling_is_refused_with_the_new_one() {
    let u = settings("timeout_ms=500");
    let r = why(u.retired("timeout_ms", |v| format!("timeout={v}ms")));
    assert_eq!(r, "timeout_ms=500 is no longer read: write timeout=500ms");
    assert!(settings("").retired("timeout_ms", |v| v.to_string()).is_ok());
    // A huge (or secret) value under an old key is neither echoed nor built
    // into the hint.
    let long = "9".repeat(1_000);
    let r = why(settings(&format!("timeout_ms={long}")).retired("timeout_ms", |v| format!("timeout={v}ms")));
    assert_eq!(r, "timeout_ms=… (a value of 1000 characters, not shown) is no longer read: write timeout=…ms");
}

#[test]
fn finish_refuses_what_no_getter_asked_for_and_lists_what_they_did() {
    let u = settings("tls=true&secret_typo=hunter2");
    u.flag("tls").expect("valid");
    u.duration("timeout", Duration::ZERO..=Duration::MAX).expect("valid");
    let r = why(u.finish());
    assert_eq!(r, "unknown option \"secret_typo\" (known: tls, timeout)");
    let u = settings("tls=true");
    u.flag("tls").expect("valid");
    assert!(u.finish().is_ok());
    assert!(why(settings("x=1").finish()).contains("known: none"));
}
