//! The rules for names written in configuration and attributes.

/// The message for a name [`valid_tier_name`] refuses.
pub const TIER_NAME_RULE: &str = "a tier name is 1 or more of A-Z a-z 0-9 - _ .";

/// Whether `name` is a valid tier name: 1 or more of `A-Z a-z 0-9 - _ .` ([`TIER_NAME_RULE`]).
///
/// ```
/// use ratelimit_syntax::valid_tier_name;
/// assert!(valid_tier_name("pro-2024.v1"));
/// assert!(!valid_tier_name("") && !valid_tier_name("has space") && !valid_tier_name("{x}"));
/// ```
pub fn valid_tier_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}
