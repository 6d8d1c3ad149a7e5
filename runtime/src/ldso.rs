//! Where the dynamic linker finds a shared library, for
//! `process(...).library("NAME")`: `/etc/ld.so.cache` (written by
//! ldconfig), then the default directories; and the libraries a program
//! loads (its `DT_NEEDED` names, transitively), which a library glob such
//! as `library("*")` is matched against, as stap does.

use std::path::Path;

use object::{Object, ObjectSection};

/// The default directories ld.so searches after its cache (x86_64).
const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// The path of shared library `name` (a file name such as `libc.so.6`) as
/// the dynamic linker would load it for an x86_64 program; `None` when
/// neither the cache nor the default directories have it.
pub fn resolve(name: &str) -> Option<String> {
    let cached = std::fs::read("/etc/ld.so.cache")
        .ok()
        .and_then(|cache| cache_lookup(&cache, name));
    cached
        .or_else(|| {
            DEFAULT_DIRS
                .iter()
                .map(|dir| format!("{dir}/{name}"))
                .find(|p| Path::new(p).is_file())
        })
        .map(|p| canonical(&p))
}

/// The libraries `program` loads, each once, resolved and canonical, in
/// breadth-first order from its own `DT_NEEDED` entries.
pub fn needed(program: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending = vec![program.to_string()];
    while let Some(file) = pending.pop() {
        for name in needed_names(&file) {
            if let Some(path) = resolve(&name)
                && !out.contains(&path)
            {
                out.push(path.clone());
                pending.insert(0, path);
            }
        }
    }
    out
}

fn canonical(path: &str) -> String {
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_string())
}

/// The `DT_NEEDED` names of a 64-bit little-endian ELF file.
fn needed_names(path: &str) -> Vec<String> {
    const DT_NEEDED: u64 = 1;
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(elf) = object::File::parse(&*data) else {
        return Vec::new();
    };
    if !elf.is_64() || !elf.is_little_endian() {
        return Vec::new();
    }
    let section = |name| elf.section_by_name(name).and_then(|s| s.data().ok());
    let (Some(dynamic), Some(strings)) = (section(".dynamic"), section(".dynstr")) else {
        return Vec::new();
    };
    let word = |entry: &[u8], at: usize| {
        u64::from_le_bytes(entry[at..at + 8].try_into().unwrap_or_default())
    };
    dynamic
        .chunks_exact(16)
        .filter(|entry| word(entry, 0) == DT_NEEDED)
        .filter_map(|entry| {
            let rest = strings.get(word(entry, 8) as usize..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            std::str::from_utf8(&rest[..end]).ok().map(str::to_string)
        })
        .collect()
}

/// `name` in a glibc `ld.so.cache` of the new format ("glibc-ld.so.cache1.1":
/// a 48-byte header, then 24-byte entries of flags, key and value string
/// offsets from the file's start), x86_64 libc6 entries only.
fn cache_lookup(cache: &[u8], name: &str) -> Option<String> {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64.
    const X86_64_LIBC6: u32 = 0x0303;
    let start = find(cache, MAGIC)?;
    let cache = &cache[start..];
    let u32_at = |at: usize| {
        cache
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let string_at = |at: usize| {
        let rest = cache.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    };
    let count = u32_at(20)? as usize;
    (0..count).find_map(|i| {
        let entry = 48 + i * 24;
        let flags = u32_at(entry)?;
        let key = string_at(u32_at(entry + 4)? as usize)?;
        (flags == X86_64_LIBC6 && key == name)
            .then(|| string_at(u32_at(entry + 8)? as usize).map(str::to_string))
            .flatten()
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libc is where this host's own programs load it from (`/bin/sh`'s
    /// mapping, read back from /proc).
    #[test]
    fn libc_resolves_where_the_running_shell_maps_it() {
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        let Some(mapped) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so.6"))
        else {
            eprintln!("this test binary maps no libc.so.6: nothing to compare");
            return;
        };
        assert_eq!(resolve("libc.so.6"), Some(canonical(mapped)));
        let self_exe = std::fs::read_link("/proc/self/exe").unwrap();
        let libs = needed(&self_exe.to_string_lossy());
        assert!(libs.contains(&canonical(mapped)), "{libs:?}");
        assert_eq!(resolve("libstap_rs_no_such_library.so.1"), None);
    }
}
