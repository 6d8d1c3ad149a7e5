//! Separate debug files: where the DWARF of a stripped binary lives, found
//! as gdb and stap find it. Distributions strip their binaries and ship the
//! DWARF apart (Debian's `-dbgsym` packages, Fedora's `-debuginfo`), in a
//! file named after the binary's build id, or named by the binary's
//! `.gnu_debuglink` section together with a CRC of the debug file.
//!
//! The places looked at, in gdb's order:
//! 1. `ROOT/.build-id/xx/rest.debug`, where `xxrest` is the build id in hex
//!    (the debug file must carry the same build id);
//! 2. the `.gnu_debuglink` name in the binary's directory, then in its
//!    `.debug/` subdirectory, then under `ROOT` followed by the binary's
//!    directory (the debug file's CRC-32 must match the link's).
//!
//! `ROOT` is `/usr/lib/debug` ([`DEBUG_ROOT`]).

use std::fs::File;
use std::path::{Path, PathBuf};

use object::Object;

/// gdb's and stap's default debug-file directory.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The separate debug file of the ELF binary `binary` (parsed as `elf`),
/// looked for under `root` and beside the binary; `None` when there is
/// none whose build id or CRC matches.
pub fn find(binary: &Path, elf: &object::File<'_>, root: &Path) -> Option<PathBuf> {
    if let Ok(Some(id)) = elf.build_id()
        && id.len() >= 2
    {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let candidate = root
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        if build_id_of(&candidate).as_deref() == Some(id) {
            return Some(candidate);
        }
    }
    let (name, crc) = elf.gnu_debuglink().ok().flatten()?;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    // The link names a file, not a path: anything else is not followed.
    if name.components().count() != 1 {
        return None;
    }
    // gdb resolves the binary's symbolic links first: /usr/bin/x -> ../lib/y
    // looks next to y.
    let real = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
    let dir = real.parent()?;
    let under_root = root.join(dir.strip_prefix("/").unwrap_or(dir));
    [
        dir.join(name),
        dir.join(".debug").join(name),
        under_root.join(name),
    ]
    .into_iter()
    // The binary's own name may equal the link's: never the binary itself.
    .filter(|candidate| *candidate != real)
    .find(|candidate| crc_of(candidate) == Some(crc))
}

/// The build id of the ELF file at `path`, if it reads and has one.
fn build_id_of(path: &Path) -> Option<Vec<u8>> {
    let file = File::open(path).ok()?;
    // SAFETY: a private read-only mapping; a file rewritten while we read it
    // gives a wrong answer at worst (every access is checked).
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = object::File::parse(&*data).ok()?;
    elf.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// The CRC-32 of the whole file at `path` (the one `.gnu_debuglink` holds).
fn crc_of(path: &Path) -> Option<u32> {
    let file = File::open(path).ok()?;
    // SAFETY: as in build_id_of.
    let data = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    Some(crc32(&data))
}

/// CRC-32 as zlib and gdb's `gnu_debuglink_crc32` compute it (reflected
/// polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF).
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut bit = 0;
            while bit < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                bit += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |crc, &byte| {
        TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    fn run(program: &str, args: &[&std::ffi::OsStr]) {
        let status = Command::new(program)
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(status.success(), "{program} {args:?} failed");
    }

    /// A `-g` binary split as distributions do: its DWARF moved to
    /// `debug`, the binary stripped, with a build id and a debuglink.
    fn split(test: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let (dir, binary) =
            crate::dwarf::tests::compile(&format!("split-{test}"), &["-g", "-Wl,--build-id"]);
        let debug = split_binary(&binary);
        (dir, binary, debug)
    }

    fn split_binary(binary: &Path) -> PathBuf {
        let debug = binary.with_file_name("target.debug");
        run(
            "objcopy",
            &[
                "--only-keep-debug".as_ref(),
                binary.as_os_str(),
                debug.as_os_str(),
            ],
        );
        run("strip", &["--strip-debug".as_ref(), binary.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        run("objcopy", &[link.as_ref(), binary.as_os_str()]);
        debug
    }

    #[test]
    fn a_stripped_binary_has_the_prototypes_and_lines_of_its_debug_file() {
        let (_dir, binary) = crate::dwarf::tests::compile("split-read", &["-g", "-Wl,--build-id"]);
        // Line 20 of the test program is main's `return f(argc, argv[0]);`.
        let spec = "main@target.c:20";
        let before = crate::lines::statement_offset(&binary, spec).expect("the line, unsplit");
        split_binary(&binary);
        let data = std::fs::read(&binary).expect("reading the binary");
        let elf = object::File::parse(&*data).expect("an ELF binary");
        assert!(elf.section_by_name(".debug_info").is_none(), "stripped");

        let functions = crate::dwarf::DwarfFunctions::read(&binary).expect("DWARF via the link");
        let f = functions.function("f").expect("f is defined");
        let params: Vec<&str> = f.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(params, ["n", "s"]);
        assert_eq!(crate::lines::statement_offset(&binary, spec), Ok(before));
    }

    fn find_for(binary: &Path, root: &Path) -> Option<PathBuf> {
        let data = std::fs::read(binary).expect("reading the binary");
        let elf = object::File::parse(&*data).expect("an ELF binary");
        find(binary, &elf, root)
    }

    #[test]
    fn debuglink_next_to_the_binary_and_in_dot_debug() {
        let (_dir, binary, debug) = split("beside");
        let nowhere = Path::new("/nonexistent-debug-root");
        assert_eq!(find_for(&binary, nowhere), Some(debug.clone()));

        let dot_debug = binary.with_file_name(".debug");
        std::fs::create_dir_all(&dot_debug).expect("mkdir .debug");
        std::fs::rename(&debug, dot_debug.join("target.debug")).expect("moving the debug file");
        assert_eq!(
            find_for(&binary, nowhere),
            Some(dot_debug.join("target.debug"))
        );

        // A file of that name whose CRC differs is not the debug file.
        std::fs::write(dot_debug.join("target.debug"), b"other").expect("overwriting");
        assert_eq!(find_for(&binary, nowhere), None);
    }

    #[test]
    fn debug_file_by_build_id_under_the_root() {
        let (_dir, binary, debug) = split("buildid");
        let root = binary.with_file_name("root");
        let data = std::fs::read(&binary).expect("reading the binary");
        let elf = object::File::parse(&*data).expect("an ELF binary");
        let id = elf.build_id().expect("notes").expect("a build id");
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let dir = root.join(".build-id").join(&hex[..2]);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let by_id = dir.join(format!("{}.debug", &hex[2..]));
        std::fs::rename(&debug, &by_id).expect("moving the debug file");
        assert_eq!(find(&binary, &elf, &root), Some(by_id));
    }
}
