//! Tapsets written from the kernel facts at each run, for what stap ships
//! as per-architecture tables: the system call table (`syscall_name`,
//! `syscall_num`). The driver parses them with the stdlib; like any
//! tapset, one joins a script only when the script uses it.

use std::fmt::Write;

use crate::kernel::KernelFacts;

/// The name a generated tapset goes by in messages.
pub const SYSCALL_TABLE: &str = "<kernel>/syscall_table.stp";

/// What [`syscall_table`] defines, for the library's index.
pub fn syscall_table_declares() -> crate::sema::Declared {
    crate::sema::Declared {
        functions: vec!["syscall_name".into(), "syscall_num".into()],
        ..Default::default()
    }
}

/// `syscall_name(nr)` and `syscall_num(name)` over this kernel's system
/// call table ([`KernelFacts::syscalls`]). `syscall_name` is a binary
/// search (a handful of comparisons in BPF); unknown numbers give "",
/// unknown names -1, as stap's.
pub fn syscall_table(facts: &dyn KernelFacts) -> String {
    let mut table = facts.syscalls();
    table.sort();
    table.dedup_by_key(|(nr, _)| *nr);
    let mut out = String::from(
        "// The system call table of this kernel's native ABI, written by stap-rs\n\
         // at each run from its table of numbers (runtime/src/syscalls.rs).\n\n\
         function syscall_name:string (nr:long) {\n",
    );
    name_tree(&mut out, &table, 1);
    out.push_str("  return \"\"\n}\n\nfunction syscall_num:long (name:string) {\n");
    for (nr, name) in &table {
        let _ = writeln!(out, "  if (name == \"{name}\") return {nr}");
    }
    out.push_str("  return -1\n}\n");
    out
}

fn name_tree(out: &mut String, table: &[(u32, String)], depth: usize) {
    let indent = "  ".repeat(depth);
    if table.len() <= 4 {
        for (nr, name) in table {
            let _ = writeln!(out, "{indent}if (nr == {nr}) return \"{name}\"");
        }
        return;
    }
    let (low, high) = table.split_at(table.len() / 2);
    let _ = writeln!(out, "{indent}if (nr < {}) {{", high[0].0);
    name_tree(out, low, depth + 1);
    let _ = writeln!(out, "{indent}}} else {{");
    name_tree(out, high, depth + 1);
    let _ = writeln!(out, "{indent}}}");
}

#[cfg(test)]
mod tests {
    use super::{syscall_table, syscall_table_declares};
    use crate::testing::FakeKernel;

    #[test]
    fn the_syscall_table_declares_what_it_defines() {
        let kernel = FakeKernel::new();
        let env = crate::preprocess::PreprocessEnv {
            kernel: crate::kernel::KernelFacts::version(&kernel),
            arch: "x86_64".into(),
            config: &|_| None,
            args: &[],
        };
        let mut map = crate::source::SourceMap::new();
        let file = map.add("t", syscall_table(&kernel));
        let parsed = crate::parse::parse_file(&map, file, &env);
        assert!(parsed.diags.is_empty(), "{:?}", parsed.diags);
        assert_eq!(
            crate::sema::Declared::of(&parsed.file),
            syscall_table_declares()
        );
    }

    #[test]
    fn the_syscall_table_searches_by_number_and_name() {
        let text = syscall_table(&FakeKernel::new());
        assert!(text.contains("function syscall_name:string (nr:long) {"));
        assert!(text.contains("if (nr == 257) return \"openat\""));
        assert!(text.contains("if (name == \"exit_group\") return 231"));
        // Twelve calls: one split, then leaves of at most four.
        assert!(text.contains("  if (nr < "), "{text}");
    }
}
