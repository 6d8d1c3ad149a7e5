//! What the pipeline targets share: the fake kernel, the real stdlib
//! (parsed once per process), and passes 1 and 2 on the input.

use std::path::Path;
use std::sync::OnceLock;

use stap_lang::kernel::KernelFacts;
use stap_lang::kernel_tapsets::{SYSCALL_TABLE, syscall_table};
use stap_lang::preprocess::{MacroLibrary, PreprocessEnv};
use stap_lang::source::SourceMap;
use stap_lang::{ast, parse, sema, testing::FakeKernel};

/// The tapsets of `stdlib/`, read and parsed once, as the driver loads
/// them: every `.stpm` macro file first (its macros are visible to every
/// tapset and to the input), then the `.stp` files and the kernel's
/// syscall table.
pub struct Stdlib {
    /// The tapsets' text, which their spans index; kept with them.
    pub _map: SourceMap,
    pub files: Vec<ast::File>,
    pub macros: MacroLibrary,
}

pub fn stdlib(kernel: &FakeKernel) -> &'static Stdlib {
    static STDLIB: OnceLock<Stdlib> = OnceLock::new();
    STDLIB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stdlib");
        let mut paths = Vec::new();
        collect(&root, &mut paths);
        paths.sort_by_key(|p| (p.extension().is_none_or(|e| e != "stpm"), p.clone()));
        let mut map = SourceMap::new();
        // Id 0 is each input's own file (see `elaborate`): the tapsets'
        // spans must not name it.
        map.add("fuzz.stp", "");
        let mut macros = MacroLibrary::default();
        let mut files = Vec::new();
        let mut texts: Vec<(String, String)> = paths
            .iter()
            .map(|p| (p.display().to_string(), std::fs::read_to_string(p).unwrap()))
            .collect();
        texts.push((SYSCALL_TABLE.to_string(), syscall_table(kernel)));
        for (name, text) in texts {
            let is_macro_file = name.ends_with(".stpm");
            let id = map.add(name.clone(), text);
            let errors: Vec<_> = if is_macro_file {
                with_env(kernel, |env| {
                    parse::parse_macro_file(&map, id, env, &mut macros)
                })
            } else {
                let parsed = with_env(kernel, |env| parse::parse_file_with(&map, id, env, &macros));
                files.push(parsed.file);
                parsed.diags
            }
            .into_iter()
            .filter(|d| d.is_error())
            .collect();
            assert!(errors.is_empty(), "stdlib file {name} parses: {errors:?}");
        }
        Stdlib {
            _map: map,
            files,
            macros,
        }
    })
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "stp" || e == "stpm") {
            out.push(path);
        }
    }
}

/// The fake kernel, built once: building its tables took 15% of each
/// execution.
pub fn kernel() -> &'static FakeKernel {
    thread_local! {
        static KERNEL: &'static FakeKernel = Box::leak(Box::new(FakeKernel::new()));
    }
    KERNEL.with(|kernel| *kernel)
}

pub fn with_env<T>(kernel: &FakeKernel, f: impl FnOnce(&PreprocessEnv) -> T) -> T {
    let config = |name: &str| kernel.config(name);
    let args = ["1".to_string(), "two".to_string()];
    let env = PreprocessEnv {
        kernel: kernel.version(),
        arch: kernel.arch(),
        config: &config,
        args: &args,
    };
    f(&env)
}

/// Passes 1 and 2 on `data` with the stdlib; the program, if it elaborated.
/// The input is file 0, as the stdlib map reserves that id for it.
pub fn elaborate(kernel: &FakeKernel, data: &[u8]) -> Option<sema::Program> {
    let text = std::str::from_utf8(data).ok()?;
    let lib = stdlib(kernel);
    let mut map = SourceMap::new();
    let file = map.add("fuzz.stp", text);
    let parsed = with_env(kernel, |env| {
        parse::parse_file_with(&map, file, env, &lib.macros)
    });
    if parsed.diags.iter().any(|d| d.is_error()) {
        return None;
    }
    let (program, _diags) = sema::elaborate(
        &[parsed.file],
        &lib.files,
        kernel,
        &sema::ElabOptions::default(),
    );
    program
}
