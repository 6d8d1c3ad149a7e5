//! Where a uprobe goes: the file offset of a function in an ELF binary,
//! found in its symbol table (`.symtab`, then `.dynsym` for stripped
//! binaries). The uprobe PMU takes (path, file offset), so nothing is
//! written to tracefs `uprobe_events`.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ObjectSymbolTable, SymbolKind};

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

/// The PLT stubs of the ELF at `path`, as `(function, file offset)` by
/// name: what `process(PATH).plt("PATTERN")` probes. Each stub is found by
/// decoding its `jmp *GOT(%rip)` and naming the function whose relocation
/// fills that GOT slot: `R_X86_64_JUMP_SLOT` for the stubs of `.plt.sec`
/// (IBT binaries) or else of `.plt` (after its header), `R_X86_64_GLOB_DAT`
/// for those of `.plt.got` (functions whose address is also taken), as
/// `objdump -d` names them `NAME@plt`. x86_64 only; empty for a binary
/// without a PLT (static, `-fno-plt`).
pub fn plt_entries(path: &Path) -> Result<Vec<(String, u64)>, UprobeError> {
    let read_error = |e: std::io::Error| UprobeError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let file = File::open(path).map_err(read_error)?;
    // SAFETY: as in `function_offset`.
    let data = unsafe { memmap2::Mmap::map(&file) }.map_err(read_error)?;
    let not_elf = |reason: String| UprobeError::NotElf {
        path: path.to_path_buf(),
        reason,
    };
    let elf = object::File::parse(&*data).map_err(|e| not_elf(e.to_string()))?;
    if elf.architecture() != object::Architecture::X86_64 {
        return Err(not_elf(format!(
            "PLT probes read x86_64 stubs; this binary is {:?}",
            elf.architecture()
        )));
    }
    const R_X86_64_GLOB_DAT: u64 = 6;
    const R_X86_64_JUMP_SLOT: u64 = 7;
    let mut slots = got_slots(&elf, ".rela.plt", R_X86_64_JUMP_SLOT);
    slots.extend(got_slots(&elf, ".rela.dyn", R_X86_64_GLOB_DAT));
    let mut found = Vec::new();
    let lazy = match elf.section_by_name(".plt.sec") {
        Some(section) => vec![(section, 0)],
        // `.plt` starts with a 16-byte header that calls the resolver.
        None => elf
            .section_by_name(".plt")
            .map(|s| (s, 16))
            .into_iter()
            .collect(),
    };
    let got = elf.section_by_name(".plt.got").map(|s| (s, 0));
    for (section, first) in lazy.into_iter().chain(got) {
        let code = section.data().map_err(|e| not_elf(e.to_string()))?;
        // Stubs are 16 bytes, or 8 in a `.plt.got` without IBT (no endbr64).
        let endbr64 = [0xf3, 0x0f, 0x1e, 0xfa];
        let stride = if section.name() == Ok(".plt.got") && !code.starts_with(&endbr64) {
            8
        } else {
            16
        };
        for at in (first..code.len()).step_by(stride) {
            let stub = &code[at..code.len().min(at + stride)];
            // `ff 25 disp32`, possibly after endbr64 and a bnd prefix.
            let Some(jmp) = stub.windows(2).position(|w| w == [0xff, 0x25]) else {
                continue;
            };
            let Some(disp) = stub.get(jmp + 2..jmp + 6) else {
                continue;
            };
            let disp = i32::from_le_bytes(disp.try_into().unwrap_or_default()) as i64;
            let address = section.address() + at as u64;
            let slot = (address + jmp as u64 + 6).wrapping_add_signed(disp);
            let Some((_, name)) = slots.iter().find(|(s, _)| *s == slot) else {
                continue;
            };
            if let Some(offset) = file_offset(&elf, address) {
                found.push((name.clone(), offset));
            }
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    Ok(found)
}

/// `(GOT slot, function)` of each relocation of type `kind` in the RELA
/// section `section` that names a dynamic symbol.
fn got_slots(elf: &object::File, section: &str, kind: u64) -> Vec<(u64, String)> {
    let Some(rela) = elf.section_by_name(section).and_then(|s| s.data().ok()) else {
        return Vec::new();
    };
    let Some(dynsym) = elf.dynamic_symbol_table() else {
        return Vec::new();
    };
    let word = |entry: &[u8], at: usize| {
        u64::from_le_bytes(entry[at..at + 8].try_into().unwrap_or_default())
    };
    rela.chunks_exact(24)
        .filter(|entry| word(entry, 8) & 0xffff_ffff == kind)
        .filter_map(|entry| {
            let symbol = object::SymbolIndex((word(entry, 8) >> 32) as usize);
            let name = dynsym.symbol_by_index(symbol).ok()?.name().ok()?;
            (!name.is_empty()).then(|| (word(entry, 0), name.to_string()))
        })
        .collect()
}

/// Virtual address -> file offset through the loadable segment holding it.
fn file_offset(elf: &object::File, address: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let start = segment.address();
        let (file_offset, file_size) = segment.file_range();
        (address >= start && address - start < file_size).then(|| address - start + file_offset)
    })
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

    /// A fresh directory, removed when the guard drops.
    fn temp_dir(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("stap-uprobe-{tag}-"))
            .tempdir()
            .unwrap()
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
        let temp = temp_dir("pie");
        let dir = temp.path();
        let Some(binary) = compile(dir, &[]) else {
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
        let temp = temp_dir("stripped");
        let dir = temp.path();
        let Some(binary) = compile(dir, &["-rdynamic", "-s"]) else {
            eprintln!("no C compiler: skipped");
            return;
        };
        let offset = function_offset(&binary, "stap_target").unwrap();
        assert!(offset > 0);
    }

    #[test]
    fn missing_functions_and_files_are_errors() {
        let temp = temp_dir("missing");
        let dir = temp.path();
        if let Some(binary) = compile(dir, &[]) {
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

    /// The PLT stubs as `objdump -d` names them (`NAME@plt`), with and
    /// without IBT stubs (`.plt.sec`), mapped to file offsets by hand.
    #[test]
    fn plt_entries_match_objdump() {
        let temp = temp_dir("plt");
        let dir = temp.path();
        let source = dir.join("p.c");
        std::fs::write(
            &source,
            "#include <stdlib.h>\n#include <unistd.h>\n\
             int main(void) { return (getenv(\"X\") != 0) + (getpid() == 0); }\n",
        )
        .unwrap();
        for (tag, extra) in [
            ("lazy", &[][..]),
            ("ibt", &["-fcf-protection=full", "-Wl,-z,ibtplt"][..]),
        ] {
            let out = dir.join(tag);
            let built = Command::new("cc")
                .args(["-O1", "-o"])
                .arg(&out)
                .arg(&source)
                .args(extra)
                .status();
            if !built.is_ok_and(|s| s.success()) {
                eprintln!("no C compiler (or no IBT support): skipping {tag}");
                continue;
            }
            let Ok(objdump) = Command::new("objdump").arg("-d").arg(&out).output() else {
                eprintln!("no objdump: skipping");
                return;
            };
            let data = std::fs::read(&out).unwrap();
            let elf = object::File::parse(&*data).unwrap();
            let mut expected: Vec<(String, u64)> = String::from_utf8_lossy(&objdump.stdout)
                .lines()
                .filter_map(|l| {
                    let (address, rest) = l.split_once(" <")?;
                    let name = rest.strip_suffix("@plt>:")?;
                    let address = u64::from_str_radix(address, 16).ok()?;
                    Some((name.to_string(), file_offset(&elf, address)?))
                })
                .collect();
            expected.sort();
            let found = plt_entries(&out).unwrap();
            assert!(found.iter().any(|(n, _)| n == "getpid"), "{tag}: {found:?}");
            assert_eq!(found, expected, "{tag}");
        }
    }
}
