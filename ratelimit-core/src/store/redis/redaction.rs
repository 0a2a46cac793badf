//! Credentials kept out of sight: URLs shown with `***` for their userinfo, and the secrets
//! scrubbed from any message that leaves the store.

use crate::Error;

/// `url` with any `user:password@` replaced by `***@`.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end], &rest[at..]),
        None => url.to_owned(),
    }
}

/// The secrets in `urls` (userinfo parts), to scrub from any text that leaves the store.
pub(super) fn secrets(urls: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for url in urls {
        let Some(start) = url.find("://").map(|i| i + 3) else {
            continue;
        };
        let rest = &url[start..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            let userinfo = &rest[..at];
            out.push(userinfo.to_owned());
            if let Some((_, password)) = userinfo.split_once(':') {
                if !password.is_empty() {
                    out.push(password.to_owned());
                }
            }
        }
    }
    out.retain(|s| !s.is_empty());
    // Longest first, so a password inside a userinfo is not left half-replaced.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

pub(super) fn store_error(secrets: &[String], context: &str, e: &redis::RedisError) -> Error {
    let mut message = format!("{context}: {e}");
    for secret in secrets {
        message = message.replace(secret.as_str(), "***");
    }
    Error::Store { message }
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
            secrets(&["redis://user:pw@h".into()]),
            vec!["user:pw".to_owned(), "pw".to_owned()]
        );
    }
}
