//! Where a uprobe goes: the file offset of a function in an ELF binary,
//! found in its symbol table (`.symtab`, then `.dynsym` for stripped
//! binaries). The uprobe PMU takes (path, file offset), so nothing is
//! written to tracefs `uprobe_events`.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UprobeError {
    Read {
        path: PathBuf,
        reason: String,
    },
    NotElf {
        path: PathBuf,
        reason: String,
    },
    NoSymbol {
        path: PathBuf,
        function: String,
    },
    /// The symbol's address lies in no loadable segment.
    NotMapped {
        path: PathBuf,
        function: String,
        address: u64,
    },
}

impl fmt::Display for UprobeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UprobeError::Read { path, reason } => {
                write!(f, "cannot read {}: {reason}", path.display())
            }
            UprobeError::NotElf { path, reason } => {
                write!(f, "{} is not an ELF binary: {reason}", path.display())
            }
            UprobeError::NoSymbol { path, function } => write!(
                f,
                "no function {function} in the symbol table of {}",
                path.display()
            ),
            UprobeError::NotMapped {
                path,
                function,
                address,
            } => write!(
                f,
                "function {function} of {} is at {address:#x}, outside every loadable segment",
                path.display()
            ),
        }
    }
}

impl std::error::Error for UprobeError {}

/// The file offset of `function`'s first instruction in the ELF at `path`.
pub fn function_offset(path: &Path, function: &str) -> Result<u64, UprobeError> {
    let read_error = |e: std::io::Error| UprobeError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = File::open(path).map_err(read_error)?;
    // SAFETY: the mapping is read-only and private; a binary rewritten
    // while we read it gives wrong symbols at worst (object bounds-checks
    // every access), as with any reader.
    let data = unsafe { memmap2::Mmap::map(&file) }.map_err(read_error)?;
    offset_in(&data, function).map_err(|error| match error {
        Lookup::NotElf(reason) => UprobeError::NotElf {
            path: path.to_path_buf(),
            reason,
        },
        Lookup::NoSymbol => UprobeError::NoSymbol {
            path: path.to_path_buf(),
            function: function.to_string(),
        },
        Lookup::NotMapped(address) => UprobeError::NotMapped {
            path: path.to_path_buf(),
            function: function.to_string(),
            address,
        },
    })
}

/// The file offsets of every function whose name matches `pattern` (`*`
/// and `?`), each once, by name: `process(...).function("*")`.
pub fn matching_offsets(path: &Path, pattern: &str) -> Result<Vec<(String, u64)>, UprobeError> {
    let read_error = |e: std::io::Error| UprobeError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = File::open(path).map_err(read_error)?;
    // SAFETY: as in `function_offset`.
    let data = unsafe { memmap2::Mmap::map(&file) }.map_err(read_error)?;
    let elf = object::File::parse(&*data).map_err(|e| UprobeError::NotElf {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut found: Vec<(String, u64)> = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?;
            stap_lang::sema::glob_match(pattern, name).then(|| (name.to_string(), s.address()))
        })
        .filter_map(|(name, address)| {
            elf.segments().find_map(|segment| {
                let start = segment.address();
                let (file_offset, file_size) = segment.file_range();
                (address >= start && address - start < file_size)
                    .then(|| (name.clone(), address - start + file_offset))
            })
        })
        .collect();
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    if found.is_empty() {
        return Err(UprobeError::NoSymbol {
            path: path.to_path_buf(),
            function: pattern.to_string(),
        });
    }
    Ok(found)
}

enum Lookup {
    NotElf(String),
    NoSymbol,
    NotMapped(u64),
}

fn offset_in(data: &[u8], function: &str) -> Result<u64, Lookup> {
    let elf = object::File::parse(data).map_err(|e| Lookup::NotElf(e.to_string()))?;
    let is_target = |symbol: &object::Symbol| {
        symbol.kind() == SymbolKind::Text
            && symbol.is_definition()
            && symbol.address() != 0
            && symbol.name() == Ok(function)
    };
    let address = elf
        .symbols()
        .find(is_target)
        .or_else(|| elf.dynamic_symbols().find(is_target))
        .map(|symbol| symbol.address())
        .or_else(|| init_fini(&elf, function))
        .ok_or(Lookup::NoSymbol)?;
    // Virtual address -> file offset through the loadable segment holding
    // it (PIE binaries and libraries included: both are relative).
    elf.segments()
        .find_map(|segment| {
            let start = segment.address();
            let (file_offset, file_size) = segment.file_range();
            (address >= start && address - start < file_size).then(|| address - start + file_offset)
        })
        .ok_or(Lookup::NotMapped(address))
}

/// `_init` and `_fini` of a stripped binary: the dynamic section still
/// points at them (`DT_INIT`, `DT_FINI`), since the loader calls them.
fn init_fini(elf: &object::File, function: &str) -> Option<u64> {
    const DT_INIT: u64 = 12;
    const DT_FINI: u64 = 13;
    let wanted = match function {
        "_init" => DT_INIT,
        "_fini" => DT_FINI,
        _ => return None,
    };
    if !elf.is_64() || !elf.is_little_endian() {
        return None;
    }
    let data = elf.section_by_name(".dynamic")?.data().ok()?;
    data.chunks_exact(16).find_map(|entry| {
        let word = |at: usize| u64::from_le_bytes(entry[at..at + 8].try_into().unwrap_or_default());
        (word(0) == wanted && word(8) != 0).then(|| word(8))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Compiles a small C program; `None` when no C compiler is installed.
    fn compile(dir: &Path, extra: &[&str]) -> Option<PathBuf> {
        let source = dir.join("t.c");
        std::fs::write(
            &source,
            "int stap_target(int x) { return x * 3; }\n\
             int main(int argc, char **argv) { (void)argv; return stap_target(argc) == 3; }\n",
        )
        .unwrap();
        let out = dir.join(format!("t{}", extra.len()));
        let status = Command::new("cc")
            .args(["-O0", "-o"])
            .arg(&out)
            .arg(&source)
            .args(extra)
            .status()
            .ok()?;
        status.success().then_some(out)
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("stap-uprobe-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `nm`'s address of the symbol, mapped by hand through `readelf -l`'s
    /// first executable LOAD segment: an independent computation.
    fn expected_offset(binary: &Path) -> Option<u64> {
        let nm = Command::new("nm").arg(binary).output().ok()?;
        let text = String::from_utf8_lossy(&nm.stdout);
        let line = text.lines().find(|l| l.ends_with(" stap_target"))?;
        let address = u64::from_str_radix(line.split_whitespace().next()?, 16).ok()?;
        let data = std::fs::read(binary).ok()?;
        let elf = object::File::parse(&*data).ok()?;
        elf.segments().find_map(|s| {
            let (off, size) = s.file_range();
            (address >= s.address() && address < s.address() + size)
                .then(|| address - s.address() + off)
        })
    }

    #[test]
    fn finds_a_function_in_a_pie_binary() {
        let dir = temp_dir("pie");
        let Some(binary) = compile(&dir, &[]) else {
            eprintln!("no C compiler: skipped");
            return;
        };
        let offset = function_offset(&binary, "stap_target").unwrap();
        if let Some(expected) = expected_offset(&binary) {
            assert_eq!(offset, expected);
        }
        // The bytes there are the function's: x86-64 `-O0` code starts
        // with `push %rbp` (0x55) or `endbr64` (f3 0f 1e fa).
        let data = std::fs::read(&binary).unwrap();
        let first = data[offset as usize];
        assert!(first == 0x55 || first == 0xf3, "unexpected byte {first:#x}");
    }

    #[test]
    fn finds_a_function_in_a_stripped_binary_through_dynsym() {
        let dir = temp_dir("stripped");
        let Some(binary) = compile(&dir, &["-rdynamic", "-s"]) else {
            eprintln!("no C compiler: skipped");
            return;
        };
        let offset = function_offset(&binary, "stap_target").unwrap();
        assert!(offset > 0);
    }

    #[test]
    fn missing_functions_and_files_are_errors() {
        let dir = temp_dir("missing");
        if let Some(binary) = compile(&dir, &[]) {
            assert!(matches!(
                function_offset(&binary, "no_such_function"),
                Err(UprobeError::NoSymbol { .. })
            ));
        }
        assert!(matches!(
            function_offset(Path::new("/nonexistent/binary"), "main"),
            Err(UprobeError::Read { .. })
        ));
        let text = dir.join("not-elf");
        std::fs::write(&text, "hello").unwrap();
        assert!(matches!(
            function_offset(&text, "main"),
            Err(UprobeError::NotElf { .. })
        ));
    }
}
