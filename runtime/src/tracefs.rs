//! tracefs: the list of tracepoints and the `format` file of classic events.
//!
//! Classic (perf-event) tracepoints record a struct whose layout tracefs
//! publishes as text; the `syscalls:` events exist only in that form.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where tracefs is usually mounted, in the order they are tried.
pub const MOUNT_POINTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TracefsError {
    /// No tracefs at any of the usual places.
    NotMounted,
    /// tracefs is there, but this user may not read it.
    NotReadable(PathBuf),
    Io {
        path: PathBuf,
        message: String,
    },
    /// A `format` file that does not parse.
    BadFormat {
        path: PathBuf,
        message: String,
    },
}

impl fmt::Display for TracefsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TracefsError::NotMounted => write!(
                f,
                "tracefs is not mounted (looked in {}); tracepoints need it: \
                 mount -t tracefs tracefs /sys/kernel/tracing",
                MOUNT_POINTS.join(" and ")
            ),
            TracefsError::NotReadable(path) => write!(
                f,
                "tracefs at {} is not readable by this user (permission denied); \
                 stap-rs needs root, or CAP_BPF and CAP_PERFMON with read access to tracefs",
                path.display()
            ),
            TracefsError::Io { path, message } => {
                write!(f, "cannot read {}: {message}", path.display())
            }
            TracefsError::BadFormat { path, message } => {
                write!(f, "cannot parse {}: {message}", path.display())
            }
        }
    }
}

impl std::error::Error for TracefsError {}

/// A mounted tracefs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracefs {
    root: PathBuf,
}

/// One field of a classic event's record, as its `format` file gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatField {
    pub name: String,
    /// The C type with any array suffix: `const char *`, `char[16]`,
    /// `__data_loc char[]`.
    pub c_type: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
    /// `common_type`, `common_pid`, ...: the header every record starts with.
    pub is_common: bool,
}

impl FormatField {
    /// `__data_loc` fields hold `(length << 16) | offset` of data stored
    /// after the fixed record.
    pub fn is_data_loc(&self) -> bool {
        self.c_type.starts_with("__data_loc")
    }
}

/// A parsed `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    /// The event id, as perf_event_open's `config` wants it.
    pub id: u32,
    pub fields: Vec<FormatField>,
}

impl EventFormat {
    /// The fields after the common header: the event's own.
    pub fn own_fields(&self) -> impl Iterator<Item = &FormatField> {
        self.fields.iter().filter(|f| !f.is_common)
    }
}

impl Tracefs {
    /// Finds a mounted tracefs at the usual places.
    pub fn find() -> Result<Tracefs, TracefsError> {
        let mut denied = None;
        for root in MOUNT_POINTS.iter().map(Path::new) {
            match std::fs::metadata(root.join("events")) {
                Ok(meta) if meta.is_dir() => return Ok(Tracefs::at(root)),
                // Mounted but closed to us: say so, not "not mounted".
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    denied.get_or_insert_with(|| root.to_path_buf());
                }
                _ => {}
            }
        }
        Err(denied.map_or(TracefsError::NotMounted, TracefsError::NotReadable))
    }

    /// A tracefs at `root` (tests point this at a fake tree).
    pub fn at(root: &Path) -> Tracefs {
        Tracefs {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn event_dir(&self, system: &str, name: &str) -> Option<PathBuf> {
        // Names come from scripts: keep them to one path component.
        let plain = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
        (plain(system) && plain(name)).then(|| self.root.join("events").join(system).join(name))
    }

    pub fn has_event(&self, system: &str, name: &str) -> bool {
        self.event_dir(system, name).is_some_and(|dir| dir.is_dir())
    }

    /// Every event as `(system, name)`, sorted, from `available_events`.
    pub fn events(&self) -> Result<Vec<(String, String)>, TracefsError> {
        let path = self.root.join("available_events");
        let text = read(&path)?;
        let mut events: Vec<(String, String)> = text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(system, name)| (system.to_string(), name.to_string()))
            .collect();
        events.sort();
        events.dedup();
        Ok(events)
    }

    /// The systems that have an event called `name` (`kfree_skb` -> `skb`),
    /// sorted. One stat per system, no listing of events.
    pub fn systems_with_event(&self, name: &str) -> Result<Vec<String>, TracefsError> {
        let events = self.root.join("events");
        let entries = std::fs::read_dir(&events).map_err(|e| io_error(&events, e))?;
        let mut systems: Vec<String> = entries
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|system| self.has_event(system, name))
            .collect();
        systems.sort();
        Ok(systems)
    }

    /// An event's `format`, or `None` if there is no such event.
    pub fn format(&self, system: &str, name: &str) -> Result<Option<EventFormat>, TracefsError> {
        let Some(dir) = self.event_dir(system, name) else {
            return Ok(None);
        };
        let path = dir.join("format");
        if !dir.is_dir() {
            return Ok(None);
        }
        let text = read(&path)?;
        parse_format(&text)
            .map(Some)
            .map_err(|message| TracefsError::BadFormat { path, message })
    }
}

fn io_error(path: &Path, e: std::io::Error) -> TracefsError {
    TracefsError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn read(path: &Path) -> Result<String, TracefsError> {
    std::fs::read_to_string(path).map_err(|e| io_error(path, e))
}

/// Parses a `format` file:
///
/// ```text
/// name: sys_enter_openat
/// ID: 782
/// format:
///     field:unsigned short common_type;    offset:0;    size:2;    signed:0;
///     ...
///     field:const char * filename;    offset:24;    size:8;    signed:0;
/// print fmt: ...
/// ```
pub fn parse_format(text: &str) -> Result<EventFormat, String> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("name:") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("ID:") {
            id = Some(
                rest.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("bad ID line `{line}`"))?,
            );
        } else if line.starts_with("field:") {
            fields.push(parse_field(line)?);
        } else if line.starts_with("print fmt:") {
            break;
        }
    }
    Ok(EventFormat {
        name: name.ok_or("no `name:` line")?,
        id: id.ok_or("no `ID:` line")?,
        fields,
    })
}

/// `field:DECL; offset:N; size:N; signed:N;` (`signed` is missing on very
/// old kernels).
fn parse_field(line: &str) -> Result<FormatField, String> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once(':') else {
            return Err(format!("bad field part `{part}` in `{line}`"));
        };
        let number = || {
            value
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("bad {key} in `{line}`"))
        };
        match key {
            "field" => decl = Some(value.trim()),
            "offset" => offset = Some(number()?),
            "size" => size = Some(number()?),
            "signed" => signed = number()? != 0,
            _ => {}
        }
    }
    let decl = decl.ok_or_else(|| format!("no declaration in `{line}`"))?;
    let (c_type, name) =
        split_declaration(decl).ok_or_else(|| format!("bad declaration `{decl}`"))?;
    Ok(FormatField {
        is_common: name.starts_with("common_"),
        name,
        c_type,
        offset: offset.ok_or_else(|| format!("no offset in `{line}`"))?,
        size: size.ok_or_else(|| format!("no size in `{line}`"))?,
        signed,
    })
}

/// Splits `const char * filename` into (`const char *`, `filename`) and
/// `char comm[16]` into (`char[16]`, `comm`); `__data_loc char[] name` keeps
/// its `[]` on the type.
fn split_declaration(decl: &str) -> Option<(String, String)> {
    // Only `name[N]` ends in `]`; `__data_loc char[] name` ends in the name.
    let (declarator, array) = match decl.rfind('[') {
        Some(open) if decl.ends_with(']') => (&decl[..open], &decl[open..]),
        _ => (decl, ""),
    };
    let name_start = declarator
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let name = &declarator[name_start..];
    let ty = declarator[..name_start].trim();
    if name.is_empty() || ty.is_empty() {
        return None;
    }
    Some((format!("{ty}{array}"), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAT: &str = "name: sys_enter_openat
ID: 782
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;
\tfield:char comm[16];\toffset:32;\tsize:16;\tsigned:0;
\tfield:__data_loc char[] name;\toffset:48;\tsize:4;\tsigned:0;

print fmt: \"filename: 0x%08lx\", ((unsigned long)(REC->filename))
";

    #[test]
    fn parses_a_format_file() {
        let format = parse_format(OPENAT).expect("parses");
        assert_eq!(format.name, "sys_enter_openat");
        assert_eq!(format.id, 782);
        let own: Vec<_> = format
            .own_fields()
            .map(|f| {
                (
                    f.name.as_str(),
                    f.c_type.as_str(),
                    f.offset,
                    f.size,
                    f.signed,
                )
            })
            .collect();
        assert_eq!(
            own,
            [
                ("__syscall_nr", "int", 8, 4, true),
                ("filename", "const char *", 24, 8, false),
                ("comm", "char[16]", 32, 16, false),
                ("name", "__data_loc char[]", 48, 4, false),
            ]
        );
        assert!(format.fields[0].is_common);
        assert!(format.fields[5].is_data_loc());
    }

    #[test]
    fn bad_format_is_an_error() {
        assert!(parse_format("name: x\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:int;\toffset:0;\tsize:4;\n").is_err());
        assert!(parse_format("name: x\nID: 1\n\tfield:int a;\toffset:zz;\tsize:4;\n").is_err());
    }

    #[test]
    fn event_names_stay_inside_events() {
        let fs = Tracefs::at(Path::new("/nonexistent"));
        assert_eq!(fs.event_dir("..", "x"), None);
        assert_eq!(fs.event_dir("a/b", "x"), None);
        assert!(fs.event_dir("skb", "kfree_skb").is_some());
    }
}
