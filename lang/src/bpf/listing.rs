//! `--dump=bpf`: the maps, then each program one instruction per line in
//! the verifier's notation, annotated with the script line whenever the
//! source span changes. Deterministic (no fds, no addresses).

use std::fmt::Write;

use super::insn::{self, Insn};
use super::{MapRole, Object};
use crate::source::{SourceMap, Span};

pub fn listing(object: &Object, map: &SourceMap) -> String {
    let mut out = String::new();
    for (i, spec) in object.maps.iter().enumerate() {
        let role = match &spec.role {
            MapRole::Global(id) => format!("global {}", id.0),
            MapRole::Formats(data) => {
                let texts: Vec<String> = data
                    .split(|b| *b == 0)
                    .filter(|text| !text.is_empty())
                    .map(|text| format!("{:?}", String::from_utf8_lossy(text)))
                    .collect();
                format!("formats {}", texts.join(" "))
            }
            other => format!("{other:?}").to_lowercase(),
        };
        let _ = writeln!(
            out,
            "map {i}: {} type {} key {} value {} entries {} ({role})",
            spec.name, spec.map_type, spec.key_size, spec.value_size, spec.max_entries
        );
    }
    for program in &object.programs {
        let _ = writeln!(
            out,
            "\nprogram {} (probe {}): {:?}, {} insns, {} bytes of stack",
            program.name,
            program.probe,
            program.attach,
            program.insns.len(),
            program.stack_bytes
        );
        let mut lines = program.lines.iter().peekable();
        let mut last_line: Option<(u32, usize)> = None;
        let mut index = 0;
        while index < program.insns.len() {
            if let Some(n) = program
                .func_info
                .iter()
                .skip(1)
                .position(|f| f.insn_off as usize == index)
            {
                // A callback (a kernel `foreach` body) starts here.
                let _ = writeln!(out, "; callback {} ({}_each{n})", n + 1, program.name);
                last_line = None;
            }
            while let Some((_, span)) = lines.next_if(|(at, _)| *at <= index) {
                let (file, line, text) = source_line(map, *span);
                let key = (span.file.0, line);
                if last_line != Some(key) {
                    last_line = Some(key);
                    let _ = writeln!(out, "; {file}:{line}  {text}");
                }
            }
            let mut text = insn::disassemble(&program.insns, index);
            if let Some((_, target)) = program.map_relocs.iter().find(|(at, _)| *at == index) {
                // The fd is unknown until load: name the map instead.
                if let Some(spec) = object.maps.get(*target) {
                    text = text.replace("fd 0", &spec.name);
                }
            }
            let _ = writeln!(out, "{index:5}: {text}");
            index += if Insn::decode(program.insns[index]).is_wide() {
                2
            } else {
                1
            };
        }
    }
    out
}

/// `(file name, 1-based line, the line's text trimmed)`.
fn source_line(map: &SourceMap, span: Span) -> (String, usize, String) {
    let file = map.get(span.file);
    let (line, _) = file.line_col(span.start as usize);
    let starts = file.line_starts();
    let begin = starts[line - 1];
    let end = starts.get(line).copied().unwrap_or(file.text.len());
    let text = file.text[begin..end].trim().to_string();
    (file.name.clone(), line, text)
}
