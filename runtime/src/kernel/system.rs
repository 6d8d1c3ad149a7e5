//! System facts: version and machine from uname(2), and the kernel's
//! build config.

use std::collections::HashMap;
use std::ffi::CStr;
use std::io::Read;

use stap_lang::kernel::KernelVersion;

use super::BtfKernel;

impl BtfKernel {
    pub(super) fn config_table(&self) -> &HashMap<String, String> {
        self.config
            .get_or_init(|| parse_config(&read_config(&self.version.release).unwrap_or_default()))
    }
}

/// Kernel version and machine from uname(2).
pub(super) fn uname() -> (KernelVersion, String) {
    // SAFETY: utsname is plain bytes; uname fills it or fails.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uts is a valid, writable utsname.
    let ok = unsafe { libc::uname(&mut uts) } == 0;
    let field = |raw: &[libc::c_char]| {
        // SAFETY: c_char and u8 have the same size and alignment.
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len()) };
        CStr::from_bytes_until_nul(bytes)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let (release, machine) = if ok {
        (field(&uts.release), field(&uts.machine))
    } else {
        (String::new(), String::new())
    };
    (parse_release(&release), machine)
}

/// `6.18.44-fc-v669` -> 6.18.44.
pub fn parse_release(release: &str) -> KernelVersion {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let mut next = || numbers.next().unwrap_or(0);
    let (major, minor, patch) = (next(), next(), next());
    KernelVersion {
        major,
        minor,
        patch,
        release: release.to_string(),
    }
}

/// The kernel's config, from /proc/config.gz or /boot/config-RELEASE.
fn read_config(release: &str) -> Option<String> {
    if let Ok(file) = std::fs::File::open("/proc/config.gz") {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .is_ok()
        {
            return Some(text);
        }
    }
    std::fs::read_to_string(format!("/boot/config-{release}")).ok()
}

/// `CONFIG_X=y` lines; `# CONFIG_X is not set` lines are left out, so they
/// read as unset. String values lose their quotes.
pub fn parse_config(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|line| line.starts_with("CONFIG_"))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| {
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            (key.to_string(), value.to_string())
        })
        .collect()
}
