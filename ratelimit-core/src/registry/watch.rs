//! [`FileWatch`]: a module reloaded when its configuration file changes (feature `notify`).

use std::path::{Path, PathBuf};

use notify::{EventKind, RecursiveMode, Watcher};

use crate::config::Config;
use crate::error::{ConfigError, Error};
use crate::service::Reloaded;

/// How long after a change the file is read.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// Watches a module's configuration file and reloads the module when it changes; stops when
/// dropped. Made by [`Module::watch_file`](crate::Module::watch_file).
pub struct FileWatch {
    _watcher: notify::RecommendedWatcher,
    path: PathBuf,
}

impl std::fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatch")
            .field("path", &self.path)
            .finish()
    }
}

impl FileWatch {
    /// Watches `path`'s directory; on each change to `path`, reads the file and hands the
    /// configuration to `reload` (`None`: nothing to do), logging what came of it.
    pub(super) fn start(
        path: &Path,
        reload: impl Fn(Config) -> Option<Result<Reloaded, Error>> + Send + 'static,
    ) -> Result<FileWatch, Error> {
        let path = path.to_path_buf();
        let problem = |e: notify::Error| {
            let mut errors = ConfigError::default();
            errors.push(format!("file {}", path.display()), e.to_string());
            Error::InvalidConfig(errors)
        };
        let name = path.file_name().map(ToOwned::to_owned);
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file = path.clone();
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(target: "ratelimit", %error, "watching the configuration file");
                    return;
                }
            };
            let ours = event.paths.iter().any(|p| p.file_name() == name.as_deref());
            if !ours || !matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_)) {
                return;
            }
            // A file written in place (truncated, then written) is seen mid-write: read it once
            // the writes have settled. Writing a temporary file and renaming it over this one
            // (as configuration managers do) is never seen half written.
            std::thread::sleep(SETTLE);
            let outcome = Config::from_file(&file).map(&reload);
            match outcome {
                Ok(None) => {}
                Ok(Some(Ok(reloaded))) => tracing::info!(
                    target: "ratelimit",
                    file = %file.display(),
                    generation = reloaded.generation,
                    "reloaded from the changed configuration file",
                ),
                Err(error) | Ok(Some(Err(error))) => tracing::warn!(
                    target: "ratelimit",
                    file = %file.display(),
                    %error,
                    "the changed configuration file was not loaded: the running limits stay",
                ),
            }
        })
        .map_err(problem)?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(problem)?;
        Ok(FileWatch {
            _watcher: watcher,
            path,
        })
    }
}
