//! The running kernel's DWARF, for stap's DWARF-only kernel probe forms:
//! `kernel.function("F@FILE")` (functions by source file) and
//! `kernel.statement("F@FILE:LINES")` (source lines as kprobe offsets),
//! and `symfileline()` (an address's source line).
//!
//! The file is found as stap finds it (see [`locate`]) and must be the
//! running kernel's build (its GNU build id against
//! `/sys/kernel/notes`). A kernel's DWARF is hundreds of megabytes, so
//! it is read lazily: one pass over the unit headers keeps each unit's
//! file name (its top DIE), and only the units whose file matches a
//! pattern are descended into.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gimli::{
    AttributeValue, DebugInfoOffset, EndianSlice, RunTimeEndian, Unit, UnitOffset, constants,
};
use object::{Object, ObjectSection, ObjectSymbol};
use stap_lang::kernel::{KernelLine, LineSelector, SourceFunction};
use stap_lang::sema::glob_match;

/// The environment variable that names the kernel's DWARF file, ahead of
/// stap's search path.
pub const DWARF_ENV: &str = "STAP_RS_KERNEL_DWARF";

type Reader = EndianSlice<'static, RunTimeEndian>;

/// The DWARF of the running kernel's vmlinux, indexed by unit file name.
pub struct KernelDwarf {
    path: PathBuf,
    dwarf: gimli::Dwarf<Reader>,
    /// Each unit's offset and source file name (relative to the build
    /// directory as the compiler was given it).
    units: Vec<(DebugInfoOffset, String)>,
    /// Link-time addresses of the ELF symbols, for relocating run-time
    /// addresses (KASLR) in `symfileline`.
    symbols: std::collections::HashMap<String, u64>,
    /// How long finding, mapping and indexing took.
    pub load_time: Duration,
}

impl std::fmt::Debug for KernelDwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDwarf")
            .field("path", &self.path)
            .field("units", &self.units.len())
            .finish()
    }
}

/// stap's search order for the running kernel's DWARF, after
/// `$STAP_RS_KERNEL_DWARF`.
pub fn candidates(release: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(path) = std::env::var_os(DWARF_ENV).filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(path));
    }
    out.extend([
        PathBuf::from(format!("/usr/lib/debug/boot/vmlinux-{release}")),
        PathBuf::from(format!("/usr/lib/debug/lib/modules/{release}/vmlinux")),
        PathBuf::from(format!("/boot/vmlinux-{release}")),
        PathBuf::from(format!("/lib/modules/{release}/build/vmlinux")),
    ]);
    out
}

/// The first candidate that exists and has DWARF of this build; `Err`
/// says what was tried and why each was refused.
pub fn locate(release: &str, running_build_id: Option<&[u8]>) -> Result<KernelDwarf, String> {
    let mut refused = Vec::new();
    for path in candidates(release) {
        if !path.exists() {
            continue;
        }
        match KernelDwarf::open(&path, running_build_id) {
            Ok(dwarf) => return Ok(dwarf),
            Err(why) => refused.push(why),
        }
    }
    let tried: Vec<String> = candidates(release)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut message = format!(
        "no DWARF for the running kernel {release} (looked in ${DWARF_ENV}, then {}; \
         install the kernel's debug package, e.g. Debian's linux-image-{release}-dbg)",
        tried[tried.len() - 4..].join(", ")
    );
    for why in refused {
        message.push_str("; ");
        message.push_str(&why);
    }
    Err(message)
}

/// The GNU build id in a buffer of ELF notes (`/sys/kernel/notes`, or a
/// note section's bytes), little-endian.
pub fn build_id_in_notes(notes: &[u8]) -> Option<Vec<u8>> {
    let word = |at: usize| -> Option<usize> {
        let bytes = notes.get(at..at + 4)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?) as usize)
    };
    let align = |n: usize| n.div_ceil(4) * 4;
    let mut at = 0;
    while at + 12 <= notes.len() {
        let (name_len, desc_len, kind) = (word(at)?, word(at + 4)?, word(at + 8)?);
        let name = notes.get(at + 12..at + 12 + name_len)?;
        let desc_at = at + 12 + align(name_len);
        let desc = notes.get(desc_at..desc_at + desc_len)?;
        // NT_GNU_BUILD_ID
        if kind == 3 && name.starts_with(b"GNU") {
            return Some(desc.to_vec());
        }
        at = desc_at + align(desc_len);
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// stap's file rule (`fnmatch` without `FNM_PATHNAME`): the pattern
/// matches the whole name, or the name after any leading directories.
fn file_matches(pattern: &str, name: &str) -> bool {
    glob_match(pattern, name) || glob_match(&format!("*/{pattern}"), name)
}

impl KernelDwarf {
    /// The running kernel's DWARF, found by [`locate`] for its release and
    /// build id.
    pub fn running() -> Result<KernelDwarf, String> {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| r.trim().to_string())
            .map_err(|e| format!("reading the kernel release: {e}"))?;
        locate(&release, running_build_id().as_deref())
    }

    /// Maps and indexes one vmlinux with DWARF, refusing another build.
    pub fn open(path: &Path, running_build_id: Option<&[u8]>) -> Result<KernelDwarf, String> {
        let started = Instant::now();
        let shown = path.display();
        let file = File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        // SAFETY: a private read-only mapping; a file rewritten while we read
        // it gives wrong answers at worst (every access is checked). It is
        // leaked: the kernel's DWARF is read for the whole run, and 'static
        // slices let gimli borrow it without a self-referential struct.
        let data = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("{shown}: {e}"))?;
        let data: &'static [u8] = Box::leak(Box::new(data));
        let elf =
            object::File::parse(data).map_err(|e| format!("{shown} is not an ELF file: {e}"))?;
        if let Some(running) = running_build_id {
            let own =
                elf.build_id().ok().flatten().ok_or_else(|| {
                    format!("{shown} has no build id to check against the kernel")
                })?;
            if own != running {
                return Err(format!(
                    "{shown} is another build (build id {}, the running kernel's is {})",
                    hex(own),
                    hex(running)
                ));
            }
        }
        if elf.section_by_name(".debug_info").is_none() {
            return Err(format!("{shown} has no DWARF (.debug_info)"));
        }
        let endian = if elf.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let mut compressed = None;
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, String> {
            let Some(section) = elf.section_by_name(id.name()) else {
                return Ok(EndianSlice::new(&[][..], endian));
            };
            // Compressed sections (SHF_COMPRESSED) would have to be
            // inflated whole: refused below, with the reason.
            let is_compressed = section
                .compressed_file_range()
                .is_ok_and(|r| r.format != object::CompressionFormat::None);
            if is_compressed {
                compressed = Some(id.name());
                return Ok(EndianSlice::new(&[][..], endian));
            }
            let data = section
                .data()
                .map_err(|e| format!("{shown}: section {}: {e}", id.name()))?;
            Ok(EndianSlice::new(data, endian))
        })?;
        if let Some(name) = compressed {
            return Err(format!(
                "{shown} has compressed DWARF ({name}), which stap-rs does not inflate"
            ));
        }
        let corrupt = |e: gimli::Error| format!("corrupt DWARF in {shown}: {e}");
        let mut units = Vec::new();
        let mut headers = dwarf.units();
        while let Some(header) = headers.next().map_err(corrupt)? {
            let Some(offset) = header.debug_info_offset() else {
                continue;
            };
            let unit = dwarf.unit(header).map_err(corrupt)?;
            if let Some(name) = unit.name {
                let name = name.to_string_lossy().into_owned();
                units.push((offset, name.trim_start_matches("./").to_string()));
            }
        }
        let symbols = elf
            .symbols()
            .filter(|s| s.is_definition())
            .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
            .collect();
        Ok(KernelDwarf {
            path: path.to_path_buf(),
            dwarf,
            units,
            symbols,
            load_time: started.elapsed(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn corrupt(&self, e: gimli::Error) -> String {
        format!("corrupt DWARF in {}: {e}", self.path.display())
    }

    /// The units that may define `function` in a file matching `file`,
    /// parsed. A function named exactly, with an ELF symbol, is looked up
    /// by its address in `.debug_aranges`: `do_nanosleep@*` must not walk
    /// every unit of the kernel.
    fn units_matching(&self, function: &str, file: &str) -> Result<Vec<Unit<Reader>>, String> {
        let literal = !function.contains(['*', '?', '[']);
        if let Some(address) = self.symbols.get(function).filter(|_| literal)
            && let Some(offset) = self.aranges_unit(*address)?
            && let Some((_, name)) = self.units.iter().find(|(o, _)| *o == offset)
        {
            if !file_matches(file, name) {
                return Ok(Vec::new());
            }
            let header = self
                .dwarf
                .debug_info
                .header_from_offset(offset)
                .map_err(|e| self.corrupt(e))?;
            return Ok(vec![self.dwarf.unit(header).map_err(|e| self.corrupt(e))?]);
        }
        let mut out = Vec::new();
        for (offset, name) in &self.units {
            if !file_matches(file, name) {
                continue;
            }
            let header = self
                .dwarf
                .debug_info
                .header_from_offset(*offset)
                .map_err(|e| self.corrupt(e))?;
            out.push(self.dwarf.unit(header).map_err(|e| self.corrupt(e))?);
        }
        Ok(out)
    }

    /// `kernel.function("F@FILE")`: functions with code, named by `function`,
    /// declared in a file `file` matches.
    pub fn source_functions(
        &self,
        function: &str,
        file: &str,
    ) -> Result<Vec<SourceFunction>, String> {
        let mut out = Vec::new();
        for unit in self.units_matching(function, file)? {
            for f in self.functions_of(&unit)? {
                if glob_match(function, &f.name) && file_matches(file, &f.file) {
                    out.push(SourceFunction {
                        name: f.name,
                        file: f.file,
                        line: f.line,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out.dedup_by(|a, b| a.name == b.name);
        Ok(out)
    }

    /// `kernel.statement("F@FILE:LINES")`: each selected line of each
    /// matching function, at the lowest address of its statement rows
    /// inside the function's entry range.
    pub fn lines(
        &self,
        function: &str,
        file: &str,
        lines: LineSelector,
    ) -> Result<Vec<KernelLine>, String> {
        let mut out = Vec::new();
        for unit in self.units_matching(function, file)? {
            let functions: Vec<UnitFunction> = self
                .functions_of(&unit)?
                .into_iter()
                .filter(|f| glob_match(function, &f.name) && file_matches(file, &f.file))
                .collect();
            if functions.is_empty() {
                continue;
            }
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            // (function index, line) -> lowest address.
            let mut found: std::collections::BTreeMap<(usize, u64), u64> = Default::default();
            let mut rows = program.rows();
            while let Some((header, row)) = rows.next_row().map_err(|e| self.corrupt(e))? {
                if !row.is_stmt() || row.end_sequence() {
                    continue;
                }
                let Some(line) = row.line().map(|l| l.get()) else {
                    continue;
                };
                if !lines.contains(line) {
                    continue;
                }
                let address = row.address();
                let Some(index) = functions
                    .iter()
                    .position(|f| (f.low..f.high).contains(&address))
                else {
                    continue;
                };
                let Some(entry) = row.file(header) else {
                    continue;
                };
                let name = self.file_path(&unit, header, entry)?;
                if name != functions[index].file {
                    continue;
                }
                let slot = found.entry((index, line)).or_insert(address);
                *slot = (*slot).min(address);
            }
            for ((index, line), address) in found {
                let f = &functions[index];
                out.push(KernelLine {
                    function: f.name.clone(),
                    offset: address - f.low,
                    file: f.file.clone(),
                    line,
                });
            }
        }
        out.sort_by(|a, b| (&a.function, a.line).cmp(&(&b.function, b.line)));
        Ok(out)
    }

    /// `symfileline`: the source `file:line` of a link-time address.
    pub fn address_line(&self, address: u64) -> Result<Option<(String, u64)>, String> {
        let unit = match self.aranges_unit(address)? {
            Some(offset) => {
                let header = self
                    .dwarf
                    .debug_info
                    .header_from_offset(offset)
                    .map_err(|e| self.corrupt(e))?;
                self.dwarf.unit(header).map_err(|e| self.corrupt(e))?
            }
            // No .debug_aranges entry (some compilers omit the table):
            // each unit's own ranges.
            None => match self.unit_containing(address)? {
                Some(unit) => unit,
                None => return Ok(None),
            },
        };
        let Some(program) = unit.line_program.clone() else {
            return Ok(None);
        };
        // The row with the highest address not past `address`, within one
        // sequence.
        let mut best: Option<(u64, String, u64)> = None;
        let mut previous: Option<(u64, String, u64)> = None;
        let mut rows = program.rows();
        while let Some((header, row)) = rows.next_row().map_err(|e| self.corrupt(e))? {
            if row.end_sequence() {
                if let Some(prev) = previous.take()
                    && prev.0 <= address
                    && address < row.address()
                    && best.as_ref().is_none_or(|b| prev.0 > b.0)
                {
                    best = Some(prev);
                }
                continue;
            }
            if let Some(prev) = previous.take()
                && prev.0 <= address
                && address < row.address()
                && best.as_ref().is_none_or(|b| prev.0 > b.0)
            {
                best = Some(prev);
            }
            let Some(entry) = row.file(header) else {
                continue;
            };
            let line = row.line().map_or(0, |l| l.get());
            previous = Some((row.address(), self.file_path(&unit, header, entry)?, line));
        }
        Ok(best.map(|(_, file, line)| (file, line)))
    }

    /// The unit `.debug_aranges` says holds `address`.
    fn aranges_unit(&self, address: u64) -> Result<Option<DebugInfoOffset>, String> {
        let mut ranges = self.dwarf.debug_aranges.headers();
        while let Some(header) = ranges.next().map_err(|e| self.corrupt(e))? {
            let mut entries = header.entries();
            while let Some(entry) = entries.next().map_err(|e| self.corrupt(e))? {
                let range = entry.range();
                if (range.begin..range.end).contains(&address) {
                    return Ok(Some(header.debug_info_offset()));
                }
            }
        }
        Ok(None)
    }

    fn unit_containing(&self, address: u64) -> Result<Option<Unit<Reader>>, String> {
        for (offset, _) in &self.units {
            let header = self
                .dwarf
                .debug_info
                .header_from_offset(*offset)
                .map_err(|e| self.corrupt(e))?;
            let unit = self.dwarf.unit(header).map_err(|e| self.corrupt(e))?;
            let mut ranges = self.dwarf.unit_ranges(&unit).map_err(|e| self.corrupt(e))?;
            while let Some(range) = ranges.next().map_err(|e| self.corrupt(e))? {
                if (range.begin..range.end).contains(&address) {
                    return Ok(Some(unit));
                }
            }
        }
        Ok(None)
    }

    /// The link-time address of an ELF symbol of the vmlinux, for
    /// relocating a run-time address by the KASLR offset.
    pub fn symbol_address(&self, name: &str) -> Option<u64> {
        self.symbols.get(name).copied()
    }

    /// The top-level functions with code of one unit.
    fn functions_of(&self, unit: &Unit<Reader>) -> Result<Vec<UnitFunction>, String> {
        let corrupt = |e: gimli::Error| self.corrupt(e);
        let program = unit.line_program.as_ref().map(|p| p.header().clone());
        let mut out = Vec::new();
        let mut tree = unit.entries_tree(None).map_err(corrupt)?;
        let root = tree.root().map_err(corrupt)?;
        let mut children = root.children();
        while let Some(child) = children.next().map_err(corrupt)? {
            let entry = child.entry();
            if entry.tag() != constants::DW_TAG_subprogram {
                continue;
            }
            let Some(AttributeValue::Addr(_) | AttributeValue::DebugAddrIndex(_)) =
                entry.attr_value(constants::DW_AT_low_pc)
            else {
                // Declarations, inline-only functions, and functions split
                // into address ranges (no one entry offset) are left out.
                continue;
            };
            let low = match entry.attr_value(constants::DW_AT_low_pc) {
                Some(value) => self
                    .dwarf
                    .attr_address(unit, value)
                    .map_err(corrupt)?
                    .unwrap_or(0),
                None => continue,
            };
            let high = match entry.attr_value(constants::DW_AT_high_pc) {
                Some(AttributeValue::Udata(size)) => low + size,
                Some(value) => self
                    .dwarf
                    .attr_address(unit, value)
                    .map_err(corrupt)?
                    .unwrap_or(low),
                None => low,
            };
            let origin = self.origin(unit, entry)?;
            let attr = |at: gimli::DwAt| {
                entry
                    .attr_value(at)
                    .or_else(|| origin.as_ref()?.attr_value(at))
            };
            let Some(name) = attr(constants::DW_AT_name) else {
                continue;
            };
            let name = self
                .dwarf
                .attr_string(unit, name)
                .map_err(corrupt)?
                .to_string_lossy()
                .into_owned();
            let line = attr(constants::DW_AT_decl_line)
                .and_then(|v| v.udata_value())
                .unwrap_or(0);
            let file = match (attr(constants::DW_AT_decl_file), &program) {
                (Some(AttributeValue::FileIndex(index)), Some(header)) => {
                    match header.file(index) {
                        Some(entry) => self.file_path(unit, header, entry)?,
                        None => continue,
                    }
                }
                _ => continue,
            };
            out.push(UnitFunction {
                name,
                file,
                line,
                low,
                high,
            });
        }
        Ok(out)
    }

    /// The DIE a definition completes (`DW_AT_specification`,
    /// `DW_AT_abstract_origin`), in the same unit.
    fn origin(
        &self,
        unit: &Unit<Reader>,
        entry: &gimli::DebuggingInformationEntry<Reader>,
    ) -> Result<Option<gimli::DebuggingInformationEntry<Reader>>, String> {
        for at in [
            constants::DW_AT_abstract_origin,
            constants::DW_AT_specification,
        ] {
            if let Some(AttributeValue::UnitRef(offset)) = entry.attr_value(at) {
                let offset: UnitOffset = offset;
                return unit.entry(offset).map(Some).map_err(|e| self.corrupt(e));
            }
        }
        Ok(None)
    }

    /// A line-table file as the compiler named it: its directory joined
    /// unless that is the build directory, `./` dropped.
    fn file_path(
        &self,
        unit: &Unit<Reader>,
        header: &gimli::LineProgramHeader<Reader>,
        entry: &gimli::FileEntry<Reader>,
    ) -> Result<String, String> {
        let corrupt = |e: gimli::Error| self.corrupt(e);
        let name = self
            .dwarf
            .attr_string(unit, entry.path_name())
            .map_err(corrupt)?
            .to_string_lossy()
            .into_owned();
        if name.starts_with('/') {
            return Ok(name);
        }
        let dir = match entry.directory(header) {
            Some(dir) => self
                .dwarf
                .attr_string(unit, dir)
                .map_err(corrupt)?
                .to_string_lossy()
                .into_owned(),
            None => String::new(),
        };
        let comp_dir = unit
            .comp_dir
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let joined = if dir.is_empty() || dir == comp_dir || dir == "." {
            name
        } else if let Some(relative) = dir.strip_prefix(&format!("{comp_dir}/")) {
            format!("{relative}/{name}")
        } else {
            format!("{dir}/{name}")
        };
        Ok(joined.trim_start_matches("./").to_string())
    }
}

struct UnitFunction {
    name: String,
    file: String,
    line: u64,
    /// The entry range, link-time addresses.
    low: u64,
    high: u64,
}

/// The running kernel's GNU build id, from `/sys/kernel/notes`.
pub fn running_build_id() -> Option<Vec<u8>> {
    build_id_in_notes(&fs::read("/sys/kernel/notes").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_from_notes() {
        let mut notes = Vec::new();
        // A Xen note first, then NT_GNU_BUILD_ID.
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 1u32, &[1u8, 2, 3][..]),
            (&b"GNU\0"[..], 3, &[0xde, 0xad, 0xbe, 0xef][..]),
        ] {
            notes.extend((name.len() as u32).to_le_bytes());
            notes.extend((desc.len() as u32).to_le_bytes());
            notes.extend(kind.to_le_bytes());
            notes.extend(name);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
            notes.extend(desc);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
        }
        assert_eq!(
            build_id_in_notes(&notes),
            Some(vec![0xde, 0xad, 0xbe, 0xef])
        );
        assert_eq!(build_id_in_notes(&notes[..20]), None);
    }

    #[test]
    fn file_patterns_match_as_stap_matches_them() {
        assert!(file_matches("fs/proc*.c", "fs/proc/base.c"));
        assert!(file_matches("fs/*.c", "fs/open.c"));
        assert!(file_matches("open.c", "fs/open.c"));
        assert!(file_matches("fs/open.c", "/build/linux/fs/open.c"));
        assert!(!file_matches("open.c", "fs/reopen.c"));
        assert!(!file_matches("fs/proc*.c", "kernel/fork.c"));
    }

    #[test]
    fn missing_dwarf_says_where_it_looked() {
        let error = locate("0.0.0-nonexistent", None).unwrap_err();
        assert!(
            error.contains("/usr/lib/debug/boot/vmlinux-0.0.0-nonexistent"),
            "{error}"
        );
        assert!(
            error.contains("linux-image-0.0.0-nonexistent-dbg"),
            "{error}"
        );
    }

    /// A C file built with -g stands in for a vmlinux: the reader is the
    /// same for any ELF with DWARF 4 or 5.
    #[test]
    fn functions_and_lines_of_an_elf_with_dwarf() {
        let (_dir, binary) = crate::dwarf::tests::compile("kdwarf", &["-g", "-O0"]);
        let dwarf = KernelDwarf::open(&binary, None).unwrap();
        let functions = dwarf.source_functions("*", "*.c").unwrap();
        let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains(&"f") && names.contains(&"main"), "{names:?}");
        let f = functions.iter().find(|f| f.name == "f").unwrap();
        assert!(f.line > 0 && f.file.ends_with(".c"), "{f:?}");
        let lines = dwarf.lines("f", "*.c", LineSelector::Every).unwrap();
        assert!(lines.len() >= 2, "{lines:?}");
        assert_eq!(lines[0].offset, 0, "{lines:?}");
        assert!(lines.windows(2).all(|w| w[0].line < w[1].line), "{lines:?}");
        let one = dwarf
            .lines(
                "f",
                "*.c",
                LineSelector::Range(lines[1].line, lines[1].line),
            )
            .unwrap();
        assert_eq!(one, vec![lines[1].clone()]);
        let address = dwarf.symbol_address("f").unwrap() + lines[1].offset;
        assert_eq!(
            dwarf.address_line(address).unwrap(),
            Some((lines[1].file.clone(), lines[1].line))
        );
        assert!(dwarf.source_functions("*", "nosuch.c").unwrap().is_empty());
    }
}
