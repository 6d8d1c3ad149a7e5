//! System call numbers and names of the native ABI.
//!
//! Where the numbers come from: the `syscalls` crate's table for the
//! architecture stap-rs is built for, which is generated from the kernel's
//! own `syscall_*.tbl`/`unistd.h` files. The running kernel does not
//! publish the mapping in a form that can be read robustly: the `syscalls:`
//! trace events' `format` files name `__syscall_nr` but not its value, and
//! `sys_call_table` is gone from kallsyms since x86_64 dispatches through a
//! switch (6.9 and later). Numbers are ABI, fixed once assigned, so a
//! table can only lag behind a newer kernel by its newest calls; those have
//! no number here ([`number`] says `None`), and callers must cope.
//!
//! Which calls the running kernel has, and their arguments, still come from
//! the kernel (its trace events): this table only numbers them.

use syscalls::Sysno;

use stap_lang::kernel::syscall_abi_name;

/// Every system call of the native ABI as `(number, ABI name)`, by number.
pub fn all() -> Vec<(u32, String)> {
    Sysno::iter()
        .map(|s| (s.id() as u32, s.name().to_string()))
        .collect()
}

/// The number of a call by its ABI name (`umount2`) or its kernel entry
/// point's name as the trace events spell it (`umount`, `newstat`).
pub fn number(name: &str) -> Option<u32> {
    let parse = |n: &str| n.parse::<Sysno>().ok().map(|s| s.id() as u32);
    parse(name).or_else(|| parse(&syscall_abi_name(name)?))
}

/// The ABI name of call `nr`.
pub fn name(nr: u32) -> Option<&'static str> {
    Sysno::new(nr as usize).map(|s| s.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_agree_with_libc() {
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(number("openat"), Some(libc::SYS_openat as u32));
            assert_eq!(number("newstat"), Some(libc::SYS_stat as u32));
            assert_eq!(number("umount"), Some(libc::SYS_umount2 as u32));
            assert_eq!(number("sendfile64"), Some(libc::SYS_sendfile as u32));
            assert_eq!(name(libc::SYS_read as u32), Some("read"));
        }
        assert_eq!(number("no_such_call"), None);
        assert_eq!(number("new"), None);
        for (nr, n) in all() {
            assert_eq!(number(&n), Some(nr), "{n}");
            assert_eq!(name(nr), Some(n.as_str()));
        }
    }

    /// Every system call this kernel traces (`syscalls:sys_enter_NAME`)
    /// has a number, so the raw `sys_enter` tracepoint can stand in for
    /// each of them. Skips where tracefs is not mounted.
    #[test]
    fn every_traced_syscall_of_this_kernel_has_a_number() {
        let Ok(fs) = crate::tracefs::Tracefs::find() else {
            eprintln!("skipped: no tracefs");
            return;
        };
        let Ok(events) = fs.events() else {
            eprintln!("skipped: tracefs events unreadable");
            return;
        };
        let missing: Vec<&str> = events
            .iter()
            .filter(|(s, _)| s == "syscalls")
            .filter_map(|(_, e)| e.strip_prefix("sys_enter_"))
            .filter(|n| number(n).is_none())
            .collect();
        assert!(missing.is_empty(), "no number for {missing:?}");
    }
}
