//! `count = ..` keeps the fn's body as it was: `?` converts into the fn's own error type,
//! `return` ends the body early, results may borrow from `self`, `&mut self` and generics work,
//! and arguments can be moved by the body; sync and async alike.

use ratelimit::{rate_limit, Error};

#[derive(Debug)]
enum AppError {
    Limited,
    Parse,
}

impl From<Error> for AppError {
    fn from(_: Error) -> Self {
        AppError::Limited
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(_: std::num::ParseIntError) -> Self {
        AppError::Parse
    }
}

type AppResult<T> = Result<T, AppError>;

struct Accounts {
    names: Vec<String>,
}

impl Accounts {
    #[rate_limit(limit = 5, window = "15m", key = user, count = "err")]
    async fn login(&self, user: &str, pin: &str) -> AppResult<&str> {
        let n: usize = pin.parse()?;
        if n >= self.names.len() {
            return Err(AppError::Parse);
        }
        Ok(&self.names[n])
    }

    #[rate_limit(limit = 5, window = "1m", count = "ok")]
    fn rename(&mut self, name: String) -> Result<usize, AppError> {
        let taken = name.parse::<u8>().is_ok();
        if taken {
            return Err(AppError::Parse);
        }
        self.names.push(name);
        Ok(self.names.len())
    }
}

#[rate_limit(limit = 3, window = "1m", key = id, count = "all")]
async fn generic<T: std::fmt::Display + Send>(id: u64, value: T) -> Result<String, Error> {
    Ok(format!("{id}: {value}"))
}

#[rate_limit(limit = 3, window = "1m", key = id, count = "err")]
async fn consumes(id: u64, owned: Vec<u8>) -> Result<usize, AppError> {
    let len = owned.len();
    drop(owned);
    Ok(len + id as usize)
}

fn main() {}

/// Stacked limits that count failures: said once, or the same on each.
#[rate_limit(limit = 5, window = "15m", key = user, count = "err")]
#[rate_limit(limit = 100, window = "1h")]
async fn stacked(user: &str) -> Result<(), AppError> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 5, window = "15m", key = user, count = "ok")]
#[rate_limit(limit = 100, window = "1h", count = "ok")]
fn stacked_sync(user: &str) -> Result<(), AppError> {
    let _ = user;
    Ok(())
}
