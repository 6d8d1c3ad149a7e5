//! The tapset library: the stdlib embedded at build time, plus `-I` dirs.

use std::path::Path;

include!(concat!(env!("OUT_DIR"), "/tapsets.rs"));

/// A tapset's display name (as diagnostics show it) and its text.
pub struct TapsetText {
    pub name: String,
    pub text: String,
}

/// The embedded stdlib first, then every `*.stp` under each `-I` dir, in
/// path order so that runs are reproducible.
pub fn load(include_dirs: &[impl AsRef<Path>]) -> Result<Vec<TapsetText>, String> {
    let mut out: Vec<TapsetText> = TAPSETS
        .iter()
        .map(|(path, text)| TapsetText {
            name: format!("<stdlib>/{path}"),
            text: (*text).to_string(),
        })
        .collect();
    for dir in include_dirs {
        let dir = dir.as_ref();
        let mut found = Vec::new();
        collect(dir, &mut found)
            .map_err(|e| format!("cannot read tapset directory {}: {e}", dir.display()))?;
        found.sort();
        for path in found {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read tapset {}: {e}", path.display()))?;
            out.push(TapsetText {
                name: path.display().to_string(),
                text,
            });
        }
    }
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "stp") {
            out.push(path);
        }
    }
    Ok(())
}
