//! Credentials kept out of sight: URLs shown with `***` for their credentials, and every form
//! of the credentials scrubbed from any message that leaves the store.
//!
//! URLs are read with the `url` crate, the parser the redis crate itself uses, so both agree on
//! where the userinfo ends. The redis crate percent-decodes what it sends (and may report), the
//! user wrote it encoded (or not): both forms are scrubbed.

use url::Url;

use crate::Error;

/// Query parameters that carry credentials (`redis+unix:///path?user=..&pass=..`).
const SECRET_PARAMS: [&str; 4] = ["user", "username", "pass", "password"];

/// `url` with its credentials replaced by `***`: the userinfo (`user:password@`) and the
/// `user` / `pass` query parameters.
pub(crate) fn redact(url: &str) -> String {
    match Url::parse(url) {
        Ok(parsed) => redact_parsed(&parsed),
        Err(_) => redact_unparsed(url),
    }
}

fn redact_parsed(url: &Url) -> String {
    use url::Position;
    let mut out = String::from(&url[..Position::BeforeUsername]);
    if !url.username().is_empty() || url.password().is_some() {
        out.push_str("***@");
    }
    out.push_str(&url[Position::BeforeHost..Position::AfterPath]);
    if let Some(query) = url.query() {
        out.push('?');
        if url.query_pairs().any(|(k, _)| is_secret_param(&k)) {
            let redacted: Vec<String> = url
                .query_pairs()
                .map(|(k, v)| {
                    let v = if is_secret_param(&k) { "***".into() } else { v };
                    format!("{k}={v}")
                })
                .collect();
            out.push_str(&redacted.join("&"));
        } else {
            out.push_str(query);
        }
    }
    out.push_str(&url[Position::AfterQuery..]);
    out
}

/// A URL no parser accepts may still hold a password, with a delimiter written raw in it (so
/// no one knows where its authority ends): everything up to the last `@` goes, and any query
/// naming a credential.
fn redact_unparsed(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return "***".to_owned();
    };
    let (scheme, rest) = url.split_at(start);
    let rest = match rest.rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    match rest.find('?') {
        Some(q) if SECRET_PARAMS.iter().any(|p| rest[q..].contains(p)) => {
            format!("{scheme}{}?***", &rest[..q])
        }
        _ => format!("{scheme}{rest}"),
    }
}

fn is_secret_param(name: &str) -> bool {
    SECRET_PARAMS.iter().any(|p| name.eq_ignore_ascii_case(p))
}

/// Every credential in `urls`, as written and percent-decoded, to scrub from any text that
/// leaves the store; longest first, so a password inside a userinfo is not left half-replaced.
pub(super) fn secrets(urls: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for url in urls {
        if let Ok(parsed) = Url::parse(url) {
            out.push(parsed.username().to_owned());
            out.extend(parsed.password().map(str::to_owned));
            if let Some(query) = parsed.query() {
                for pair in query.split('&') {
                    if let Some((k, v)) = pair.split_once('=') {
                        if is_secret_param(k) {
                            out.push(v.to_owned());
                        }
                    }
                }
            }
        }
        // As written, whatever a parser makes of it: everything between the scheme and the
        // last `@`, and its parts around the first `:`.
        if let Some(start) = url.find("://").map(|i| i + 3) {
            let rest = &url[start..];
            if let Some(at) = rest.rfind('@') {
                let userinfo = &rest[..at];
                out.push(userinfo.to_owned());
                if let Some((user, password)) = userinfo.split_once(':') {
                    out.push(user.to_owned());
                    out.push(password.to_owned());
                }
            }
        }
    }
    let decoded: Vec<String> = out.iter().map(|s| percent_decode(s)).collect();
    out.extend(decoded);
    out.retain(|s| !s.is_empty());
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// `s` with its `%XX` escapes decoded (as the redis crate decodes a userinfo); invalid UTF-8
/// is replaced, invalid escapes kept.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A store error carrying `e`, with every secret in it replaced by `***`; but keys of one
/// call in several Cluster slots (`CROSSSLOT`), which no retry and no other server would
/// decide, is [`Error::InvalidKey`]: a call that can never be decided, which no failure
/// policy turns into an allowance. As a store error, `FailurePolicy::Allow` admitted every
/// call whose keys a reload moved to another slot (an fn-wide budget's, whose keys have no
/// user key to share a hash tag), uncounted, while the old state was carried (helper-65);
/// such an old state is now read in its own slot first (`stacked.rs`), so this is what is
/// left: a call no part of the store sends across slots.
pub(super) fn store_error(secrets: &[String], context: &str, e: &redis::RedisError) -> Error {
    if e.code() == Some("CROSSSLOT") {
        return Error::InvalidKey {
            reason: "the keys of one decision live in different Redis Cluster slots",
        };
    }
    Error::Store {
        message: scrub(secrets, format!("{context}: {e}")),
    }
}

/// `text` with every secret in it replaced by `***`.
pub(super) fn scrub(secrets: &[String], mut text: String) -> String {
    for secret in secrets {
        text = text.replace(secret.as_str(), "***");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact("redis://user:pa@ss@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("rediss://:s3cret@h/1?x=@"), "rediss://***@h/1?x=@");
        assert_eq!(
            redact("redis+unix:///run/r.sock?db=1&pass=p%40ss"),
            "redis+unix:///run/r.sock?db=1&pass=***"
        );
        // Unparseable: a raw `#` in the password.
        assert_eq!(redact("redis://:p#ss@h:x"), "redis://***@h:x");
        assert_eq!(
            secrets(&["redis://user:pw@h".into()]),
            vec!["user:pw".to_owned(), "user".to_owned(), "pw".to_owned()]
        );
    }

    #[test]
    fn percent_encoded_credentials_are_scrubbed_in_both_forms() {
        let secrets = secrets(&["redis://u%3Ar:p%40ss@h".into()]);
        for form in ["p%40ss", "p@ss", "u%3Ar", "u:r"] {
            assert!(secrets.iter().any(|s| s == form), "{form}: {secrets:?}");
        }
        assert_eq!(
            scrub(&secrets, "auth p@ss / p%40ss".into()),
            "auth *** / ***"
        );
        assert_eq!(percent_decode("a%4"), "a%4");
        assert_eq!(percent_decode("%e2%82%ac"), "€");
    }
}
