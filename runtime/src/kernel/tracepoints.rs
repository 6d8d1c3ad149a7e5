//! Tracepoint arguments: raw tracepoints' BTF (names from
//! `__traceiter_NAME`, types from `btf_trace_NAME`) and classic events'
//! tracefs fields typed from BTF where it has their C spelling.

use stap_lang::kernel::{ClassicField, FactsError, Param, TypeId};

use super::types::{MAX_TYPE_DEPTH, Synthetic, split_array};
use super::{BtfKernel, facts_error};
use crate::btf::{Btf, Kind};
use crate::tracefs::FormatField;

impl BtfKernel {
    /// The BTF-typed arguments of raw tracepoint `name`, if it has them.
    pub(super) fn raw_tracepoint_args(&self, name: &str) -> Result<Option<Vec<Param>>, FactsError> {
        let Some((scope, iter_id)) = self.find_named(Kind::Func, &format!("__traceiter_{name}"))?
        else {
            return Ok(None);
        };
        let btf = scope.btf;
        let named = self.proto_params(btf, iter_id)?;
        // __traceiter_NAME(void *__data, args...): drop __data.
        let named: Vec<_> = named.into_iter().skip(1).collect();
        // btf_trace_NAME is a pointer to (void *, args...): the types the
        // kernel checks tp_btf programs against.
        let typed = match btf
            .find_by_name(Kind::Typedef, &format!("btf_trace_{name}"))
            .map_err(facts_error)?
        {
            Some(typedef) => self.typedef_proto_types(btf, typedef)?,
            None => None,
        };
        let params = named
            .iter()
            .enumerate()
            .map(|(i, (param_name, iter_ty))| {
                let ty = match &typed {
                    Some(types) if types.len() == named.len() => types[i],
                    _ => *iter_ty,
                };
                Param {
                    name: param_name.clone(),
                    ty: scope.global(ty),
                }
            })
            .collect();
        Ok(Some(params))
    }

    /// A FUNC's parameters as (name, local type id).
    pub(super) fn proto_params(
        &self,
        btf: &Btf,
        func_id: u32,
    ) -> Result<Vec<(String, u32)>, FactsError> {
        let func = btf.ty(func_id).map_err(facts_error)?;
        let proto = btf
            .ty(func.referenced().unwrap_or(0))
            .map_err(facts_error)?;
        let params = btf.params(&proto).map_err(facts_error)?;
        Ok(params
            .into_iter()
            .map(|p| (p.name.to_string(), p.ty))
            .collect())
    }

    /// Types of `btf_trace_NAME`'s prototype after its leading `void *`.
    pub(super) fn typedef_proto_types(
        &self,
        btf: &Btf,
        typedef: u32,
    ) -> Result<Option<Vec<u32>>, FactsError> {
        let mut id = btf
            .ty(typedef)
            .map_err(facts_error)?
            .referenced()
            .unwrap_or(0);
        for _ in 0..MAX_TYPE_DEPTH {
            if id == 0 {
                return Ok(None);
            }
            let record = btf.ty(id).map_err(facts_error)?;
            match record.kind {
                Kind::FuncProto => {
                    let params = btf.params(&record).map_err(facts_error)?;
                    return Ok(Some(params.iter().skip(1).map(|p| p.ty).collect()));
                }
                Kind::Ptr | Kind::Typedef | Kind::Const => {
                    id = record.referenced().unwrap_or(0);
                }
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    pub(super) fn classic_fields(&self, fields: &[&FormatField]) -> Vec<ClassicField> {
        fields
            .iter()
            .map(|field| ClassicField {
                name: field.name.clone(),
                ty: self.classic_field_type(field),
                offset: field.offset,
                size: field.size,
            })
            .collect()
    }

    /// The type of a tracefs field: its C type from BTF where BTF has it,
    /// else an integer of the field's size under the field's C spelling.
    pub(super) fn classic_field_type(&self, field: &FormatField) -> TypeId {
        let fallback = || {
            self.mint(Synthetic::Int {
                name: field.c_type.clone(),
                bytes: field.size,
                signed: field.signed,
            })
        };
        if field.is_data_loc() {
            return fallback();
        }
        if let Some((elem, len)) = split_array(&field.c_type) {
            return match self.lookup_c_type(elem) {
                Ok(Some(elem)) => self.mint(Synthetic::Array { elem, len }),
                _ => fallback(),
            };
        }
        match self.lookup_c_type(&field.c_type) {
            Ok(Some(ty)) => ty,
            _ => fallback(),
        }
    }
}
