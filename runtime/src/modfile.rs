//! Kernel modules on disk, for the BTF of a module that is not loaded:
//! stap compiles `module("nfsd").function(...)` without the module loaded,
//! so we find its file as modprobe does and read the `.BTF` section, which
//! is split BTF over the vmlinux it was built with.
//!
//! The file is looked up under `/lib/modules/RELEASE`: in `modules.dep`
//! (depmod's index), else in `modules.order` (the build's list, present in
//! a kernel package that depmod has not run over), else by walking
//! `kernel/`. It is decompressed by its magic bytes (xz, zstd, gzip, or a
//! plain ELF file).

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

/// Where the running kernel's modules are, one directory per release.
pub const MODULES_ROOT: &str = "/lib/modules";

/// Suffixes a module file may carry, as kmod tries them.
const COMPRESSIONS: [&str; 4] = ["", ".xz", ".zst", ".gz"];

/// A module's name as the kernel spells it: `-` in a file name is `_`.
pub fn canonical_name(name: &str) -> String {
    name.replace('-', "_")
}

/// The names of the loaded modules (`/proc/modules`), canonical.
pub fn loaded_modules() -> HashSet<String> {
    std::fs::read_to_string("/proc/modules")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(canonical_name)
        .collect()
}

/// Whether module `name` is loaded now.
pub fn is_loaded(name: &str) -> bool {
    loaded_modules().contains(&canonical_name(name))
}

/// The module name a file path stands for: `kernel/fs/nfsd/nfsd.ko.xz` is
/// `nfsd`.
fn name_of_path(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = file.split_once(".ko")?.0;
    Some(canonical_name(stem))
}

/// The file of module `name` under `release_dir` (`/lib/modules/RELEASE`).
pub fn find(release_dir: &Path, name: &str) -> Option<PathBuf> {
    let wanted = canonical_name(name);
    if let Ok(dep) = std::fs::read_to_string(release_dir.join("modules.dep")) {
        // `kernel/fs/nfsd/nfsd.ko.xz: kernel/net/sunrpc/sunrpc.ko.xz ...`
        let found = dep
            .lines()
            .filter_map(|line| line.split_once(':').map(|(path, _)| path.trim()))
            .find(|path| name_of_path(path).as_deref() == Some(wanted.as_str()));
        if let Some(path) = found {
            return Some(release_dir.join(path));
        }
    }
    if let Ok(order) = std::fs::read_to_string(release_dir.join("modules.order")) {
        // The build's names, without the packager's compression suffix.
        for path in order.lines().map(str::trim) {
            if name_of_path(path).as_deref() != Some(wanted.as_str()) {
                continue;
            }
            let found = COMPRESSIONS
                .iter()
                .map(|suffix| release_dir.join(format!("{path}{suffix}")))
                .find(|candidate| candidate.is_file());
            if found.is_some() {
                return found;
            }
        }
    }
    walk(&release_dir.join("kernel"), &wanted)
}

/// Searches `dir` for a file naming module `wanted` (canonical).
fn walk(dir: &Path, wanted: &str) -> Option<PathBuf> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(_) => {
                    let name = entry.file_name();
                    if name_of_path(&name.to_string_lossy()).as_deref() == Some(wanted) {
                        return Some(path);
                    }
                }
                Err(_) => {}
            }
        }
    }
    None
}

/// The module file's ELF bytes, decompressed.
pub fn read_elf(path: &Path) -> Result<Vec<u8>, String> {
    let raw = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        format!("cannot decompress {} ({what}): {e}", path.display())
    };
    let mut out = Vec::new();
    match raw.as_slice() {
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => {
            lzma_rs::xz_decompress(&mut raw.as_slice(), &mut out).map_err(|e| failed("xz", &e))?
        }
        [0x28, 0xb5, 0x2f, 0xfd, ..] => {
            ruzstd::decoding::StreamingDecoder::new(raw.as_slice())
                .map_err(|e| failed("zstd", &e))?
                .read_to_end(&mut out)
                .map_err(|e| failed("zstd", &e))?;
        }
        [0x1f, 0x8b, ..] => {
            flate2::read::GzDecoder::new(raw.as_slice())
                .read_to_end(&mut out)
                .map_err(|e| failed("gzip", &e))?;
        }
        [0x7f, b'E', b'L', b'F', ..] => out = raw,
        _ => {
            return Err(format!(
                "{} is neither an ELF file nor xz, zstd or gzip",
                path.display()
            ));
        }
    }
    Ok(out)
}

/// The `.BTF` section of an ELF file (a module, or a vmlinux image).
pub fn btf_section(elf: &[u8], path: &Path) -> Result<Vec<u8>, String> {
    let file = object::File::parse(elf)
        .map_err(|e| format!("{} is not a valid ELF file: {e}", path.display()))?;
    let section = file.section_by_name(".BTF").ok_or_else(|| {
        format!(
            "{} has no .BTF section (built without CONFIG_DEBUG_INFO_BTF_MODULES)",
            path.display()
        )
    })?;
    section
        .data()
        .map(<[u8]>::to_vec)
        .map_err(|e| format!("cannot read the .BTF section of {}: {e}", path.display()))
}

/// The split BTF of the module file at `path`.
pub fn module_btf(path: &Path) -> Result<Vec<u8>, String> {
    btf_section(&read_elf(path)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_module_paths() {
        assert_eq!(
            name_of_path("kernel/fs/nfsd/nfsd.ko.xz").as_deref(),
            Some("nfsd")
        );
        assert_eq!(
            name_of_path("kernel/drivers/net/virtio-net.ko").as_deref(),
            Some("virtio_net")
        );
        assert_eq!(name_of_path("kernel/README"), None);
    }

    #[test]
    fn modules_dep_is_read_before_the_tree() {
        let dir = std::env::temp_dir().join(format!("stap-rs-modfile-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("kernel/fs/a")).unwrap();
        std::fs::create_dir_all(dir.join("updates")).unwrap();
        std::fs::write(dir.join("kernel/fs/a/foo-bar.ko"), b"x").unwrap();
        std::fs::write(dir.join("updates/foo_bar.ko.zst"), b"x").unwrap();
        // Without an index, the tree is walked.
        assert_eq!(
            find(&dir, "foo_bar"),
            Some(dir.join("kernel/fs/a/foo-bar.ko"))
        );
        // modules.order names files without their compression suffix.
        std::fs::write(dir.join("modules.order"), "updates/foo_bar.ko\n").unwrap();
        assert_eq!(
            find(&dir, "foo-bar"),
            Some(dir.join("updates/foo_bar.ko.zst"))
        );
        std::fs::write(
            dir.join("modules.dep"),
            "kernel/fs/a/foo-bar.ko: kernel/fs/b/dep.ko\n",
        )
        .unwrap();
        assert_eq!(
            find(&dir, "foo_bar"),
            Some(dir.join("kernel/fs/a/foo-bar.ko"))
        );
        assert_eq!(find(&dir, "absent"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_compression_is_a_clear_error() {
        let path = std::env::temp_dir().join(format!("stap-rs-modfile-{}.ko", std::process::id()));
        std::fs::write(&path, b"not a module").unwrap();
        let error = read_elf(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(error.contains("neither an ELF file"), "{error}");
    }
}
