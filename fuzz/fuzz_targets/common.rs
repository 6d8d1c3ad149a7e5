//! What the pipeline targets share: the fake kernel, the real stdlib
//! (parsed once per process), and passes 1 and 2 on the input.

use std::path::Path;
use std::sync::OnceLock;

use stap_lang::kernel::KernelFacts;
use stap_lang::source::SourceMap;
use stap_lang::{ast, parse, preprocess::PreprocessEnv, sema, testing::FakeKernel};

/// The tapsets of `stdlib/`, read and parsed once.
pub struct Stdlib {
    /// The tapsets' text, which their spans index; kept with them.
    pub _map: SourceMap,
    pub files: Vec<ast::File>,
}

pub fn stdlib(kernel: &FakeKernel) -> &'static Stdlib {
    static STDLIB: OnceLock<Stdlib> = OnceLock::new();
    STDLIB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stdlib");
        let mut paths = Vec::new();
        collect(&root, &mut paths);
        paths.sort();
        let mut map = SourceMap::new();
        // Id 0 is each input's own file (see `elaborate`): the tapsets'
        // spans must not name it.
        map.add("fuzz.stp", "");
        let ids: Vec<_> = paths
            .iter()
            .map(|p| map.add(p.display().to_string(), std::fs::read_to_string(p).unwrap()))
            .collect();
        let files = ids
            .into_iter()
            .map(|id| {
                let parsed = with_env(kernel, |env| parse::parse_file(&map, id, env));
                assert!(parsed.diags.iter().all(|d| !d.is_error()), "stdlib parses");
                parsed.file
            })
            .collect();
        Stdlib { _map: map, files }
    })
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "stp") {
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
    let parsed = with_env(kernel, |env| parse::parse_file(&map, file, env));
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
