//! (in progress) The preprocessor: runs on the token stream before parsing.

use crate::kernel::KernelVersion;

/// What `%( CONDITION %? ... %)` and `$1`/`@1` are evaluated against.
pub struct PreprocessEnv<'a> {
    /// `kernel_v` / `kernel_vr`.
    pub kernel: KernelVersion,
    /// `arch`.
    pub arch: String,
    /// `CONFIG_FOO == "y"`: looks up a kernel config option.
    pub config: &'a dyn Fn(&str) -> Option<String>,
    /// Command-line script arguments: `$1`/`@1` is `args[0]`.
    pub args: &'a [String],
}
