//! The stap-rs compiler front end.
//!
//! Passes, in order (docs/ARCHITECTURE.md has the map):
//! 1. [`lexer`]: text to tokens (logos).
//! 2. [`preprocess`]: `@define` macros, `%( %? %: %)` conditionals, `$1`/`@1`.
//! 3. [`parse`]: tokens to the spanned [`ast`] (lalrpop), with error recovery.
//! 4. [`sema`]: elaboration, SystemTap's pass 2: tapsets, aliases, wildcards,
//!    context variables, type inference and placement (kernel or host).
//! 5. [`ir`]: lowering to the IR shared by both backends (pass 3).
//! 6. [`bpf`]: kernel-side handlers to eBPF instructions (pass 4, kernel half).
//!
//! [`pipeline::compile`] runs passes 3 and 4 in order for every front end.
//!
//! This crate makes no syscalls: kernel facts arrive through [`kernel::KernelFacts`].

pub mod ast;
pub mod ast_print;
pub mod bpf;
pub mod diag;
pub mod ir;
pub mod kernel;
pub mod kernel_tapsets;
pub mod lexer;
pub mod nesting;
pub mod parse;
pub mod pipeline;
pub mod preprocess;
pub mod printf;
pub mod sdt;
pub mod sema;
pub mod source;
// Test fixtures (a fake kernel, script helpers): never in a production
// build; test code enables them with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
