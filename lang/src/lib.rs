//! The stap-rs compiler front end.
//!
//! Passes, in order (docs/ARCHITECTURE.md has the map):
//! 1. [`lexer`]: text to tokens (logos).
//! 2. [`preprocess`]: `@define` macros, `%( %? %: %)` conditionals, `$1`/`@1`.
//! 3. [`parse`]: tokens to the spanned [`ast`] (lalrpop), with error recovery.
//! 4. [`sema`]: elaboration, SystemTap's pass 2: tapsets, aliases, wildcards,
//!    context variables, type inference and placement (kernel or host).
//!
//! This crate makes no syscalls: kernel facts arrive through [`kernel::KernelFacts`].

pub mod ast;
pub mod ast_print;
pub mod diag;
pub mod kernel;
pub mod lexer;
pub mod parse;
pub mod preprocess;
pub mod printf;
pub mod sema;
pub mod source;
pub mod testing;
