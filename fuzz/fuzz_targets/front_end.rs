//! Lexer, preprocessor, parser and elaboration on arbitrary text, against the
//! fake kernel. Any panic is a bug: user input must only produce diagnostics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stap_lang::kernel::KernelFacts;
use stap_lang::{parse, preprocess::PreprocessEnv, sema, source::SourceMap, testing::FakeKernel};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Built once per process: its tables are not what is under test.
    thread_local! {
        static KERNEL: &'static FakeKernel = Box::leak(Box::new(FakeKernel::new()));
    }
    let kernel = KERNEL.with(|kernel| *kernel);
    let mut map = SourceMap::new();
    let file = map.add("fuzz.stp", text);
    let config = |name: &str| kernel.config(name);
    let args = ["1".to_string(), "two".to_string()];
    let env = PreprocessEnv {
        kernel: kernel.version(),
        arch: kernel.arch(),
        config: &config,
        args: &args,
    };
    let parsed = parse::parse_file(&map, file, &env);
    if parsed.diags.iter().any(|d| d.is_error()) {
        return;
    }
    let _ = sema::elaborate(&[parsed.file], &[], kernel, &sema::ElabOptions::default());
});
