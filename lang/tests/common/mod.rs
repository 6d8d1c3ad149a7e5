//! Helpers shared by the lang integration tests: the preprocessor
//! environment of the fake kernel, and script text to elaborated program.
// Each test binary uses a different subset of these.
#![allow(dead_code)]

use stap_lang::diag::{Diagnostic, render_plain};
use stap_lang::kernel::{KernelFacts, KernelVersion};
use stap_lang::parse::{parse_file_with, parse_macro_file};
use stap_lang::preprocess::PreprocessEnv;
use stap_lang::sema::{ElabOptions, Program, elaborate};
use stap_lang::source::SourceMap;

fn no_config(_: &str) -> Option<String> {
    None
}

/// The preprocessor's view of `FakeKernel::new()`: 6.18.0 on x86_64, no
/// kernel config, no script arguments.
pub fn fake_env() -> PreprocessEnv<'static> {
    PreprocessEnv {
        kernel: KernelVersion {
            major: 6,
            minor: 18,
            patch: 0,
            release: "6.18.0-test".into(),
        },
        arch: "x86_64".into(),
        config: &no_config,
        args: &[],
    }
}

/// The outcome of elaborating a script: the program when there were no
/// errors, every diagnostic, and the source map to render them with.
pub struct Elaborated {
    pub map: SourceMap,
    pub program: Option<Program>,
    pub diags: Vec<Diagnostic>,
}

impl Elaborated {
    pub fn rendered(&self) -> String {
        render_plain(&self.map, &self.diags)
    }
}

/// Parses `script` (as `script.stp`) and the `(name, text)` tapsets,
/// panicking on any parse error, then elaborates them.
pub fn elaborate_text(
    script: &str,
    tapsets: &[(&str, &str)],
    facts: &dyn KernelFacts,
    opts: &ElabOptions,
) -> Elaborated {
    let env = fake_env();
    let mut map = SourceMap::new();
    // `*.stpm` tapsets are macro files, read first as the driver does.
    let mut library = stap_lang::preprocess::MacroLibrary::default();
    let mut parse_diags = Vec::new();
    for (name, text) in tapsets.iter().filter(|(n, _)| n.ends_with(".stpm")) {
        let id = map.add(*name, *text);
        parse_diags.extend(parse_macro_file(&map, id, &env, &mut library));
    }
    let user_id = map.add("script.stp", script);
    let tapset_ids: Vec<_> = tapsets
        .iter()
        .filter(|(n, _)| !n.ends_with(".stpm"))
        .map(|(name, text)| map.add(*name, *text))
        .collect();
    let mut parse = |id| {
        let parsed = parse_file_with(&map, id, &env, &library);
        parse_diags.extend(parsed.diags);
        parsed.file
    };
    let user = vec![parse(user_id)];
    let tapsets: Vec<_> = tapset_ids.into_iter().map(&mut parse).collect();
    assert!(
        parse_diags.is_empty(),
        "parse errors:\n{}",
        render_plain(&map, &parse_diags)
    );
    let (program, diags) = elaborate(&user, &tapsets, facts, opts);
    Elaborated {
        map,
        program,
        diags,
    }
}
