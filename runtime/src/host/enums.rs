//! `enum_name("E", value)`: enumerator names of kernel enums, from the
//! running kernel's BTF, opened on first use (most scripts never ask).

use hashbrown::HashMap;

use stap_lang::kernel::KernelFacts;

use crate::kernel::BtfKernel;

#[derive(Default)]
pub struct EnumNames {
    /// `None` until first needed; then `None` inside if BTF is unreadable.
    kernel: Option<Option<BtfKernel>>,
    /// Per enum type: value to enumerator; `None` when there is no such enum.
    tables: HashMap<String, Option<HashMap<i64, String>>>,
}

impl EnumNames {
    pub fn new() -> EnumNames {
        EnumNames::default()
    }

    /// The enumerator of `enum_type` (`skb_drop_reason` or `enum
    /// skb_drop_reason`) whose value is `value`. A value the enum does not
    /// have, or an enum the kernel does not have, gives the number, so
    /// output never loses information.
    pub fn name(&mut self, enum_type: &str, value: i64) -> String {
        if !self.tables.contains_key(enum_type) {
            let kernel = self
                .kernel
                .get_or_insert_with(|| BtfKernel::open_default().ok());
            let table = kernel
                .as_ref()
                .and_then(|k| k.enum_values(enum_type).ok().flatten())
                .map(|values| values.into_iter().map(|(n, v)| (v, n)).collect());
            self.tables.insert(enum_type.to_string(), table);
        }
        self.tables
            .get(enum_type)
            .and_then(|t| t.as_ref())
            .and_then(|t| t.get(&value))
            .cloned()
            .unwrap_or_else(|| value.to_string())
    }
}
