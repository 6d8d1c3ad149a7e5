//! `netfilter.hook("NAME").pf("PF")[.priority("N")]`: BPF netfilter
//! links, with `$skb`, `$hooknum`, `$indev` and `$outdev`.

use super::{
    Component, ProbeContext, ResolvedPoint, no_arg, plain, render, string_arg, with_context,
};
use crate::ast::Literal;
use crate::diag::Diagnostic;
use crate::kernel::TypeId;
use crate::sema::hir::{ContextSource, ContextVar, ProbeKind};
use crate::sema::symbols::Elaborator;
use crate::source::Span;

/// The point names, for "did you mean".
pub(super) const NAMES: &[&str] = &["netfilter.hook.pf", "netfilter.pf.hook"];

impl<'a> Elaborator<'a> {
    /// `netfilter.hook("NAME").pf("PF")[.priority("N")]`, components in
    /// either order, through a BPF netfilter link.
    pub(super) fn resolve_netfilter(
        &mut self,
        comps: &[Component],
        span: Span,
    ) -> Result<ResolvedPoint<'a>, Diagnostic> {
        let usage = "expected `netfilter.hook(\"NF_INET_...\").pf(\"NF_INET\")[.priority(\"N\")]`";
        no_arg(&comps[0])?;
        let (mut hook, mut pf, mut priority) = (None, None, 0i32);
        for c in &comps[1..] {
            match c.name.as_str() {
                "hook" if hook.is_none() => {
                    let name = string_arg(c, "hook")?;
                    let Some(&(_, n)) = NETFILTER_HOOKS.iter().find(|(h, _)| *h == name) else {
                        return Err(
                            Diagnostic::error(format!("unknown netfilter hook `{name}`"))
                                .at(c.span, "unknown hook")
                                .suggest(name, NETFILTER_HOOKS.iter().map(|(h, _)| *h)),
                        );
                    };
                    hook = Some(n);
                }
                "pf" if pf.is_none() => {
                    let name = string_arg(c, "pf")?;
                    let Some(&(_, n)) = NETFILTER_PFS.iter().find(|(p, _)| *p == name) else {
                        return Err(Diagnostic::error(format!(
                            "unsupported netfilter protocol family `{name}`"
                        ))
                        .at(c.span, "BPF netfilter links take IPv4 and IPv6 hooks only (NF_INET/NFPROTO_IPV4, NF_INET6/NFPROTO_IPV6)")
                        .suggest(name, NETFILTER_PFS.iter().map(|(p, _)| *p)));
                    };
                    pf = Some(n);
                }
                "priority" => priority = netfilter_priority(c)?,
                _ => {
                    return Err(Diagnostic::error(format!(
                        "unknown netfilter probe `{}`",
                        render(comps)
                    ))
                    .at(span, usage));
                }
            }
        }
        let (Some(hooknum), Some(pf)) = (hook, pf) else {
            return Err(Diagnostic::error(format!(
                "incomplete netfilter probe `{}`",
                render(comps)
            ))
            .at(span, usage));
        };
        let context = self.netfilter_context(hooknum, span)?;
        let kind = ProbeKind::Netfilter {
            pf,
            hooknum,
            priority,
        };
        Ok(with_context(
            plain(kind, "netfilter", render(comps), span),
            context,
        ))
    }

    /// `$skb`, `$hooknum`, `$indev`, `$outdev` of a netfilter probe, from
    /// `struct bpf_nf_ctx { state; skb; }`; an error names what the kernel
    /// lacks for BPF netfilter links.
    fn netfilter_context(&self, hooknum: u32, span: Span) -> Result<ProbeContext, Diagnostic> {
        let facts = self.facts;
        let unavailable = |why: String| {
            Diagnostic::error(format!(
                "netfilter probes are not available on this kernel: {why}"
            ))
            .at(span, "needs a BPF netfilter link")
            .note("help: add `?` to skip this probe")
        };
        let version = facts.version();
        if (version.major, version.minor) < (6, 4) {
            return Err(unavailable(format!(
                "BPF netfilter links need Linux 6.4 or later (this is {version})"
            )));
        }
        let lookup = |name: &str| {
            facts
                .find_type(name)
                .map_err(|e| unavailable(e.to_string()))?
                .ok_or_else(|| {
                    unavailable(format!(
                        "its BTF has no `{name}` (CONFIG_NETFILTER_BPF_LINK is not set?)"
                    ))
                })
        };
        let nf_ctx = lookup("struct bpf_nf_ctx")?;
        let state = lookup("struct nf_hook_state")?;
        let member = |ty: TypeId, name: &str| {
            crate::kernel::find_member(facts, ty, name)
                .ok_or_else(|| unavailable(format!("its BTF has no member `{name}`")))
        };
        let var = |name: &str, ty: TypeId, source: ContextSource| ContextVar {
            name: name.to_string(),
            ty,
            type_name: facts.type_name(ty),
            source,
        };
        let skb = member(nf_ctx, "skb")?;
        let hook = member(state, "hook")?;
        let mut vars = vec![
            var("skb", skb.ty, ContextSource::TracepointArg(1)),
            var(
                "hooknum",
                hook.ty,
                ContextSource::Constant(i64::from(hooknum)),
            ),
        ];
        for (name, field) in [("indev", "in"), ("outdev", "out")] {
            let m = member(state, field)?;
            let source = ContextSource::PointedField {
                index: 0,
                offset: m.bit_offset / 8,
            };
            vars.push(var(name, m.ty, source));
        }
        Ok(ProbeContext {
            family: "netfilter",
            vars,
            ..ProbeContext::default()
        })
    }
}

/// `netfilter.hook("NAME")` names, with their `NF_INET_*` numbers; stap
/// also takes the old `NF_IP_*` spellings.
const NETFILTER_HOOKS: &[(&str, u32)] = &[
    ("NF_INET_PRE_ROUTING", 0),
    ("NF_INET_LOCAL_IN", 1),
    ("NF_INET_FORWARD", 2),
    ("NF_INET_LOCAL_OUT", 3),
    ("NF_INET_POST_ROUTING", 4),
    ("NF_IP_PRE_ROUTING", 0),
    ("NF_IP_LOCAL_IN", 1),
    ("NF_IP_FORWARD", 2),
    ("NF_IP_LOCAL_OUT", 3),
    ("NF_IP_POST_ROUTING", 4),
    ("NF_IP6_PRE_ROUTING", 0),
    ("NF_IP6_LOCAL_IN", 1),
    ("NF_IP6_FORWARD", 2),
    ("NF_IP6_LOCAL_OUT", 3),
    ("NF_IP6_POST_ROUTING", 4),
];

/// `.priority("N")`: stap writes it as a string; a number is fine too.
fn netfilter_priority(c: &Component) -> Result<i32, Diagnostic> {
    let n = match &c.arg {
        Some(Literal::String(s)) => s.trim().parse::<i64>().ok(),
        Some(Literal::Number(n)) => Some(*n),
        None => None,
    };
    // The kernel reserves INT_MIN and INT_MAX.
    n.and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n != i32::MIN && *n != i32::MAX)
        .ok_or_else(|| {
            Diagnostic::error(
                "a netfilter priority must be a number strictly between INT_MIN and INT_MAX",
            )
            .at(c.span, "expected `(\"N\")`")
        })
}

/// `.pf("NAME")` names with their `NFPROTO_*` numbers: the BPF netfilter
/// link takes IPv4 and IPv6 only.
/// stap's names (NFPROTO_*) and the older ones; BPF netfilter links take
/// IPv4 and IPv6 hooks only (no NFPROTO_ARP, NFPROTO_BRIDGE).
const NETFILTER_PFS: &[(&str, u32)] = &[
    ("NF_INET", 2),
    ("NF_INET6", 10),
    ("NFPROTO_IPV4", 2),
    ("NFPROTO_IPV6", 10),
];
