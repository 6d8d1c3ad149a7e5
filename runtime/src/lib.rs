//! stap-rs runtime: what the kernel offers and, later, loading, attaching,
//! the host-side JIT and the event loop.
//!
//! Kernel facts, read lazily so a script pays only for what it asks:
//! - [`btf`]: a lazy BTF reader (vmlinux and split module BTF).
//! - [`tracefs`]: the tracepoint list and classic events' `format` files.
//! - [`features`]: which probe mechanisms this kernel allows, probed once.
//! - [`dwarf`]: user binaries' function prototypes from DWARF (uprobes).
//!   A stripped binary's DWARF is read from its separate debug file
//!   ([`debugfile`]: build id or `.gnu_debuglink`, as gdb finds it).
//! - [`syscalls`]: system call numbers and names of the native ABI.
//! - [`kernel`]: [`kernel::BtfKernel`], the `KernelFacts` the compiler asks.

pub mod attach;
pub mod btf;
pub mod debugfile;
pub mod dwarf;
pub mod features;
pub mod host;
pub mod http;
pub mod jit;
pub mod kdwarf;
pub mod kernel;
pub mod ldso;
pub mod lines;
pub mod load;
pub mod modfile;
pub mod ringbuf;
pub mod sdt;
pub mod session;
pub mod stop;
pub mod sys;
pub mod syscalls;
pub mod tracefs;
pub mod uprobe;
