//! `process("PATH").statement("FUNC@FILE:LINE")`: the address of a source
//! line, from the binary's DWARF line table (gimli), as a file offset for
//! a uprobe.

use std::fs::File;
use std::path::Path;

use gimli::{EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection, ObjectSegment};

/// Whether a statement spec names a source line (`*@file.c:12`).
pub fn is_line_spec(spec: &str) -> bool {
    line_spec(spec).is_some()
}

/// `FUNC@FILE:LINE` as `(FILE, LINE)`.
fn line_spec(spec: &str) -> Option<(&str, u64)> {
    let (_, place) = spec.split_once('@')?;
    let (file, line) = place.rsplit_once(':')?;
    Some((file, line.parse().ok()?))
}

/// The file offset of the first instruction of line `LINE` of `FILE` in
/// the ELF binary at `path`: the lowest address of a statement row for
/// that line in any compilation unit whose file name is `FILE` or ends in
/// `/FILE`. The function part of the spec is not checked.
pub fn statement_offset(path: &Path, spec: &str) -> Result<u64, String> {
    let (want_file, want_line) =
        line_spec(spec).ok_or_else(|| format!("`{spec}` is not FUNCTION@FILE:LINE"))?;
    let file = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // SAFETY: a private read-only mapping; a binary rewritten while we read
    // it gives wrong answers at worst (every access is checked).
    let data = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let elf = object::File::parse(&*data)
        .map_err(|e| format!("{} is not an ELF binary: {e}", path.display()))?;
    // A stripped binary's line table is in its separate debug file; the
    // binary's own segments still map addresses to file offsets (a debug
    // file's segments have no contents).
    let debug_data;
    let debug_elf;
    let (lines_elf, lines_path) = if elf.section_by_name(".debug_line").is_some() {
        (&elf, path.to_path_buf())
    } else {
        let debug = crate::debugfile::find(path, &elf, Path::new(crate::debugfile::DEBUG_ROOT))
            .ok_or_else(|| {
                format!(
                    "{} has no DWARF line table (build it with -g, or install its separate debug file)",
                    path.display()
                )
            })?;
        let file =
            File::open(&debug).map_err(|e| format!("cannot read {}: {e}", debug.display()))?;
        // SAFETY: as above.
        debug_data = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| format!("cannot read {}: {e}", debug.display()))?;
        debug_elf = object::File::parse(&*debug_data)
            .map_err(|e| format!("{} is not an ELF file: {e}", debug.display()))?;
        (&debug_elf, debug)
    };
    let dwarf_path = lines_path.as_path();
    let endian = if lines_elf.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let corrupt = |e: gimli::Error| format!("corrupt DWARF in {}: {e}", dwarf_path.display());
    let sections = gimli::DwarfSections::load(|id| -> Result<_, String> {
        match lines_elf.section_by_name(id.name()) {
            Some(section) => section
                .uncompressed_data()
                .map_err(|e| format!("section {}: {e}", id.name())),
            None => Ok(std::borrow::Cow::Borrowed(&[][..])),
        }
    })?;
    let dwarf = sections.borrow(|section| EndianSlice::new(section, endian));
    let mut best: Option<u64> = None;
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(corrupt)? {
        let unit = dwarf.unit(header).map_err(corrupt)?;
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut rows = program.rows();
        while let Some((header, row)) = rows.next_row().map_err(corrupt)? {
            if !row.is_stmt()
                || row.end_sequence()
                || row.line().map(|l| l.get()) != Some(want_line)
            {
                continue;
            }
            let Some(entry) = row.file(header) else {
                continue;
            };
            let name = dwarf
                .attr_string(&unit, entry.path_name())
                .map_err(corrupt)?
                .to_string_lossy();
            let name = name.as_ref();
            if name == want_file || name.ends_with(&format!("/{want_file}")) {
                best = Some(best.map_or(row.address(), |b| b.min(row.address())));
            }
        }
    }
    let address = best.ok_or_else(|| {
        format!(
            "no line {want_line} of {want_file} in the line table of {}",
            path.display()
        )
    })?;
    elf.segments()
        .find_map(|segment| {
            let start = segment.address();
            let (file_offset, file_size) = segment.file_range();
            (address >= start && address - start < file_size).then(|| address - start + file_offset)
        })
        .ok_or_else(|| format!("line address 0x{address:x} is in no loadable segment"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_line_of_a_c_file_resolves_and_a_missing_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("stap-rs-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("prog.c");
        std::fs::write(
            &source,
            "int work(int x) {\n  int y = x * 2;\n  return y + 1;\n}\nint main(void) { return work(3) == 7 ? 0 : 1; }\n",
        )
        .unwrap();
        let binary = dir.join("prog");
        let built = Command::new("cc")
            .args(["-g", "-O0", "-o"])
            .arg(&binary)
            .arg(&source)
            .status();
        if !built.is_ok_and(|s| s.success()) {
            eprintln!("no C compiler: skipped");
            return;
        }
        let line2 = statement_offset(&binary, "*@prog.c:2").unwrap();
        let line3 = statement_offset(&binary, "work@prog.c:3").unwrap();
        assert!(line2 < line3, "{line2:#x} {line3:#x}");
        let missing = statement_offset(&binary, "*@prog.c:99").unwrap_err();
        assert!(missing.contains("no line 99 of prog.c"), "{missing}");
        let other = statement_offset(&binary, "*@other.c:2").unwrap_err();
        assert!(other.contains("no line 2 of other.c"), "{other}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
