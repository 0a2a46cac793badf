//! Changing limits without a restart: the module is built from a TOML file and reloaded from
//! it on `SIGHUP` (Unix). A file that does not parse or validate leaves the running limits, and
//! says why; a good one takes over at once, the calls already spent carried over.
//!
//! ```text
//! cargo run -p ratelimit-examples --features serde --example reload
//! ```
//!
//! The example sends itself the signals (`kill -HUP <pid>`, as an operator or a config
//! manager would) so that it runs to the end on its own.

use std::path::Path;

use ratelimit::{rate_limit, Config, Error, Module};

#[rate_limit(tier = "api", key = user)]
async fn search(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// `n` calls by `user`, each printed.
async fn calls(user: &str, n: usize) {
    for _ in 0..n {
        match search(user).await {
            Ok(()) => println!("  search({user}): ok"),
            Err(Error::Exceeded(e)) => println!(
                "  search({user}): refused, retry in {:?} (limit {})",
                e.decision.retry_after.unwrap_or_default(),
                e.decision.limit
            ),
            Err(e) => println!("  search({user}): error: {e}"),
        }
    }
}

#[cfg(unix)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use tokio::signal::unix::{signal, SignalKind};

    let path = std::env::temp_dir().join(format!("ratelimit-reload-{}.toml", std::process::id()));
    write(&path, "[tiers.api]\nlimit = 2\nwindow = \"2s\"\n")?;
    let module = Module::init(Config::from_file(&path)?)?;
    let mut hangups = signal(SignalKind::hangup())?;
    println!("limit 2 per 2 s, from {}", path.display());
    calls("alice", 3).await;

    // What a SIGHUP handler does: reload from the file, keep the running limits on a problem.
    let mut on_hangup = async |text: &str| -> Result<(), Box<dyn std::error::Error>> {
        write(&path, text)?;
        std::process::Command::new("sh")
            .args(["-c", &format!("kill -HUP {}", std::process::id())])
            .status()?;
        hangups.recv().await;
        match module.reload_from_file(&path) {
            Ok(reloaded) => println!(
                "SIGHUP: reloaded, generation {}: {reloaded:?}",
                reloaded.generation
            ),
            Err(e) => println!("SIGHUP: kept the running limits: {e}"),
        }
        Ok(())
    };

    on_hangup("[tiers.api]\nlimit = \"many\"\n").await?;
    calls("alice", 1).await;
    on_hangup("[tiers.api]\nlimit = 5\nwindow = \"2s\"\n").await?;
    // Tightening counts what was spent; loosening, as here, holds to the old limit for one
    // old window, so the switch never admits more than the tighter of the two.
    println!("for one old window (2 s) the old limit still holds:");
    calls("bob", 3).await;
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    println!("then the new one, 5 per 2 s:");
    calls("carol", 6).await;
    println!(
        "stats: generation {}, {:?}",
        module.stats().generation,
        module.stats().by_tier["api"]
    );
    std::fs::remove_file(&path)?;
    Ok(())
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

#[cfg(not(unix))]
fn main() {
    println!("the reload example listens for SIGHUP: Unix only");
}
