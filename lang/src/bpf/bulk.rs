//! `$$parms`, `$$vars` and `$$return` of function probes as data.
//!
//! `Op::BulkArgs` lists which arguments a function's `$$parms` prints and
//! under which names; that list is the only thing that differs between
//! the handlers of a wildcard such as para-callgraph.stp's
//! `probe $1.call { trace(1, $$parms) }`. So the lists go into the formats
//! map as rows, one per function, and the program reads its row at run
//! time: a shared kprobe program finds it through the attach cookie, which
//! the runtime sets per function (kprobe_multi's cookie array, or the
//! perf link's cookie); a program of its own has its row at a fixed place.
//! One program then serves hundreds of functions whatever their
//! parameters, instead of one program (and one verification) per
//! parameter list.
//!
//! A row holds, per `BulkArgs` op of the handler (in code order), `slots`
//! eight-byte entries: the offset of the piece's name text (`"name="`, or
//! `" name="` after the first) and where its value is read
//! ([`source_code`]); a list shorter than the op's `slots` ends with
//! [`END`].

use hashbrown::HashMap;

use crate::ir::{BulkItem, BulkSource, Function, Op, Reg};

/// A row entry's source: no more pieces.
pub(crate) const END: u32 = 0xffff;
/// A row entry's source: the return value.
pub(crate) const RETURN: u32 = 0xfffe;
/// Bytes of one row entry: the name's offset, then the source (u32 each).
pub(crate) const ENTRY_BYTES: u32 = 8;

pub(crate) fn source_code(source: BulkSource) -> u32 {
    match source {
        BulkSource::Arg(index) => index,
        BulkSource::Return => RETURN,
    }
}

/// Where one program's rows sit in the formats map.
#[derive(Debug, Clone)]
pub(crate) struct BulkPlace {
    /// The row's offset, or `None` when the attach cookie holds it (a
    /// program shared by several functions, one row each).
    pub row: Option<u32>,
    /// The largest row offset of this program: the bound a cookie is
    /// checked against before it is used as an offset.
    pub last_row: u32,
    /// The largest name offset its rows hold, for the same reason.
    pub last_name: u32,
    /// Per op, by its destination register.
    pub ops: HashMap<u32, BulkOpPlace>,
}

/// One `BulkArgs` op's part of a row.
#[derive(Debug, Clone)]
pub(crate) struct BulkOpPlace {
    /// Offset from the row's start.
    pub at: u32,
    /// Entries: the longest list among the program's functions.
    pub slots: u32,
    /// Every source some function reads here, for the read's dispatch.
    pub sources: Vec<BulkSource>,
}

/// The formats map's `bpf_snprintf` format for one piece, stap's `%#x`
/// (`0x0` for zero too). `bpf_snprintf` takes no `#`, nor a letter or
/// digit right after `%s`, so the `0x` is a string argument of its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BulkFormats {
    /// `%s%s%llx`: the name, `0x`, then the value.
    pub hex: u32,
    /// `0x`.
    pub prefix: u32,
}

/// The `BulkArgs` ops of `function`, in code order.
pub(crate) fn bulk_ops(function: &Function) -> Vec<(Reg, &[BulkItem])> {
    function
        .blocks
        .iter()
        .flat_map(|b| &b.insts)
        .filter_map(|inst| match &inst.op {
            Op::BulkArgs { dst, items } => Some((*dst, items.as_slice())),
            _ => None,
        })
        .collect()
}

/// `function` with its bulk lists emptied: two handlers equal this way
/// compile to one program once the lists are rows.
pub(crate) fn without_lists(function: &Function) -> Function {
    let mut function = function.clone();
    for block in &mut function.blocks {
        for inst in &mut block.insts {
            if let Op::BulkArgs { items, .. } = &mut inst.op {
                items.clear();
            }
        }
    }
    function
}

/// Appends the piece format and its prefix to `data`.
pub(crate) fn place_formats(data: &mut Vec<u8>) -> BulkFormats {
    let hex = data.len() as u32;
    data.extend_from_slice(b"%s%s%llx\0");
    let prefix = data.len() as u32;
    data.extend_from_slice(b"0x\0");
    BulkFormats { hex, prefix }
}

/// Appends the rows of one program whose functions' handlers are
/// `members` (the same code but for their lists, the lead first) to
/// `data`, names deduplicated through `names`. Returns the place and each
/// member's row offset (its cookie); `shared` says the program reads its
/// row through the cookie.
pub(crate) fn place_rows(
    data: &mut Vec<u8>,
    names: &mut HashMap<String, u32>,
    members: &[&Function],
    shared: bool,
) -> (BulkPlace, Vec<u64>) {
    let lists: Vec<Vec<(Reg, &[BulkItem])>> = members.iter().map(|f| bulk_ops(f)).collect();
    let mut ops = HashMap::new();
    let mut row_bytes = 0;
    for (k, (dst, _)) in lists[0].iter().enumerate() {
        let slots = lists
            .iter()
            .map(|ops| ops.get(k).map_or(0, |(_, items)| items.len()))
            .max()
            .unwrap_or(0) as u32;
        let mut sources: Vec<BulkSource> = lists
            .iter()
            .filter_map(|ops| ops.get(k))
            .flat_map(|(_, items)| items.iter().map(|i| i.source))
            .collect();
        sources.sort_by_key(|s| source_code(*s));
        sources.dedup();
        ops.entry(dst.0).or_insert(BulkOpPlace {
            at: row_bytes,
            slots,
            sources,
        });
        row_bytes += slots * ENTRY_BYTES;
    }
    let mut last_name = 0;
    let mut name_at = |data: &mut Vec<u8>, text: String| {
        let at = *names.entry(text).or_insert_with_key(|text| {
            let at = data.len() as u32;
            data.extend_from_slice(text.as_bytes());
            data.push(0);
            at
        });
        last_name = last_name.max(at);
        at
    };
    // Names first, so each row is one contiguous, aligned run.
    let named: Vec<Vec<Vec<(u32, u32)>>> = lists
        .iter()
        .map(|ops| {
            ops.iter()
                .map(|(_, items)| {
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| {
                            let sep = if i == 0 { "" } else { " " };
                            let name = name_at(data, format!("{sep}{}=", item.name));
                            (name, source_code(item.source))
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let mut rows = Vec::new();
    for member in named {
        while !data.len().is_multiple_of(8) {
            data.push(0);
        }
        rows.push(data.len() as u64);
        for (k, entries) in member.iter().enumerate() {
            let slots = ops[&lists[0][k].0.0].slots as usize;
            for at in 0..slots {
                let (name, source) = entries.get(at).copied().unwrap_or((0, END));
                data.extend_from_slice(&name.to_ne_bytes());
                data.extend_from_slice(&source.to_ne_bytes());
            }
        }
    }
    // An empty row still needs a place a cookie can point at.
    if row_bytes == 0 {
        data.extend_from_slice(&[0; 8]);
    }
    let last_row = rows.iter().copied().max().unwrap_or(0) as u32;
    let place = BulkPlace {
        row: (!shared).then_some(rows[0] as u32),
        last_row,
        last_name,
        ops,
    };
    (place, rows)
}
