//! Registers and basic blocks of the function being lowered.
//!
//! Code is always appended to the current block. A terminator closes it
//! and opens a fresh block, so whatever follows a `return`, `next`, `break`
//! or `error()` lands in a block nothing jumps to; `finish` prunes those
//! (the BPF verifier refuses unreachable instructions) and gives every
//! block that falls off the end a return.

use crate::ir::{Block, BlockId, Catch, Inst, Op, Reg, StrId, Term, ValType};
use crate::source::Span;

struct OpenBlock {
    insts: Vec<Inst>,
    term: Option<(Term, Span)>,
    catch: Option<Catch>,
}

pub(crate) struct Body {
    regs: Vec<ValType>,
    blocks: Vec<OpenBlock>,
    current: BlockId,
    /// The enclosing `try`s, innermost last: blocks made meanwhile send
    /// their errors to the innermost one's handler.
    catches: Vec<Catch>,
}

impl Body {
    pub fn new() -> Body {
        Body {
            regs: Vec::new(),
            blocks: vec![OpenBlock {
                insts: Vec::new(),
                term: None,
                catch: None,
            }],
            current: BlockId(0),
            catches: Vec::new(),
        }
    }

    /// Blocks made from now on (until `pop_catch`) are inside a `try`.
    pub fn push_catch(&mut self, catch: Catch) {
        self.catches.push(catch);
    }

    pub fn pop_catch(&mut self) {
        self.catches.pop();
    }

    pub fn reg(&mut self, ty: ValType) -> Reg {
        self.regs.push(ty);
        Reg(self.regs.len() as u32 - 1)
    }

    pub fn reg_type(&self, reg: Reg) -> ValType {
        self.regs[reg.0 as usize]
    }

    pub fn emit(&mut self, op: Op, span: Span) {
        self.blocks[self.current.0 as usize]
            .insts
            .push(Inst { op, span });
    }

    /// Where the code emitted so far ends, for `insert_at`.
    pub fn mark(&self) -> (BlockId, usize) {
        (
            self.current,
            self.blocks[self.current.0 as usize].insts.len(),
        )
    }

    /// Inserts code at a `mark`: code that must run there but is only
    /// known once later code has been lowered.
    pub fn insert_at(&mut self, (block, at): (BlockId, usize), ops: Vec<(Op, Span)>) {
        let insts = &mut self.blocks[block.0 as usize].insts;
        let tail = insts.split_off(at);
        insts.extend(ops.into_iter().map(|(op, span)| Inst { op, span }));
        insts.extend(tail);
    }

    pub fn new_block(&mut self) -> BlockId {
        self.blocks.push(OpenBlock {
            insts: Vec::new(),
            term: None,
            catch: self.catches.last().copied(),
        });
        BlockId(self.blocks.len() as u32 - 1)
    }

    pub fn switch_to(&mut self, block: BlockId) {
        self.current = block;
    }

    /// Ends the current block, and continues in a fresh (so far unreachable)
    /// one.
    pub fn terminate(&mut self, term: Term, span: Span) {
        let block = &mut self.blocks[self.current.0 as usize];
        if block.term.is_none() {
            block.term = Some((term, span));
        }
        let next = self.new_block();
        self.switch_to(next);
    }

    /// Ends the current block with a jump to `target` and continues there.
    pub fn jump_to(&mut self, target: BlockId, span: Span) {
        self.terminate(Term::Jump(target), span);
        self.switch_to(target);
    }

    pub fn branch(&mut self, cond: Reg, then: BlockId, otherwise: BlockId, span: Span) {
        self.terminate(
            Term::Branch {
                cond,
                then,
                otherwise,
            },
            span,
        );
    }

    /// Closes the function: blocks without a terminator return the zero
    /// value of `ret` (stap functions that fall off the end return 0 or
    /// ""), then unreachable blocks are dropped and the rest renumbered.
    pub fn finish(
        mut self,
        ret: Option<ValType>,
        empty: StrId,
        span: Span,
    ) -> (Vec<ValType>, Vec<Block>) {
        self.thread_jumps();
        let reachable = self.reachable();
        let falls_off = self
            .blocks
            .iter()
            .zip(&reachable)
            .any(|(b, keep)| *keep && b.term.is_none());
        let zero = ret.filter(|_| falls_off).map(|ty| self.reg(ty));
        for (block, _) in self.blocks.iter_mut().zip(&reachable).filter(|(_, k)| **k) {
            if block.term.is_some() {
                continue;
            }
            if let Some(dst) = zero {
                let op = match self.regs[dst.0 as usize] {
                    ValType::Long => Op::Const { dst, value: 0 },
                    ValType::Str => Op::ConstStr { dst, id: empty },
                };
                block.insts.push(Inst { op, span });
            }
            block.term = Some((Term::Return(zero), span));
        }
        let mut renumber = vec![None; self.blocks.len()];
        let mut next = 0;
        for (old, keep) in reachable.iter().enumerate() {
            if *keep {
                renumber[old] = Some(BlockId(next));
                next += 1;
            }
        }
        let new_id = |b: BlockId| renumber[b.0 as usize].unwrap_or(b);
        let blocks = self
            .blocks
            .into_iter()
            .zip(reachable)
            .filter(|(_, keep)| *keep)
            .filter_map(|(block, _)| {
                let (term, term_span) = block.term?;
                let term = match term {
                    Term::Jump(b) => Term::Jump(new_id(b)),
                    Term::Branch {
                        cond,
                        then,
                        otherwise,
                    } => Term::Branch {
                        cond,
                        then: new_id(then),
                        otherwise: new_id(otherwise),
                    },
                    other => other,
                };
                Some(Block {
                    insts: block.insts,
                    term,
                    term_span,
                    catch: block.catch.map(|c| Catch {
                        handler: new_id(c.handler),
                        message: c.message,
                    }),
                })
            })
            .collect();
        (self.regs, blocks)
    }

    /// Points jumps and branches past blocks that only jump on (the then
    /// arm of `if (...) continue`, the header of `for (;;)`), so those
    /// blocks become unreachable and are pruned.
    fn thread_jumps(&mut self) {
        let count = self.blocks.len();
        let onward = |blocks: &[OpenBlock], start: BlockId| {
            let mut at = start;
            // At most `count` hops: a cycle of empty blocks stops here.
            for _ in 0..count {
                match &blocks[at.0 as usize] {
                    OpenBlock {
                        insts,
                        term: Some((Term::Jump(next), _)),
                        ..
                    } if insts.is_empty() && *next != at => at = *next,
                    _ => break,
                }
            }
            at
        };
        let targets: Vec<BlockId> = (0..count)
            .map(|b| onward(&self.blocks, BlockId(b as u32)))
            .collect();
        let follow = |b: BlockId| targets[b.0 as usize];
        for block in &mut self.blocks {
            block.term = match block.term.take() {
                Some((Term::Jump(b), span)) => Some((Term::Jump(follow(b)), span)),
                Some((
                    Term::Branch {
                        cond,
                        then,
                        otherwise,
                    },
                    span,
                )) => Some((
                    Term::Branch {
                        cond,
                        then: follow(then),
                        otherwise: follow(otherwise),
                    },
                    span,
                )),
                other => other,
            };
        }
    }

    fn reachable(&self) -> Vec<bool> {
        let mut seen = vec![false; self.blocks.len()];
        let mut work = vec![0usize];
        while let Some(b) = work.pop() {
            if seen[b] {
                continue;
            }
            seen[b] = true;
            if let Some(catch) = self.blocks[b].catch {
                work.push(catch.handler.0 as usize);
            }
            match &self.blocks[b].term {
                Some((Term::Jump(t), _)) => work.push(t.0 as usize),
                Some((
                    Term::Branch {
                        then, otherwise, ..
                    },
                    _,
                )) => {
                    work.push(otherwise.0 as usize);
                    work.push(then.0 as usize);
                }
                _ => {}
            }
        }
        seen
    }
}
