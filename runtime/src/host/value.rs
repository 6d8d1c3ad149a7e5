//! The values host code and the kernel maps exchange: a long or a string,
//! a key of several parts, a foreach element; and which value types a
//! global's storage holds. Both the global store and the BPF map access
//! build on these.

use stap_lang::bpf::layout;
use stap_lang::ir::{Storage, ValType};

use super::stats::Aggregate;

/// A long or a string: an array key part or element value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Long(i64),
    Str(Box<[u8]>),
}

impl Value {
    pub fn zero(ty: ValType) -> Value {
        match ty {
            ValType::Long => Value::Long(0),
            ValType::Str => Value::Str(Box::default()),
        }
    }

    pub fn long(&self) -> i64 {
        match self {
            Value::Long(n) => *n,
            Value::Str(_) => 0,
        }
    }
}

/// An element key: one value per declared key type. The common one-part
/// key is held inline, so a long-keyed element costs no allocation; it
/// compares, hashes and orders as the slice of its parts.
#[derive(Debug, Clone)]
pub enum Key {
    One(Value),
    Many(Box<[Value]>),
}

impl Key {
    pub fn as_slice(&self) -> &[Value] {
        match self {
            Key::One(v) => std::slice::from_ref(v),
            Key::Many(vs) => vs,
        }
    }
}

impl Default for Key {
    fn default() -> Key {
        Key::Many(Box::default())
    }
}

impl std::ops::Deref for Key {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        self.as_slice()
    }
}

impl std::borrow::Borrow<[Value]> for Key {
    fn borrow(&self) -> &[Value] {
        self.as_slice()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    // As the slice's hash, which `Borrow<[Value]>` lookups rely on.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl FromIterator<Value> for Key {
    fn from_iter<I: IntoIterator<Item = Value>>(iter: I) -> Key {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return Key::default();
        };
        match iter.next() {
            None => Key::One(first),
            Some(second) => {
                let mut parts = vec![first, second];
                parts.extend(iter);
                Key::Many(parts.into_boxed_slice())
            }
        }
    }
}

/// One element of a foreach snapshot.
#[derive(Debug, Clone)]
pub struct Element {
    pub key: Key,
    /// The value (arrays) or the aggregate (statistics arrays).
    pub value: ElementValue,
}

#[derive(Debug, Clone)]
pub enum ElementValue {
    Plain(Value),
    Stat(Box<Aggregate>),
}

pub(crate) fn key_types(storage: &Storage) -> &[ValType] {
    match storage {
        Storage::Array { keys, .. } | Storage::Stats { keys, .. } => keys,
        Storage::Scalar(_) => &[],
    }
}

pub(crate) fn value_type(storage: &Storage) -> ValType {
    match storage {
        Storage::Scalar(ty) | Storage::Array { value: ty, .. } => *ty,
        Storage::Stats { .. } => ValType::Long,
    }
}

pub(crate) fn layout_value_size(ty: ValType, max_string_len: u32) -> usize {
    layout::value_size(ty, max_string_len) as usize
}
