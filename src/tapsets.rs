//! The tapset library: the stdlib embedded at build time, plus `-I` dirs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/tapsets.rs"));

/// A tapset's display name (as diagnostics show it) and its text.
pub struct TapsetText {
    pub name: String,
    pub text: String,
    /// A `.stpm` file: it only defines macros, which every other file sees.
    pub macros: bool,
}

/// Which subdirectories of a tapset directory apply to this machine.
pub struct SearchKey<'a> {
    /// `uname -m`, e.g. `x86_64`.
    pub arch: &'a str,
    /// The kernel's release (`6.12.48+deb12-amd64`), version (`6.12.48`)
    /// and family (`6.12`), most specific first.
    pub versions: Vec<String>,
}

/// The embedded stdlib first, then each `-I` dir searched as stap does:
/// under every dir, the subdirectories `linux/VERSION/ARCH`,
/// `VERSION/ARCH`, `linux/VERSION`, `VERSION`, ..., `linux/ARCH`, `ARCH`,
/// `linux`, and the dir itself, most specific first. A file whose name was
/// already found in a more specific directory is skipped (that is how
/// `linux/x86_64/aux_syscalls.stp` replaces `linux/aux_syscalls.stp`).
/// `.stpm` macro files come first, since their macros are visible to
/// every file. Within a directory, files go in name order so that runs
/// are reproducible.
pub fn load(include_dirs: &[impl AsRef<Path>], key: &SearchKey) -> Result<Vec<TapsetText>, String> {
    let stdlib: Vec<TapsetText> = TAPSETS
        .iter()
        .map(|(path, text)| TapsetText {
            name: format!("<stdlib>/{path}"),
            text: (*text).to_string(),
            macros: path.ends_with(".stpm"),
        })
        .collect();
    let mut macro_files = Vec::new();
    let mut script_files = Vec::new();
    for dir in include_dirs {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            // As stap: a missing directory adds no tapsets.
            eprintln!("WARNING: tapset directory {} does not exist", dir.display());
            continue;
        }
        let mut seen = HashSet::new();
        for sub in subdirectories(key) {
            let path = if sub.is_empty() {
                dir.to_path_buf()
            } else {
                dir.join(&sub)
            };
            for file in files_in(&path)
                .map_err(|e| format!("cannot read tapset directory {}: {e}", path.display()))?
            {
                let Some(name) = file.file_name().map(|n| n.to_os_string()) else {
                    continue;
                };
                if !seen.insert(name) {
                    continue;
                }
                match file.extension().and_then(|e| e.to_str()) {
                    Some("stpm") => macro_files.push(file),
                    Some("stp") => script_files.push(file),
                    _ => {}
                }
            }
        }
    }
    let mut found = Vec::new();
    for (path, macros) in macro_files
        .into_iter()
        .map(|p| (p, true))
        .chain(script_files.into_iter().map(|p| (p, false)))
    {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read tapset {}: {e}", path.display()))?;
        found.push(TapsetText {
            name: path.display().to_string(),
            text,
            macros,
        });
    }
    // Every macro file first: its macros are visible to every script.
    let (mut out, scripts): (Vec<_>, Vec<_>) = stdlib.into_iter().partition(|t| t.macros);
    let (found_macros, found_scripts): (Vec<_>, Vec<_>) = found.into_iter().partition(|t| t.macros);
    out.extend(found_macros);
    out.extend(scripts);
    out.extend(found_scripts);
    Ok(out)
}

/// The subdirectories of a tapset directory, most specific first (stap's
/// order: each version directory with its arch variant first, then the
/// runtime variant `linux/` of each before it).
fn subdirectories(key: &SearchKey) -> Vec<String> {
    let mut versions: Vec<String> = key.versions.clone();
    versions.push(String::new());
    let mut with_arch = Vec::new();
    for v in versions {
        with_arch.push(join(&v, key.arch));
        with_arch.push(v);
    }
    let mut out = Vec::new();
    for v in with_arch {
        out.push(join("linux", &v));
        out.push(v);
    }
    out
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

/// The `.stp` and `.stpm` files directly in `dir`, in name order; a
/// missing directory has none.
fn files_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let tapset = path.extension().is_some_and(|e| e == "stp" || e == "stpm");
        if tapset && path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdirectories_go_from_most_specific_to_the_dir_itself() {
        let key = SearchKey {
            arch: "x86_64",
            versions: vec!["6.1".into()],
        };
        assert_eq!(
            subdirectories(&key),
            [
                "linux/6.1/x86_64",
                "6.1/x86_64",
                "linux/6.1",
                "6.1",
                "linux/x86_64",
                "x86_64",
                "linux",
                ""
            ]
        );
    }
}
