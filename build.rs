//! Embeds every tapset under stdlib/ into the binary, so an installed
//! `stap-rs` needs no data files next to it.

use std::fmt::Write;
use std::path::{Path, PathBuf};

// The names each tapset defines, found at build time so that a run parses
// only the files a script can reach.
#[path = "src/tapsets/scan.rs"]
#[allow(dead_code, reason = "the binary uses more of it than the build does")]
mod scan;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("stdlib");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    // A binary without its stdlib would fail every tapset probe with
    // "unknown probe point": refuse to build one.
    assert!(
        !files.is_empty(),
        "no tapsets under {}: the stdlib must be built in",
        root.display()
    );

    let mut code = String::from("/// Every tapset under stdlib/, with the names it may define.\n");
    code.push_str("pub static TAPSETS: &[Embedded] = &[\n");
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let relative = path.strip_prefix(&root).expect("collected under stdlib/");
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read tapset {}: {e}", path.display()));
        let names = scan::scan(&text);
        writeln!(
            code,
            "    Embedded {{ path: {:?}, text: include_str!({:?}), \
             functions: &{:?}, globals: &{:?}, aliases: &{:?} }},",
            relative.to_string_lossy(),
            path.display().to_string(),
            names.functions,
            names.globals,
            names.aliases,
        )
        .expect("writing to a String");
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("tapsets.rs"), code).expect("writing tapsets.rs");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read tapset directory {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot read tapset directory {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "stp" || e == "stpm") {
            files.push(path);
        }
    }
}
