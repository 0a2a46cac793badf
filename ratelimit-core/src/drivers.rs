//! Whether this thread runs inside a Tokio runtime with the drivers a call needs: a call that
//! waits (the queue, `until_ready`) needs its timer, the Redis store its timer and its IO.
//! Tokio panics where one is missing ("there is no reactor running", "timers are disabled",
//! "IO is disabled"); the limiter refuses the call instead, saying what is missing.
//!
//! A runtime is probed once per thread and runtime: the timer by making a `Sleep` (never
//! polled, so never registered), the IO driver by registering a loopback UDP socket bound to
//! an ephemeral port and closed at once (it sends nothing). Tokio's panic on a missing driver
//! is caught, so the default panic hook prints it once for that runtime; under
//! `panic = "abort"` the probe aborts instead (the call is still never admitted).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::error::Error;

/// What a call needs of the runtime it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Timers: a wait in the queue, a deadline.
    Timer,
    /// Timers and IO: a call to Redis.
    #[cfg(feature = "redis")]
    TimerAndIo,
}

/// What the last runtime probed on this thread has.
#[derive(Debug, Clone, Copy)]
struct Drivers {
    runtime: tokio::runtime::Id,
    timer: bool,
    /// Probed on first need only (it takes a socket).
    #[cfg(feature = "redis")]
    io: Option<bool>,
}

thread_local! {
    static PROBED: Cell<Option<Drivers>> = const { Cell::new(None) };
}

/// What is missing on this thread for a call that `needs` it; `None`: it can go ahead.
pub(crate) fn missing(needs: Needs) -> Option<&'static str> {
    ready(needs).err()
}

/// The runtime this thread runs in, if it has what a call that `needs` it needs; else what
/// is missing.
pub(crate) fn ready(needs: Needs) -> Result<tokio::runtime::Id, &'static str> {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return Err("no Tokio runtime is running on this thread");
    };
    let runtime = handle.id();
    let seen = PROBED.get().filter(|seen| seen.runtime == runtime);
    #[cfg_attr(not(feature = "redis"), allow(unused_mut))]
    let mut drivers = seen.unwrap_or_else(|| Drivers {
        runtime,
        timer: probe(|| drop(tokio::time::sleep(Duration::ZERO))),
        #[cfg(feature = "redis")]
        io: None,
    });
    let missing = match needs {
        _ if !drivers.timer => {
            Some("the Tokio runtime has no timer (build it with `enable_time()`)")
        }
        Needs::Timer => None,
        #[cfg(feature = "redis")]
        Needs::TimerAndIo => (!*drivers.io.get_or_insert_with(io))
            .then_some("the Tokio runtime has no IO driver (build it with `enable_io()`)"),
    };
    // Written when something was probed: the calls of a runtime already known only read.
    #[cfg(feature = "redis")]
    let probed = seen.is_none_or(|seen| seen.io != drivers.io);
    #[cfg(not(feature = "redis"))]
    let probed = seen.is_none();
    if probed {
        PROBED.set(Some(drivers));
    }
    match missing {
        None => Ok(runtime),
        Some(missing) => Err(missing),
    }
}

/// [`missing`] for a call that must wait: [`Error::NoRuntime`] when it cannot.
pub(crate) fn timer() -> Result<(), Error> {
    match missing(Needs::Timer) {
        None => Ok(()),
        Some(missing) => Err(Error::NoRuntime { missing }),
    }
}

/// Whether `f`, which Tokio makes panic when a driver is missing, ran to its end.
fn probe(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_ok()
}

/// Whether the runtime's IO driver takes a socket. A socket that cannot be had (none allowed
/// here) says nothing about the driver: counted as present, and the connection fails with
/// its own error.
#[cfg(feature = "redis")]
fn io() -> bool {
    let socket = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0));
    match socket.and_then(|s| s.set_nonblocking(true).map(|()| s)) {
        Ok(socket) => probe(|| drop(tokio::net::UdpSocket::from_std(socket))),
        Err(_) => true,
    }
}

/// Polls `future` once, for a caller that must not wait (a sync fn): a future whose every
/// step answers at once is ready; one that is pending anyway is refused with `otherwise`
/// (dropped, having spent nothing it did not count).
pub(crate) fn poll_once<T>(
    future: impl std::future::Future<Output = Result<T, Error>>,
    otherwise: Error,
) -> Result<T, Error> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(otherwise),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside a runtime, and in one built without a timer, a waiting call is told what is
    /// missing; with `enable_all` nothing is.
    #[test]
    fn a_missing_runtime_or_timer_is_named() {
        assert_eq!(
            missing(Needs::Timer),
            Some("no Tokio runtime is running on this thread")
        );
        let bare = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let found = bare.block_on(async { missing(Needs::Timer) });
        assert!(
            found.is_some_and(|m| m.contains("enable_time")),
            "{found:?}"
        );
        let full = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(full.block_on(async { missing(Needs::Timer) }), None);
        // Asked again on the first runtime, after the second: probed for that one again.
        assert!(bare.block_on(async { missing(Needs::Timer) }).is_some());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_missing_io_driver_is_named() {
        let timer_only = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        assert_eq!(timer_only.block_on(async { missing(Needs::Timer) }), None);
        let found = timer_only.block_on(async { missing(Needs::TimerAndIo) });
        assert!(found.is_some_and(|m| m.contains("enable_io")), "{found:?}");
        let full = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(full.block_on(async { missing(Needs::TimerAndIo) }), None);
    }
}
