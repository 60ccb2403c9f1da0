//! An operation as the lanes read it (an invoke waiting for its completion, the completion, the two paired), and what a box's operation adds to its lane, one method per kind: a skip, a copy, a delete, an acquire, a renewal.

use crate::digest::{Belief, BoxLane, Keep, Outcome, Point, SkipRun, Span, MAX_TURBINES};
use chaos_history::verb;
use chaos_history::{OpType, OpView};
use std::collections::HashMap;

/// What an invoke's `why` said, kept without its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// Absent or not a string.
    None,
    TidyUp,
    Other,
}

impl Why {
    pub(super) fn of(op: &OpView) -> Why {
        match op.value.str("why") {
            None => Why::None,
            Some("tidy-up") => Why::TidyUp,
            Some(_) => Why::Other,
        }
    }
}

/// An invoke waiting for its completion.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub src: u64,
    pub t: i64,
    pub time_ns: i64,
    pub f: u32,
    pub why: Why,
    pub token: Option<i64>,
    pub target: Option<u32>,
    pub turbine: Option<Box<str>>,
}

/// What the lanes read of a completion.
pub(super) struct Done<'v> {
    pub src: u64,
    pub t: i64,
    pub time_ns: i64,
    pub kind: OpType,
    pub view: &'v OpView<'v>,
}

/// One operation as the lanes read it: an invoke, its completion, or both.
pub(super) struct Operation<'a> {
    pub invoke: Option<&'a Pending>,
    pub done: Option<&'a Done<'a>>,
    /// The first event's source, and when the operation began and ended.
    pub head_src: u64,
    pub start: i64,
    pub end: i64,
    /// The completion's type and `reason` (none for an invoke never answered).
    pub kind: Option<OpType>,
    pub reason: Option<&'a str>,
    /// The operation's mark: at its end, the completion with its invoke.
    pub at: Point,
}

impl<'a> Operation<'a> {
    pub fn of(invoke: Option<&'a Pending>, done: Option<&'a Done<'a>>) -> Operation<'a> {
        let head_src = invoke
            .map(|i| i.src)
            .or(done.map(|d| d.src))
            .expect("a pair has an event");
        let start = invoke
            .map(|i| i.t)
            .or(done.map(|d| d.t))
            .expect("a pair has an event");
        let end = done.map_or(start, |d| d.t);
        Operation {
            invoke,
            done,
            head_src,
            start,
            end,
            kind: done.map(|d| d.kind),
            reason: done.and_then(|d| d.view.value.str("reason")),
            at: Point {
                t: end,
                src: done.map_or(head_src, |d| d.src),
                other: done.and(invoke.map(|i| i.src)),
            },
        }
    }

    /// Its completion's reason is a shard's fence.
    pub fn fenced(&self) -> bool {
        self.reason == Some(verb::FENCED)
    }
}

impl BoxLane {
    /// A skip: the open run of skips grows, or one begins.
    pub(super) fn skip(&mut self, op: &Operation) {
        match &mut self.skip_open {
            Some(run) => {
                run.end = run.end.max(op.end);
                run.n += 1;
                run.last = op.head_src;
            }
            None => {
                self.skip_open = Some(SkipRun {
                    start: op.start,
                    end: op.end,
                    n: 1,
                    first: op.head_src,
                    last: op.head_src,
                })
            }
        }
    }

    /// A copy: its bar, by outcome (an open one kept apart), counted if ok, marked if failed.
    pub(super) fn copy(&mut self, op: &Operation, grid: &Keep) {
        let outcome = match op.kind {
            Some(OpType::Ok) => Outcome::Ok,
            Some(OpType::Fail) if op.fenced() => Outcome::Refused,
            Some(OpType::Fail) => Outcome::Fail,
            Some(_) => Outcome::Info,
            None => Outcome::Open,
        };
        let span = Span {
            start: op.start,
            end: op.end,
            invoke: op.invoke.map(|i| i.src),
            completion: op.done.map(|d| d.src),
            outcome,
        };
        match outcome {
            Outcome::Open => self.open_copies.push(span),
            _ => self.copies.push(span, grid),
        }
        if outcome == Outcome::Ok {
            self.ok_copies += 1;
        }
        if outcome == Outcome::Fail {
            self.failed.push(op.at, grid);
        }
    }

    /// A delete: a tidy-up or a source delete (by the invoke's `why`, else the
    /// completion's), and its turbine's latest delete; a failure is marked, a
    /// refusal already was.
    pub(super) fn delete(
        &mut self,
        op: &Operation,
        grid: &Keep,
        last_delete: &mut HashMap<String, i64>,
    ) {
        match op.kind {
            Some(OpType::Fail) if op.fenced() => {}
            Some(OpType::Fail) => self.failed.push(op.at, grid),
            _ => {
                let why = match op.invoke.map_or(Why::None, |i| i.why) {
                    Why::None => op.done.map_or(Why::None, |d| Why::of(d.view)),
                    why => why,
                };
                if why == Why::TidyUp {
                    self.tidy_deletes.push(op.at, grid);
                } else {
                    self.source_deletes.push(op.at, grid);
                }
                let turbine = op
                    .done
                    .and_then(|d| d.view.value.str("turbine"))
                    .or(op.invoke.and_then(|i| i.turbine.as_deref()));
                if let Some(turbine) = turbine {
                    if let Some(t) = last_delete.get_mut(turbine) {
                        *t = (*t).max(op.end);
                    } else if last_delete.len() < MAX_TURBINES {
                        last_delete.insert(turbine.to_string(), op.end);
                    }
                }
            }
        }
    }

    /// An acquire: won, a belief begins (ending the one before); else a poll.
    pub(super) fn acquire(&mut self, op: &Operation, grid: &Keep) {
        if op.kind != Some(OpType::Ok) {
            self.polls.push(op.at, grid);
            return;
        }
        let token = op
            .done
            .and_then(|d| d.view.value.int("token"))
            .or(op.invoke.and_then(|i| i.token));
        if let Some((began, old)) = self.believing.replace((op.end, token)) {
            self.beliefs.push(
                Belief {
                    start: began,
                    end: op.end,
                    token: old,
                    ended_by: "a new acquire",
                },
                grid,
            );
        }
        self.acquired.push(op.at, grid);
    }

    /// A renewal: ok, or failed (and, answered lost, the belief ends).
    pub(super) fn renew(&mut self, op: &Operation, grid: &Keep) {
        if op.kind == Some(OpType::Ok) {
            self.renew_ok.push(op.at, grid);
            return;
        }
        self.renew_fail.push(op.at, grid);
        if op.reason == Some("lost") {
            self.end_belief(op.end, "renewal answered: lost", grid);
        }
    }
}
