//! Windows: `"500ms"`, `"30s"`, `"1m"`, `"1h30m"`.

use std::time::Duration;

use crate::ParseError;

/// The longest window accepted: one leap year. Longer windows would make counters that outlive
/// any deployment, and keep every nanosecond computation far from overflow.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses a window such as `"500ms"`, `"30s"`, `"1m"`, `"1h"`, `"1d"` or `"1h30m"`.
///
/// Units are `ms`, `s`, `m`, `h` and `d`; a compound lists each unit at most once, largest
/// first. The result is longer than zero and at most [`MAX_WINDOW`].
///
/// ```
/// use ratelimit_syntax::parse_window;
/// use std::time::Duration;
///
/// assert_eq!(parse_window("1h30m").unwrap(), Duration::from_secs(5_400));
/// assert_eq!(parse_window("500ms").unwrap(), Duration::from_millis(500));
/// assert!(parse_window("1x").unwrap_err().to_string().contains("\"1x\""));
/// ```
pub fn parse_window(input: &str) -> Result<Duration, ParseError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(ParseError::Empty);
    }
    let invalid = |reason: String| ParseError::InvalidWindow {
        input: input.to_owned(),
        reason,
    };
    let too_long = || ParseError::TooLong {
        input: input.to_owned(),
    };
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut total_ms: u64 = 0;
    let mut last_unit: Option<usize> = None;
    while pos < bytes.len() {
        let start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if start == pos {
            let c = text[pos..].chars().next().unwrap_or(' ');
            return Err(invalid(format!(
                "expected a number at {c:?} (windows are positive, like \"30s\" or \"1h30m\")"
            )));
        }
        let number: u64 = text[start..pos].parse().map_err(|_| too_long())?;
        let unit_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_alphabetic() {
            pos += 1;
        }
        let unit = &text[unit_start..pos];
        if unit.is_empty() {
            return Err(invalid(format!(
                "missing unit after {number} (use ms, s, m, h or d)"
            )));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(invalid(format!(
                "unknown unit {unit:?} (use ms, s, m, h or d)"
            )));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(invalid(
                "units must appear once each, largest first (like \"1h30m\")".to_owned(),
            ));
        }
        last_unit = Some(index);
        let part = number.checked_mul(UNITS[index].1).ok_or_else(too_long)?;
        total_ms = total_ms.checked_add(part).ok_or_else(too_long)?;
    }
    if total_ms == 0 {
        return Err(ParseError::ZeroWindow {
            input: input.to_owned(),
        });
    }
    let window = Duration::from_millis(total_ms);
    if window > MAX_WINDOW {
        return Err(too_long());
    }
    Ok(window)
}

/// Formats a window the way [`parse_window`] reads it (`"1h30m"`, `"500ms"`).
///
/// ```
/// use ratelimit_syntax::format_window;
/// use std::time::Duration;
///
/// assert_eq!(format_window(Duration::from_secs(5_400)), "1h30m");
/// ```
pub fn format_window(window: Duration) -> String {
    let mut out = String::new();
    let ms = window.as_millis() as u64;
    if ms == 0 {
        push_decimal(&mut out, window.as_nanos() as u64);
        out.push_str("ns");
    } else {
        push_units(&mut out, ms);
    }
    out
}

/// `ms` (at least 1) in units, largest first.
fn push_units(out: &mut String, mut ms: u64) {
    for (name, size) in UNITS {
        if ms >= size {
            push_decimal(out, ms / size);
            out.push_str(name);
            ms %= size;
        }
    }
}

fn push_decimal(out: &mut String, n: u64) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse() {
        let cases = [
            ("500ms", 500),
            ("1s", 1_000),
            ("30s", 30_000),
            ("1m", 60_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1h30m", 5_400_000),
            ("1m30s500ms", 90_500),
            (" 2h ", 7_200_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_window(text), Ok(Duration::from_millis(ms)), "{text}");
        }
    }

    #[test]
    fn bad_windows_are_typed_errors_naming_the_input() {
        for bad in ["0s", "1x", "-1m", "1", "m", "1m1h", "1m1m", "1.5s", "1 m"] {
            let err = parse_window(bad).unwrap_err();
            assert!(
                err.to_string().contains(&format!("{bad:?}")),
                "{bad}: {err}"
            );
        }
        assert_eq!(parse_window(""), Err(ParseError::Empty));
        assert_eq!(parse_window("   "), Err(ParseError::Empty));
        assert!(matches!(
            parse_window("0s"),
            Err(ParseError::ZeroWindow { .. })
        ));
        assert!(matches!(
            parse_window("99999999999999999999d"),
            Err(ParseError::TooLong { .. })
        ));
        assert!(matches!(
            parse_window("18446744073709551615d"),
            Err(ParseError::TooLong { .. })
        ));
        assert!(matches!(
            parse_window("367d"),
            Err(ParseError::TooLong { .. })
        ));
    }

    #[test]
    fn format_round_trips() {
        for text in ["500ms", "1s", "1h30m", "1d", "1m30s500ms"] {
            assert_eq!(format_window(parse_window(text).unwrap()), text);
        }
    }
}
