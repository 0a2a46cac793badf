//! Spotting a renamed `ratelimit` dependency, so that the error says to add `crate = "..."`
//! instead of failing to resolve `::ratelimit` somewhere in the expansion.
//!
//! The manifest is read as text, line by line, without a TOML parser: the check only ever
//! answers "renamed" when it is sure (no dependency named `ratelimit` in any table, and one
//! whose `package = "ratelimit"`); anything it cannot read means "not renamed".

use std::path::Path;

/// The name under which the crate being compiled depends on `ratelimit`, if it depends on it
/// only under another name. `None` when unsure, when the manifest cannot be read, and when
/// compiling `ratelimit` itself (its doctests included).
pub(crate) fn renamed_dependency() -> Option<String> {
    if std::env::var("CARGO_PKG_NAME").ok()? == "ratelimit" {
        return None;
    }
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let manifest = std::fs::read_to_string(Path::new(&dir).join("Cargo.toml")).ok()?;
    renamed_in(&manifest)
}

/// Which table a line of the manifest is in.
enum Table {
    /// `[dependencies]`, `[dev-dependencies]`, `[target.'cfg(..)'.build-dependencies]`...
    Dependencies,
    /// `[dependencies.name]` and the like.
    Dependency(String),
    /// Anything else, including `[workspace.dependencies]`.
    Other,
}

/// See [`renamed_dependency`]: the name as it is written in code (`-` read as `_`).
fn renamed_in(manifest: &str) -> Option<String> {
    let mut table = Table::Other;
    let mut direct = false;
    let mut renamed: Option<String> = None;
    let mut in_multiline_string = false;
    for raw in manifest.lines() {
        // A line inside a `"""` string could look like anything: skip them.
        let quotes = raw.matches("\"\"\"").count() + raw.matches("'''").count();
        if in_multiline_string || quotes % 2 == 1 {
            if quotes % 2 == 1 {
                in_multiline_string = !in_multiline_string;
            }
            continue;
        }
        let line = strip_comment(raw).trim();
        if let Some(header) = line.strip_prefix('[') {
            table = table_of(header.strip_suffix(']').unwrap_or(header));
            if let Table::Dependency(name) = &table {
                direct |= name == "ratelimit";
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let keys = split_keys(key);
        let value = value.trim();
        match &table {
            Table::Dependencies => {
                let Some(name) = keys.first() else {
                    continue;
                };
                direct |= name == "ratelimit";
                let package = match keys.get(1).map(String::as_str) {
                    // `name.package = "ratelimit"`
                    Some("package") => unquote(value) == "ratelimit",
                    // `name = { package = "ratelimit", .. }`
                    None => inline_package(value).is_some_and(|p| p == "ratelimit"),
                    Some(_) => false,
                };
                if package && renamed.is_none() {
                    renamed = Some(name.clone());
                }
            }
            Table::Dependency(name) => {
                if keys == ["package"] && unquote(value) == "ratelimit" && renamed.is_none() {
                    renamed = Some(name.clone());
                }
            }
            Table::Other => {}
        }
    }
    match (direct, renamed) {
        (false, Some(name)) if name != "ratelimit" => Some(name.replace('-', "_")),
        _ => None,
    }
}

/// The table a header (without its brackets) opens.
fn table_of(header: &str) -> Table {
    if header.starts_with('[') {
        return Table::Other; // `[[bin]]` and other arrays of tables
    }
    let keys = split_keys(header);
    let is_deps = |k: &String| {
        matches!(
            k.as_str(),
            "dependencies"
                | "dev-dependencies"
                | "build-dependencies"
                | "dev_dependencies"
                | "build_dependencies"
        )
    };
    let at = match keys.first().map(String::as_str) {
        Some("target") if keys.len() > 2 && is_deps(&keys[2]) => 2,
        _ if keys.first().is_some_and(is_deps) => 0,
        _ => return Table::Other,
    };
    match &keys[at + 1..] {
        [] => Table::Dependencies,
        [name] => Table::Dependency(name.clone()),
        _ => Table::Other,
    }
}

/// The `package` of an inline table `{ package = "x", version = "1" }`, if it has one.
fn inline_package(value: &str) -> Option<String> {
    let inner = value.strip_prefix('{')?.trim_end().strip_suffix('}')?;
    inner.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (split_keys(key) == ["package"]).then(|| unquote(value).to_owned())
    })
}

/// `a."b.c".d` -> `["a", "b.c", "d"]`.
fn split_keys(key: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in key.trim().chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '.') => keys.push(std::mem::take(&mut current).trim().to_owned()),
            (None, c) => current.push(c),
        }
    }
    keys.push(current.trim().to_owned());
    keys
}

/// A string value without its quotes (and anything after the closing one).
fn unquote(value: &str) -> &str {
    let value = value.trim();
    for q in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(q) {
            return rest.split(q).next().unwrap_or(rest);
        }
    }
    value
}

/// The line up to a `#` that is not inside a string.
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some('"'), '\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), c) if c == q && !escaped => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') => return &line[..i],
            _ => {}
        }
        escaped = false;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renamed_dependency_is_found() {
        let cases = [
            "[dependencies]\nlimiter = { package = \"ratelimit\", version = \"0.1\" }",
            "[dependencies]\nlimiter = { version = \"0.1\", features = [\"redis\"], package = 'ratelimit' } # why",
            "[dev-dependencies]\nlimiter.package = \"ratelimit\"\nlimiter.version = \"0.1\"",
            "[target.'cfg(unix)'.dependencies]\nlimiter = { package = \"ratelimit\", path = \"../r\" }",
            "[dependencies.limiter]\nversion = \"0.1\"\npackage = \"ratelimit\"",
            "[dependencies]\n\"limiter\" = { package = \"ratelimit\" }\nserde = \"1\"",
        ];
        for manifest in cases {
            assert_eq!(
                renamed_in(manifest).as_deref(),
                Some("limiter"),
                "{manifest}"
            );
        }
        assert_eq!(
            renamed_in("[dependencies]\nmy-limits = { package = \"ratelimit\" }").as_deref(),
            Some("my_limits")
        );
    }

    #[test]
    fn anything_else_is_not_renamed() {
        let cases = [
            "",
            "not toml at all = = [",
            "[dependencies]\nratelimit = \"0.1\"",
            "[dependencies]\nratelimit.workspace = true",
            "[dependencies.ratelimit]\nversion = \"0.1\"",
            // Depended on under both names: `::ratelimit` resolves.
            "[dependencies]\nratelimit = \"0.1\"\n[dev-dependencies]\nlimiter = { package = \"ratelimit\" }",
            "[dev-dependencies]\nlimiter = { package = \"ratelimit\" }\n[dependencies]\nratelimit = \"0.1\"",
            // Not a dependency of this crate.
            "[workspace.dependencies]\nlimiter = { package = \"ratelimit\" }",
            "[package]\ndescription = \"\"\"\n[dependencies]\nlimiter = { package = \"ratelimit\" }\n\"\"\"",
            "[dependencies]\n# limiter = { package = \"ratelimit\" }",
            "[dependencies]\nlimiter = { package = \"ratelimit-core\" }",
            // Inherited from the workspace: the rename is not visible here.
            "[dependencies]\nlimiter.workspace = true",
        ];
        for manifest in cases {
            assert_eq!(renamed_in(manifest), None, "{manifest}");
        }
    }
}
