//! The BTF ids fentry/fexit and tp_btf programs are loaded against, from
//! vmlinux BTF or a module's (whose BTF object fd goes with the id).

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use crate::btf::{Btf, Kind};
use crate::sys;

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
const BTF_DIR: &str = "/sys/kernel/btf";

pub(super) struct Target {
    pub(super) btf_id: u32,
    /// A module's BTF object, for `attach_btf_obj_fd`.
    pub(super) module_btf: Option<OwnedFd>,
}

/// Kernel BTF opened on first need.
pub(super) struct BtfTargets {
    vmlinux: Option<Arc<Btf>>,
}

impl BtfTargets {
    pub(super) fn new(vmlinux: Option<&Arc<Btf>>) -> BtfTargets {
        BtfTargets {
            vmlinux: vmlinux.cloned(),
        }
    }

    pub(super) fn vmlinux(&mut self) -> Result<Arc<Btf>, (String, io::Error)> {
        if let Some(btf) = &self.vmlinux {
            return Ok(btf.clone());
        }
        let btf = Btf::open(Path::new(VMLINUX_BTF))
            .map(Arc::new)
            .map_err(|e| {
                (
                    format!("cannot read {VMLINUX_BTF}"),
                    io::Error::other(e.to_string()),
                )
            })?;
        self.vmlinux = Some(btf.clone());
        Ok(btf)
    }

    /// A tp_btf target: the `btf_trace_NAME` typedef of vmlinux.
    pub(super) fn tracepoint(&mut self, name: &str) -> Result<Target, (String, io::Error)> {
        let base = self.vmlinux()?;
        let typedef = format!("btf_trace_{name}");
        let id = base
            .find_by_name(Kind::Typedef, &typedef)
            .map_err(|e| {
                (
                    format!("reading {VMLINUX_BTF}"),
                    io::Error::other(e.to_string()),
                )
            })?
            .ok_or_else(|| {
                (
                    format!("no BTF typedef {typedef} in vmlinux (a module's tracepoint?)"),
                    io::Error::from(io::ErrorKind::NotFound),
                )
            })?;
        Ok(Target {
            btf_id: id,
            module_btf: None,
        })
    }

    pub(super) fn find(
        &mut self,
        function: &str,
        module: Option<&str>,
    ) -> Result<Target, (String, io::Error)> {
        let base = self.vmlinux()?;
        let not_found = |place: &str| {
            (
                format!("no BTF for function {function} in {place}"),
                io::Error::from(io::ErrorKind::NotFound),
            )
        };
        let Some(module) = module else {
            let id = base
                .find_by_name(Kind::Func, function)
                .map_err(|e| {
                    (
                        format!("reading {VMLINUX_BTF}"),
                        io::Error::other(e.to_string()),
                    )
                })?
                .ok_or_else(|| not_found("vmlinux"))?;
            return Ok(Target {
                btf_id: id,
                module_btf: None,
            });
        };
        let path = Path::new(BTF_DIR).join(module);
        let split = Btf::open_split(&path, base).map_err(|e| {
            (
                format!("cannot read the BTF of module {module}"),
                io::Error::other(e.to_string()),
            )
        })?;
        let id = split
            .find_by_name(Kind::Func, function)
            .map_err(|e| {
                (
                    format!("reading {}", path.display()),
                    io::Error::other(e.to_string()),
                )
            })?
            .ok_or_else(|| not_found(&format!("module {module}")))?;
        let fd = sys::kernel_btf_fd(module)
            .map_err(|e| (format!("finding the BTF object of module {module}"), e))?
            .ok_or_else(|| not_found(&format!("the loaded BTF objects (module {module})")))?;
        Ok(Target {
            btf_id: id,
            module_btf: Some(fd),
        })
    }
}
