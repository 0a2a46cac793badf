//! helper-64's probes of configuration files (feature `serde`) beside `probes_config`: window
//! texts a reader might write in scientific or fractional notation or far past the longest
//! window, in JSON as well as TOML, and numbers past `u64` or of the wrong sign or kind in
//! JSON. Each must be an error naming its field, never a silently different limit; the texts
//! that are windows are exactly the window written.

use std::time::Duration;

use ratelimit::Config;
use ratelimit_tests::config_errors::{fields, invalid};

const REFUSED_WINDOWS: &[&str] = &[
    "1e9s",
    "1E3ms",
    "1e0m",
    "0.5ms",
    ".5s",
    "5.s",
    "0.5h",
    "9999999999999h",
    "9999999999999999999999999h",
    "213503982334601d",
    "0x10s",
    "0o7s",
    "1_000ms",
    "+0s",
    "-0s",
    "NaNs",
    "infs",
    "1s-1ms",
    "1m+1s",
    "1d1d",
    "1h 30m",
    "PT1M",
    "00:01:00",
    "1 minute",
];

/// Every text above, in every window field of a TOML file and of a JSON file, is an error
/// naming that field alone.
#[test]
fn window_texts_in_scientific_fractional_or_huge_notation_are_errors_naming_the_field() {
    type Doc = fn(&str) -> (String, String);
    let docs: [(&str, Doc); 4] = [
        ("default_window", |w| {
            (
                format!("default_limit = 1\ndefault_window = {w:?}\n"),
                format!(r#"{{"default_limit": 1, "default_window": {w:?}}}"#),
            )
        }),
        ("tiers.t.window", |w| {
            (
                format!("[tiers.t]\nlimit = 1\nwindow = {w:?}\n"),
                format!(r#"{{"tiers": {{"t": {{"limit": 1, "window": {w:?}}}}}}}"#),
            )
        }),
        ("tiers.t.block_for", |w| {
            (
                format!("[tiers.t]\nlimit = 1\nblock_for = {w:?}\n"),
                format!(r#"{{"tiers": {{"t": {{"limit": 1, "block_for": {w:?}}}}}}}"#),
            )
        }),
        ("queue_timeout", |w| {
            (
                format!("queue_timeout = {w:?}\n"),
                format!(r#"{{"queue_timeout": {w:?}}}"#),
            )
        }),
    ];
    for (field, doc) in docs {
        for text in REFUSED_WINDOWS {
            let (toml, json) = doc(text);
            let e = invalid(Config::from_toml_str(&toml));
            assert_eq!(fields(&e), [field], "TOML {text:?}: {e}");
            let e = invalid(Config::from_json_str(&json));
            assert_eq!(fields(&e), [field], "JSON {text:?}: {e}");
        }
    }
}

/// The same windows in JSON as in TOML: the texts that are windows read exactly (the
/// control for the refusals above: the field is read, and read as written).
#[test]
fn window_texts_read_alike_in_json_and_toml() {
    for (text, want) in [
        ("1ms", Duration::from_millis(1)),
        ("1m30s500ms", Duration::from_millis(90_500)),
        ("366d", Duration::from_secs(366 * 86_400)),
    ] {
        let toml =
            Config::from_toml_str(&format!("default_limit = 1\ndefault_window = {text:?}\n"))
                .unwrap();
        let json = Config::from_json_str(&format!(
            r#"{{"default_limit": 1, "default_window": {text:?}}}"#
        ))
        .unwrap();
        assert_eq!(toml.default_window(), want, "{text}");
        assert_eq!(json.default_window(), want, "{text}");
    }
}

/// Numbers of JSON that are no `u64` (negative, fractional, in exponent notation, past
/// `u64::MAX`, a string of digits, `true`) in every numeric field: an error naming the field,
/// never a number read another way (a wrapped, truncated or saturated limit).
#[test]
fn json_numbers_no_u64_can_hold_are_errors_naming_their_field() {
    let values = [
        "-1",
        "-0.0",
        "1.5",
        "1e3",
        "1E2",
        "100.0",
        "18446744073709551616",
        "340282366920938463463374607431768211456",
        "\"100\"",
        "true",
        "[100]",
        "{}",
    ];
    type Doc = fn(&str) -> String;
    let docs: [(&str, Doc); 6] = [
        ("default_limit", |v| format!(r#"{{"default_limit": {v}}}"#)),
        ("burst_limit", |v| format!(r#"{{"burst_limit": {v}}}"#)),
        ("token_refill_rate", |v| {
            format!(r#"{{"strategy": "token_bucket", "token_refill_rate": {v}}}"#)
        }),
        ("tiers.t.limit", |v| {
            format!(r#"{{"tiers": {{"t": {{"limit": {v}}}}}}}"#)
        }),
        ("tiers.t.burst", |v| {
            format!(r#"{{"tiers": {{"t": {{"limit": 1, "burst": {v}}}}}}}"#)
        }),
        ("max_queue_size", |v| {
            format!(r#"{{"max_queue_size": {v}}}"#)
        }),
    ];
    for (field, doc) in docs {
        for v in values {
            let e = invalid(Config::from_json_str(&doc(v)));
            assert_eq!(fields(&e), [field], "{field} = {v}: {e}");
        }
    }
}

/// Unknown fields at every level of a JSON file (the top, a tier, the store table), and
/// fields of one level written at another, are errors naming them by their path.
#[test]
fn unknown_fields_at_every_level_of_a_json_file_are_named() {
    for (text, field) in [
        (r#"{"default_limits": 5}"#, "default_limits"),
        (r#"{"limit": 5}"#, "limit"),
        (r#"{"window": "1m"}"#, "window"),
        (
            r#"{"tiers": {"t": {"limit": 1, "limits": 5}}}"#,
            "tiers.t.limits",
        ),
        (
            r#"{"tiers": {"t": {"limit": 1, "default_limit": 5}}}"#,
            "tiers.t.default_limit",
        ),
        (
            r#"{"tiers": {"t": {"limit": 1, "token_refill_rate": 5}}}"#,
            "tiers.t.token_refill_rate",
        ),
        (
            r#"{"store": {"type": "memory", "max_key": 5}}"#,
            "store.max_key",
        ),
        (
            r#"{"store": {"type": "memory", "limit": 5}}"#,
            "store.limit",
        ),
    ] {
        let e = invalid(Config::from_json_str(text));
        assert_eq!(fields(&e), [field], "{text}: {e}");
        let message = e.to_string();
        assert!(message.contains("unknown field"), "{text}: {e}");
    }
}
