//! The tapset library: the stdlib embedded at build time, plus `-I` dirs,
//! each file with the names it may define (`scan`), so that elaboration
//! parses only the files a script reaches.

pub mod scan;

use crate::out::errln;
use stap_lang::sema::Declared;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// A stdlib file as build.rs embeds it.
pub struct Embedded {
    /// Relative to stdlib/.
    pub path: &'static str,
    pub text: &'static str,
    pub functions: &'static [&'static str],
    pub globals: &'static [&'static str],
    pub aliases: &'static [&'static str],
}

include!(concat!(env!("OUT_DIR"), "/tapsets.rs"));

/// A tapset's display name (as diagnostics show it) and its text.
pub struct TapsetText {
    pub name: String,
    pub text: String,
    /// A `.stpm` file: it only defines macros, which every other file sees.
    pub macros: bool,
    /// The names it may define (see `scan`).
    pub declared: Declared,
}

impl TapsetText {
    /// A file read at run time, scanned for the names it defines.
    pub fn scanned(name: String, text: String, macros: bool) -> TapsetText {
        let names = scan::scan(&text);
        TapsetText {
            name,
            text,
            macros,
            declared: Declared {
                functions: names.functions,
                globals: names.globals,
                aliases: names.aliases,
            },
        }
    }
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
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
        .map(|embedded| TapsetText {
            name: format!("<stdlib>/{}", embedded.path),
            text: embedded.text.to_string(),
            macros: embedded.path.ends_with(".stpm"),
            declared: Declared {
                functions: owned(embedded.functions),
                globals: owned(embedded.globals),
                aliases: owned(embedded.aliases),
            },
        })
        .collect();
    let mut macro_files = Vec::new();
    let mut script_files = Vec::new();
    for dir in include_dirs {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            // As stap: a missing directory adds no tapsets.
            errln!("WARNING: tapset directory {} does not exist", dir.display());
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
        found.push(TapsetText::scanned(
            path.display().to_string(),
            text,
            macros,
        ));
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
    use stap_lang::kernel::KernelFacts;
    use stap_lang::parse;
    use stap_lang::preprocess::{MacroLibrary, PreprocessEnv};
    use stap_lang::source::SourceMap;
    use stap_lang::testing::FakeKernel;

    /// Parses each file (macro files first) and returns, for every file
    /// that parses, the names it defines and the names `declared` says.
    fn defined_and_declared(files: &[TapsetText]) -> Vec<(String, Declared, Declared)> {
        let kernel = FakeKernel::new();
        let config = |name: &str| kernel.config(name);
        let env = PreprocessEnv {
            kernel: kernel.version(),
            arch: "x86_64".into(),
            config: &config,
            args: &[],
        };
        let mut map = SourceMap::new();
        let mut macros = MacroLibrary::default();
        let mut out = Vec::new();
        for file in files.iter().filter(|f| f.macros) {
            let id = map.add(file.name.clone(), file.text.clone());
            parse::parse_macro_file(&map, id, &env, &mut macros);
        }
        for file in files.iter().filter(|f| !f.macros) {
            let id = map.add(file.name.clone(), file.text.clone());
            let parsed = parse::parse_file_with(&map, id, &env, &macros);
            if parsed.diags.iter().any(|d| d.is_error()) {
                continue;
            }
            let defined = Declared::of(&parsed.file);
            out.push((file.name.clone(), defined, file.declared.clone()));
        }
        out
    }

    /// Elaboration parses only the files whose declared names include one
    /// it needs: a name the scan missed would hide a definition.
    fn assert_declared_covers_defined(files: &[TapsetText]) -> usize {
        let checked = defined_and_declared(files);
        for (name, defined, declared) in &checked {
            let missing = |real: &[String], found: &[String]| -> Vec<String> {
                real.iter()
                    .filter(|n| !found.contains(n))
                    .cloned()
                    .collect()
            };
            assert_eq!(
                (
                    missing(&defined.functions, &declared.functions),
                    missing(&defined.globals, &declared.globals),
                    missing(&defined.aliases, &declared.aliases),
                ),
                (vec![], vec![], vec![]),
                "{name}: names the scan missed (functions, globals, aliases)"
            );
        }
        checked.len()
    }

    #[test]
    fn the_build_time_index_covers_every_stdlib_definition() {
        let files = load(
            &[] as &[&Path],
            &SearchKey {
                arch: "x86_64",
                versions: vec![],
            },
        )
        .expect("the stdlib loads");
        let checked = assert_declared_covers_defined(&files);
        assert_eq!(checked, files.iter().filter(|f| !f.macros).count());
    }

    /// The run-time scan of `-I` dirs, over all of stap's own tapsets
    /// (`../shared/stap-corpus`, or `$STAP_CORPUS`), when present.
    #[test]
    fn the_scan_covers_every_definition_in_stap_tapsets() {
        let corpus = match std::env::var_os("STAP_CORPUS") {
            Some(dir) => PathBuf::from(dir),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/stap-corpus"),
        };
        if !corpus.is_dir() {
            errln!("skipped: ../shared/stap-corpus is absent");
            return;
        }
        let mut files = Vec::new();
        let mut dirs = vec![corpus.join("tapset")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("a tapset dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let macros = path.extension().is_some_and(|e| e == "stpm");
                if macros || path.extension().is_some_and(|e| e == "stp") {
                    let text = std::fs::read_to_string(&path).expect("a tapset");
                    files.push(TapsetText::scanned(
                        path.display().to_string(),
                        text,
                        macros,
                    ));
                }
            }
        }
        let checked = assert_declared_covers_defined(&files);
        assert!(checked > 450, "only {checked} of stap's tapsets parse");
    }

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
