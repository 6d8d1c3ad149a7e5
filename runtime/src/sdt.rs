//! SDT markers of a user-space binary: its `.note.stapsdt` notes, each a
//! marker site (address, semaphore, provider, name, argument specs), made
//! file offsets for the uprobe PMU. Also how `process("PATH")` names
//! files: globs and bare program names, resolved as stap does.

use std::fs::File;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use stap_lang::sdt::{SdtMarker, parse_arg, split_args};

/// `NT_STAPSDT`, the note type of a marker site (owner `stapsdt`).
const NT_STAPSDT: u32 = 3;

/// The marker sites of the ELF at `path`, in note order; empty when it has
/// no `.note.stapsdt` section.
pub fn markers(path: &Path) -> Result<Vec<SdtMarker>, String> {
    let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // SAFETY: a read-only private mapping; a binary rewritten while we read
    // it gives wrong notes at worst (every access is bounds-checked).
    let data = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let elf = object::File::parse(&*data)
        .map_err(|e| format!("{} is not an ELF binary: {e}", path.display()))?;
    markers_in(&elf).map_err(|e| format!("{}: {e}", path.display()))
}

fn markers_in(elf: &object::File) -> Result<Vec<SdtMarker>, String> {
    let Some(notes) = elf.section_by_name(".note.stapsdt") else {
        return Ok(Vec::new());
    };
    let notes = notes.data().map_err(|e| e.to_string())?;
    let little = elf.is_little_endian();
    let word = if elf.is_64() { 8 } else { 4 };
    // Prelinked binaries moved their code after the notes were written:
    // `.stapsdt.base` is where the code was then (the note's `base`) and
    // is now (the section's address).
    let actual_base = elf.section_by_name(".stapsdt.base").map(|s| s.address());
    let symbol = |name: &str| {
        elf.symbols()
            .chain(elf.dynamic_symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .map(|s| s.address())
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let u32_at = |i: usize| {
            let b: [u8; 4] = notes[i..i + 4].try_into().unwrap_or_default();
            if little {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            }
        };
        let (name_size, desc_size, kind) =
            (u32_at(at) as usize, u32_at(at + 4) as usize, u32_at(at + 8));
        let name_start = at + 12;
        let desc_start = name_start + name_size.next_multiple_of(4);
        let desc_end = desc_start + desc_size;
        if desc_end > notes.len() {
            return Err("a truncated .note.stapsdt note".into());
        }
        let owner = &notes[name_start..name_start + name_size];
        if kind == NT_STAPSDT && owner.strip_suffix(&[0]).unwrap_or(owner) == b"stapsdt" {
            let desc = &notes[desc_start..desc_end];
            if let Some(site) = site(desc, word, little) {
                out.push(marker(elf, site, actual_base, &symbol)?);
            }
        }
        at = desc_end.next_multiple_of(4);
    }
    Ok(out)
}

/// One note's description: pc, base, semaphore (link-time addresses), then
/// provider, name and argument text, each NUL-terminated.
struct Site<'d> {
    pc: u64,
    base: u64,
    semaphore: u64,
    provider: &'d [u8],
    name: &'d [u8],
    args: &'d [u8],
}

fn site(desc: &[u8], word: usize, little: bool) -> Option<Site<'_>> {
    let address = |i: usize| -> Option<u64> {
        let bytes = desc.get(i * word..(i + 1) * word)?;
        let mut b = [0u8; 8];
        if little {
            b[..word].copy_from_slice(bytes);
            Some(u64::from_le_bytes(b))
        } else {
            b[8 - word..].copy_from_slice(bytes);
            Some(u64::from_be_bytes(b))
        }
    };
    let (pc, base, semaphore) = (address(0)?, address(1)?, address(2)?);
    let mut strings = desc.get(3 * word..)?.split(|b| *b == 0);
    Some(Site {
        pc,
        base,
        semaphore,
        provider: strings.next()?,
        name: strings.next()?,
        args: strings.next().unwrap_or_default(),
    })
}

fn marker(
    elf: &object::File,
    site: Site,
    actual_base: Option<u64>,
    symbol: &dyn Fn(&str) -> Option<u64>,
) -> Result<SdtMarker, String> {
    let provider = String::from_utf8_lossy(site.provider).into_owned();
    let name = String::from_utf8_lossy(site.name).into_owned();
    let pc = match actual_base {
        Some(actual) if site.base != 0 => site.pc.wrapping_add(actual.wrapping_sub(site.base)),
        _ => site.pc,
    };
    let offset = file_offset(elf, pc).ok_or_else(|| {
        format!("the marker {provider}:{name} is at {pc:#x}, outside every loadable segment")
    })?;
    // The semaphore lives in a data section (`.probes`); its file offset is
    // what the kernel's uprobe reference counter takes.
    let semaphore = match site.semaphore {
        0 => 0,
        address => file_offset(elf, address).ok_or_else(|| {
            format!(
                "the semaphore of the marker {provider}:{name} is at {address:#x}, \
                 outside the file's contents"
            )
        })?,
    };
    let text = String::from_utf8_lossy(site.args);
    let args = split_args(&text)
        .iter()
        .map(|spec| parse_arg(spec, site.pc, symbol))
        .collect();
    Ok(SdtMarker {
        provider,
        name,
        offset,
        semaphore,
        args,
    })
}

/// Virtual address → file offset through the loadable segment whose file
/// contents hold it.
fn file_offset(elf: &object::File, address: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let start = segment.address();
        let (file_offset, file_size) = segment.file_range();
        (address >= start && address - start < file_size).then(|| address - start + file_offset)
    })
}

/// The files `process("PATH")` names, as stap finds them: a pattern with
/// `*`, `?` or `[` is matched against the file system component by
/// component; a name without `/` is looked up in `$PATH`; each result
/// with its symbolic links resolved. Empty when nothing matches.
pub fn user_paths(pattern: &str) -> Vec<String> {
    let candidates: Vec<PathBuf> = if !pattern.contains('/') {
        std::env::var_os("PATH")
            .map(|dirs| {
                std::env::split_paths(&dirs)
                    .map(|dir| dir.join(pattern))
                    .filter(|p| is_executable(p))
                    .take(1)
                    .collect()
            })
            .unwrap_or_default()
    } else if pattern.contains(['*', '?']) {
        glob(pattern)
    } else {
        vec![PathBuf::from(pattern)]
    };
    let mut out: Vec<String> = candidates
        .into_iter()
        .filter(|p| p.is_file())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The paths matching an absolute or relative glob, component by component.
fn glob(pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![if pattern.starts_with('/') {
        PathBuf::from("/")
    } else {
        PathBuf::from(".")
    }];
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        let mut next = Vec::new();
        for dir in &found {
            if !part.contains(['*', '?']) {
                let candidate = dir.join(part);
                if candidate.exists() {
                    next.push(candidate);
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| !name.starts_with('.') || part.starts_with('.'))
                .filter(|name| stap_lang::sema::glob_match(part, name))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
        }
        found = next;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use stap_lang::sdt::SdtLocation;

    #[test]
    fn globs_and_program_names_resolve_to_files() {
        let dir = std::env::temp_dir().join(format!("stap-sdt-glob-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib64")).unwrap();
        std::fs::write(dir.join("lib64/libx.so.1"), "").unwrap();
        std::fs::write(dir.join("lib64/liby.so.1"), "").unwrap();
        let found = user_paths(&format!("{}/lib*/lib?.so.*", dir.display()));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].ends_with("lib64/libx.so.1"), "{found:?}");
        assert!(user_paths(&format!("{}/nothing*", dir.display())).is_empty());
        // A bare name is looked up in $PATH (sh is everywhere).
        assert!(user_paths("sh").first().is_some_and(|p| p.starts_with('/')));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Debian's python3 carries markers; where it does, every site decodes
    /// to a file offset inside the file, and its arguments are registers or
    /// memory (no undecodable spec).
    #[test]
    fn reads_the_markers_of_an_installed_binary() {
        let Some(python) = user_paths("/usr/bin/python3").into_iter().next() else {
            return;
        };
        let found = markers(Path::new(&python)).unwrap();
        let size = std::fs::metadata(&python).unwrap().len();
        for m in &found {
            assert!(m.offset < size && m.semaphore < size, "{m:?}");
            assert!(
                m.args
                    .iter()
                    .all(|a| !matches!(a.location, SdtLocation::Unsupported(_))),
                "{m:?}"
            );
        }
    }
}
