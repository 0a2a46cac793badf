//! [`Window`]: the one way every builder takes a window, as text (`"1m"`) or as a
//! [`Duration`].

use std::time::Duration;

use crate::syntax::{parse_window, ParseError};

/// A window given either as a [`Duration`] or as text (`"500ms"`, `"30s"`, `"1m"`,
/// `"1h30m"`): what [`Tier::window`](crate::Tier::window),
/// [`ConfigBuilder::default_window`](crate::ConfigBuilder::default_window),
/// [`Options::window`](crate::Options::window) and [`Overrides::window`](crate::Overrides::window)
/// all take.
///
/// Text is parsed (with [`parse_window`]) once, when it is converted. A bad window is never
/// ignored: a configuration reports it as an error naming its field when it is built, and
/// per-call [`Options`](crate::Options) or [`Overrides`](crate::Overrides) holding one make
/// every call with them fail with [`Error::InvalidQuota`](crate::Error::InvalidQuota).
///
/// ```
/// use ratelimit_core::Window;
/// use std::time::Duration;
///
/// assert_eq!(Window::from("1m").duration(), Ok(Duration::from_secs(60)));
/// assert_eq!(Window::from(Duration::from_millis(500)).duration(), Ok(Duration::from_millis(500)));
/// assert!(Window::from("1x").duration().unwrap_err().to_string().contains("\"1x\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window(Result<Duration, ParseError>);

impl Window {
    /// The window as a duration, or why its text is not one. A duration is given back as it
    /// was: whether it is a window a limit can have (longer than zero, at most
    /// [`MAX_WINDOW`](crate::MAX_WINDOW)) is checked where the limit is built.
    pub fn duration(&self) -> Result<Duration, &ParseError> {
        self.0.as_ref().copied()
    }
}

impl From<Duration> for Window {
    fn from(d: Duration) -> Self {
        Window(Ok(d))
    }
}

impl From<&str> for Window {
    fn from(text: &str) -> Self {
        Window(parse_window(text))
    }
}

impl From<&String> for Window {
    fn from(text: &String) -> Self {
        Window(parse_window(text))
    }
}

impl From<String> for Window {
    fn from(text: String) -> Self {
        Window(parse_window(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_durations_are_one_window() {
        assert_eq!(Window::from("90s"), Window::from(Duration::from_secs(90)));
        assert_eq!(
            Window::from(String::from("1h30m")).duration(),
            Ok(Duration::from_secs(5_400))
        );
    }
}
