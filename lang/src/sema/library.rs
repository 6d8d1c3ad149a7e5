//! The tapset library as elaboration sees it. Each file comes with the
//! names it may define (functions, globals, probe aliases) and is parsed
//! only when elaboration first asks for it. A script pulls in just the
//! files that define something it uses, so the rest of the library is never
//! parsed: start-up stays flat as the library grows.
//!
//! The declared names only decide which files are worth parsing. Which file
//! defines a name is always decided on the parsed file, so a lazy library
//! elaborates exactly as one parsed up front, provided the declared names
//! are a superset of what the file really defines (the scanner that makes
//! them is tested for that against the parser).

use crate::ast;
use std::borrow::Cow;
use std::cell::OnceCell;

/// The names one tapset file may define at top level. A superset is fine
/// (it costs a parse); a missing name would hide a definition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    pub functions: Vec<String>,
    pub globals: Vec<String>,
    /// Plain dotted alias names (`tcp.sendmsg`).
    pub aliases: Vec<String>,
}

impl Declared {
    /// Exactly what a parsed file defines.
    pub fn of(file: &ast::File) -> Declared {
        let mut declared = Declared::default();
        for item in &file.items {
            match item {
                ast::Item::Function(f) => declared.functions.push(f.name.node.clone()),
                ast::Item::Global(g) => declared.globals.push(g.name.node.clone()),
                ast::Item::Alias(a) => declared
                    .aliases
                    .extend(a.names.iter().filter_map(plain_point_name)),
                _ => {}
            }
        }
        declared
    }
}

/// The dotted name of an alias or a plain probe point (`tcp.sendmsg`), or
/// `None` when it has arguments or brace sets.
pub(crate) fn plain_point_name(point: &ast::ProbePoint) -> Option<String> {
    let mut parts = Vec::new();
    for c in &point.components {
        match c {
            ast::PointComponent::Named { name, arg: None } => parts.push(name.node.as_str()),
            _ => return None,
        }
    }
    Some(parts.join("."))
}

/// Parses library file `index` on first use; `None` when it does not parse
/// (the callback has reported why).
pub type ParseFn<'a> = dyn Fn(usize) -> Option<ast::File> + 'a;

enum Source<'a> {
    Parsed(&'a ast::File),
    Lazy(OnceCell<Option<ast::File>>),
}

/// The tapset files, in search order (the first definition of a name wins).
pub struct Library<'a> {
    declared: Cow<'a, [Declared]>,
    files: Vec<Source<'a>>,
    parse: Option<&'a ParseFn<'a>>,
}

impl<'a> Library<'a> {
    /// Files parsed up front (tests, the fuzzer).
    pub fn parsed(files: &'a [ast::File]) -> Library<'a> {
        Library {
            declared: files.iter().map(Declared::of).collect::<Vec<_>>().into(),
            files: files.iter().map(Source::Parsed).collect(),
            parse: None,
        }
    }

    /// Files parsed by `parse` on first use, each with the names it may
    /// define.
    pub fn lazy(declared: &'a [Declared], parse: &'a ParseFn<'a>) -> Library<'a> {
        Library {
            files: declared
                .iter()
                .map(|_| Source::Lazy(OnceCell::new()))
                .collect(),
            declared: declared.into(),
            parse: Some(parse),
        }
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn declared(&self, index: usize) -> &Declared {
        &self.declared[index]
    }

    /// File `index`, parsed now if it was not yet; `None` if it does not
    /// parse.
    pub fn file(&self, index: usize) -> Option<&ast::File> {
        match &self.files[index] {
            Source::Parsed(file) => Some(file),
            Source::Lazy(cell) => cell
                .get_or_init(|| self.parse.and_then(|parse| parse(index)))
                .as_ref(),
        }
    }

    /// How many files have been parsed so far.
    pub fn parsed_count(&self) -> usize {
        self.files
            .iter()
            .filter(|f| match f {
                Source::Parsed(_) => true,
                Source::Lazy(cell) => cell.get().is_some(),
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::KernelFacts;
    use crate::parse::parse_file;
    use crate::preprocess::PreprocessEnv;
    use crate::sema::{ElabOptions, elaborate, elaborate_with, print::print_program};
    use crate::source::SourceMap;
    use crate::testing::FakeKernel;

    const LIBRARY: [&str; 4] = [
        "function unused() { return 2 }\n",
        "function used() { return 1 }\n",
        "probe my.alias = begin { x = used() }\n",
        "global never_read\nprobe other.alias = end { }\n",
    ];
    const SCRIPT: &str = "probe my.alias { println(x) }\n";

    /// Elaborates SCRIPT over LIBRARY, lazily with `declared`, and as
    /// parsed up front; returns both listings and how many files the lazy
    /// run parsed.
    fn both_ways(declared: impl Fn(usize, Declared) -> Declared) -> (String, String, usize) {
        let kernel = FakeKernel::new();
        let env = PreprocessEnv {
            kernel: kernel.version(),
            arch: "x86_64".into(),
            config: &|_| None,
            args: &[],
        };
        let mut map = SourceMap::new();
        let ids: Vec<_> = LIBRARY
            .iter()
            .enumerate()
            .map(|(i, text)| map.add(format!("lib{i}.stp"), *text))
            .collect();
        let script = map.add("script.stp", SCRIPT);
        let user = [parse_file(&map, script, &env).file];
        let parsed: Vec<ast::File> = ids
            .iter()
            .map(|&id| parse_file(&map, id, &env).file)
            .collect();
        let opts = ElabOptions::default();

        let (eager, diags) = elaborate(&user, &parsed, &kernel, &opts);
        assert!(diags.is_empty(), "{diags:?}");
        let declared: Vec<Declared> = parsed
            .iter()
            .enumerate()
            .map(|(i, f)| declared(i, Declared::of(f)))
            .collect();
        let parse = |i: usize| Some(parse_file(&map, ids[i], &env).file);
        let library = Library::lazy(&declared, &parse);
        let (lazy, diags) = elaborate_with(&user, &library, &kernel, &opts);
        assert!(diags.is_empty(), "{diags:?}");
        (
            print_program(&lazy.unwrap(), &map),
            print_program(&eager.unwrap(), &map),
            library.parsed_count(),
        )
    }

    #[test]
    fn only_the_files_a_script_reaches_are_parsed() {
        let (lazy, eager, parsed) = both_ways(|_, exact| exact);
        assert_eq!(lazy, eager);
        // The alias's file, then the file of the function it calls.
        assert_eq!(parsed, 2);
        assert!(lazy.contains("used"), "{lazy}");
    }

    #[test]
    fn a_declared_name_a_file_does_not_define_costs_a_parse_not_a_definition() {
        // File 0 claims `used` too (as a scan may, from a conditional
        // branch): it is parsed, found not to define it, and left out.
        let (lazy, eager, parsed) = both_ways(|i, mut declared| {
            if i == 0 {
                declared.functions.push("used".into());
            }
            declared
        });
        assert_eq!(lazy, eager);
        assert_eq!(parsed, 3);
        assert!(!lazy.contains("unused"), "{lazy}");
    }
}
