//! Kernel-shared globals: BPF maps read and written from the host, in the
//! byte layout of `stap_lang::bpf::layout`.

use std::io;
use std::rc::Rc;

use stap_lang::bpf::layout;
use stap_lang::ir::{Storage, ValType};

use super::error::RuntimeError;
use super::stats::{Aggregate, StatShape};
use super::value::{Element, ElementValue, Key, Value, key_types, layout_value_size, value_type};

/// The BPF map syscalls host code needs. The session implements it over
/// `stap_runtime::sys`; tests use an in-memory fake. Per-CPU maps take and
/// return `value_size` rounded up to 8, times [`BpfMapOps::possible_cpus`].
pub trait BpfMapOps {
    /// `Ok(false)` when the key is absent.
    fn lookup(&self, fd: i32, key: &[u8], value: &mut [u8]) -> io::Result<bool>;
    fn update(&self, fd: i32, key: &[u8], value: &[u8]) -> io::Result<()>;
    /// `Ok(false)` when the key was absent.
    fn delete(&self, fd: i32, key: &[u8]) -> io::Result<bool>;
    /// The key after `key` (the first with `None`); `Ok(false)` at the end.
    fn next_key(&self, fd: i32, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<bool>;
    fn possible_cpus(&self) -> usize;
    /// Every entry: keys and values, concatenated.
    fn dump(&self, fd: i32, key_size: usize, value_size: usize) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        self.for_each_batch(fd, key_size, value_size, &mut |k, v| {
            keys.extend_from_slice(k);
            values.extend_from_slice(v);
        })?;
        Ok((keys, values))
    }
    /// Every entry, handed to `each` a batch at a time (keys and values
    /// concatenated), so a big map is decoded without first being copied
    /// whole. The default walks with `next_key` + `lookup`; implement it
    /// with `BPF_MAP_LOOKUP_BATCH` for big maps.
    fn for_each_batch(
        &self,
        fd: i32,
        key_size: usize,
        value_size: usize,
        each: &mut dyn FnMut(&[u8], &[u8]),
    ) -> io::Result<()> {
        let (keys, values) = walk(self, fd, key_size, value_size)?;
        each(&keys, &values);
        Ok(())
    }
}

pub struct KernelMap {
    fd: i32,
    ops: Rc<dyn BpfMapOps>,
    storage: Storage,
    shape: Option<StatShape>,
    max_string_len: u32,
    /// Bytes of each string key part: MAXSTRINGLEN, or less when the
    /// compiler found no longer text can reach the key.
    key_text: u32,
    name: String,
}

impl KernelMap {
    pub fn new(
        fd: i32,
        ops: Rc<dyn BpfMapOps>,
        storage: Storage,
        shape: Option<StatShape>,
        max_string_len: u32,
        key_text: u32,
        name: String,
    ) -> KernelMap {
        KernelMap {
            fd,
            ops,
            storage,
            shape,
            max_string_len,
            key_text,
            name,
        }
    }

    fn err(&self, e: io::Error) -> RuntimeError {
        RuntimeError::Map {
            global: self.name.clone(),
            message: e.to_string(),
        }
    }

    fn value_size(&self) -> usize {
        match &self.shape {
            Some(shape) => shape.layout.value_size() as usize,
            None => layout_value_size(value_type(&self.storage), self.max_string_len),
        }
    }

    /// Bytes of one lookup: per-CPU maps hold one value per possible CPU.
    fn buffer_size(&self) -> usize {
        match self.shape {
            Some(_) => self.value_size().next_multiple_of(8) * self.ops.possible_cpus().max(1),
            None => self.value_size(),
        }
    }

    /// The key's bytes; `None` when a string part is longer than a
    /// narrowed key slot holds, so no element can have it.
    fn encode_key(&self, key: &[Value]) -> Option<Vec<u8>> {
        let types = key_types(&self.storage);
        if types.is_empty() {
            return Some(0u32.to_ne_bytes().to_vec());
        }
        let mut out = Vec::with_capacity(layout::key_size(types, self.key_text) as usize);
        for (ty, v) in types.iter().zip(key) {
            if let (ValType::Str, Value::Str(text)) = (ty, v)
                && self.key_text < self.max_string_len
                && text.len() >= self.key_text as usize
            {
                return None;
            }
            encode_value(*ty, v, self.key_text, &mut out);
        }
        Some(out)
    }

    /// [`KernelMap::encode_key`] for a store: the compiler sized the key
    /// by every text that reaches it, so a longer one is a bug, reported
    /// rather than cut short.
    fn encode_stored_key(&self, key: &[Value]) -> Result<Vec<u8>, RuntimeError> {
        self.encode_key(key).ok_or_else(|| {
            RuntimeError::Internal(format!(
                "a key of `{}` is longer than its {}-byte slot",
                self.name, self.key_text
            ))
        })
    }

    /// `offsets`: the key's part offsets, computed once by the caller.
    fn decode_key_at(&self, bytes: &[u8], offsets: &[u32]) -> Key {
        key_types(&self.storage)
            .iter()
            .zip(offsets)
            .map(|(ty, at)| decode_value(*ty, &bytes[*at as usize..], self.key_text))
            .collect()
    }

    fn decode_plain(&self, bytes: &[u8]) -> Value {
        decode_value(value_type(&self.storage), bytes, self.max_string_len)
    }

    fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RuntimeError> {
        let mut value = vec![0u8; self.buffer_size()];
        match self.ops.lookup(self.fd, key, &mut value) {
            Ok(true) => Ok(Some(value)),
            Ok(false) => Ok(None),
            Err(e) => Err(self.err(e)),
        }
    }

    pub fn load_scalar(&self) -> Result<Value, RuntimeError> {
        Ok(match self.lookup(&0u32.to_ne_bytes())? {
            Some(bytes) => self.decode_plain(&bytes),
            None => Value::zero(value_type(&self.storage)),
        })
    }

    pub fn store_scalar(&self, value: &Value) -> Result<(), RuntimeError> {
        let mut bytes = Vec::new();
        encode_value(
            value_type(&self.storage),
            value,
            self.max_string_len,
            &mut bytes,
        );
        self.ops
            .update(self.fd, &0u32.to_ne_bytes(), &bytes)
            .map_err(|e| self.err(e))
    }

    pub fn get(&self, key: &[Value]) -> Result<Option<Value>, RuntimeError> {
        let Some(key) = self.encode_key(key) else {
            return Ok(None);
        };
        Ok(self.lookup(&key)?.map(|b| self.decode_plain(&b)))
    }

    pub fn set(&self, key: &[Value], value: &Value) -> Result<(), RuntimeError> {
        let mut bytes = Vec::new();
        encode_value(
            value_type(&self.storage),
            value,
            self.max_string_len,
            &mut bytes,
        );
        self.ops
            .update(self.fd, &self.encode_stored_key(key)?, &bytes)
            .map_err(|e| self.err(e))
    }

    pub fn delete(&self, key: &[Value]) -> Result<(), RuntimeError> {
        let Some(key) = self.encode_key(key) else {
            return Ok(());
        };
        self.ops
            .delete(self.fd, &key)
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    pub fn contains(&self, key: &[Value]) -> Result<bool, RuntimeError> {
        match self.encode_key(key) {
            Some(key) => Ok(self.lookup(&key)?.is_some()),
            None => Ok(false),
        }
    }

    pub fn clear(&self) -> Result<(), RuntimeError> {
        if matches!(self.storage, Storage::Scalar(_)) {
            return self.store_scalar(&Value::zero(value_type(&self.storage)));
        }
        if key_types(&self.storage).is_empty() {
            // A scalar statistic: a one-entry per-CPU array, zeroed.
            let zeros = vec![0u8; self.buffer_size()];
            return self
                .ops
                .update(self.fd, &0u32.to_ne_bytes(), &zeros)
                .map_err(|e| self.err(e));
        }
        let key_size = layout::key_size(key_types(&self.storage), self.key_text) as usize;
        let (keys, _) = self
            .ops
            .dump(self.fd, key_size, self.buffer_size())
            .map_err(|e| self.err(e))?;
        for key in keys.chunks_exact(key_size) {
            self.ops.delete(self.fd, key).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn cpu_slots(&self, bytes: &[u8]) -> Vec<Vec<i64>> {
        let stride = self.value_size().next_multiple_of(8);
        bytes
            .chunks_exact(stride)
            .map(|cpu| {
                cpu[..self.value_size()]
                    .chunks_exact(8)
                    .map(|b| i64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                    .collect()
            })
            .collect()
    }

    fn aggregate(&self, bytes: Option<&[u8]>) -> Result<Aggregate, RuntimeError> {
        let shape = self
            .shape
            .ok_or_else(|| RuntimeError::Internal(format!("`{}` is not a statistic", self.name)))?;
        let cpus = bytes.map(|b| self.cpu_slots(b)).unwrap_or_default();
        let empty = shape.empty();
        Ok(if cpus.is_empty() {
            shape.aggregate([empty.as_slice()])
        } else {
            shape.aggregate(cpus.iter().map(Vec::as_slice))
        })
    }

    pub fn stat(&self, key: &[Value]) -> Result<Aggregate, RuntimeError> {
        let bytes = match self.encode_key(key) {
            Some(key) => self.lookup(&key)?,
            None => None,
        };
        self.aggregate(bytes.as_deref())
    }

    /// `s <<< v` from the host: added to CPU 0's share.
    pub fn stat_add(&self, key: &[Value], value: i64) -> Result<(), RuntimeError> {
        let shape = self
            .shape
            .ok_or_else(|| RuntimeError::Internal(format!("`{}` is not a statistic", self.name)))?;
        let key = self.encode_stored_key(key)?;
        let mut bytes = self
            .lookup(&key)?
            .unwrap_or_else(|| vec![0u8; self.buffer_size()]);
        let mut cpu0 = self
            .cpu_slots(&bytes)
            .into_iter()
            .next()
            .unwrap_or_else(|| shape.empty());
        shape.add(&mut cpu0, value);
        for (i, slot) in cpu0.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&slot.to_ne_bytes());
        }
        self.ops
            .update(self.fd, &key, &bytes)
            .map_err(|e| self.err(e))
    }

    pub fn elements(&self) -> Result<Vec<Element>, RuntimeError> {
        let key_size = layout::key_size(key_types(&self.storage), self.key_text) as usize;
        let value_size = self.buffer_size();
        let offsets = layout::key_offsets(key_types(&self.storage), self.key_text);
        let mut elements = Vec::new();
        let mut failure = None;
        // Decoded a batch at a time, while the batch is still in cache.
        self.ops
            .for_each_batch(self.fd, key_size, value_size, &mut |keys, values| {
                if failure.is_some() {
                    return;
                }
                let pairs = keys
                    .chunks_exact(key_size.max(1))
                    .zip(values.chunks_exact(value_size.max(1)));
                elements.reserve(pairs.len());
                for (k, v) in pairs {
                    let value = match self.shape {
                        Some(_) => match self.aggregate(Some(v)) {
                            Ok(agg) => ElementValue::Stat(Box::new(agg)),
                            Err(e) => {
                                failure = Some(e);
                                return;
                            }
                        },
                        None => ElementValue::Plain(self.decode_plain(v)),
                    };
                    elements.push(Element {
                        key: self.decode_key_at(k, &offsets),
                        value,
                    });
                }
            })
            .map_err(|e| self.err(e))?;
        match failure {
            Some(e) => Err(e),
            None => Ok(elements),
        }
    }
}

fn encode_value(ty: ValType, v: &Value, max_string_len: u32, out: &mut Vec<u8>) {
    match (ty, v) {
        (ValType::Long, v) => out.extend_from_slice(&v.long().to_ne_bytes()),
        (ValType::Str, Value::Str(s)) => {
            let size = max_string_len as usize;
            let text = &s[..s.len().min(size.saturating_sub(1))];
            out.extend_from_slice(text);
            out.resize(out.len() + size - text.len(), 0);
        }
        (ValType::Str, Value::Long(_)) => out.resize(out.len() + max_string_len as usize, 0),
    }
}

fn decode_value(ty: ValType, bytes: &[u8], max_string_len: u32) -> Value {
    match ty {
        ValType::Long => Value::Long(i64::from_ne_bytes(
            bytes
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .unwrap_or([0; 8]),
        )),
        ValType::Str => {
            let field = &bytes[..bytes.len().min(max_string_len as usize)];
            let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
            Value::Str(field[..end].into())
        }
    }
}

/// The default `next_key` + `lookup` walk; also the fallback of real map
/// access where the kernel has no batch operations.
pub fn walk(
    ops: &(impl BpfMapOps + ?Sized),
    fd: i32,
    key_size: usize,
    value_size: usize,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let mut key = vec![0u8; key_size];
    let mut value = vec![0u8; value_size];
    let mut have = ops.next_key(fd, None, &mut key)?;
    while have {
        if ops.lookup(fd, &key, &mut value)? {
            keys.extend_from_slice(&key);
            values.extend_from_slice(&value);
        }
        let prev = key.clone();
        have = ops.next_key(fd, Some(&prev), &mut key)?;
    }
    Ok((keys, values))
}
