//! A request's place in a flush sequence (Linux's `rq->flush.seq` and `RQF_FLUSH_SEQ`), and
//! its I/O held aside while the request itself is issued as the sequence's flush.
//!
//! # Invariants
//! * `RqIo::flush` is zero for every request outside a sequence: it starts zero, nothing but
//!   the request queue's sequencer (`queue/flush.rs`) sets it, and the sequencer zeroes it
//!   before a sequenced request is ended or freed. So the completion of a request that is
//!   no part of a sequence reads one zero byte, in the line it reads anyway.
//! * [`AS_FLUSH`] is set exactly while the request is issued as its hardware queue's
//!   flush: its I/O, unless it is a flush already, held aside in the hardware queue's flush
//!   state, the request describing an empty [`Op::Flush`] meanwhile.

use crate::bio::{BioFlags, Op};

use super::{NO_TAG, RqIo};

/// The preflush step (done, once set).
pub(crate) const PREFLUSH: u8 = 1 << 0;
/// The data step.
pub(crate) const DATA: u8 = 1 << 1;
/// The postflush step.
pub(crate) const POSTFLUSH: u8 = 1 << 2;
/// Every step.
pub(crate) const ACTIONS: u8 = PREFLUSH | DATA | POSTFLUSH;
/// In a sequence (so the byte is never zero inside one).
pub(crate) const IN_SEQ: u8 = 1 << 3;
/// Issued as the flush command, its own I/O held aside.
pub(crate) const AS_FLUSH: u8 = 1 << 4;
/// Every step done: what [`RqIo::flush_next`] says when nothing is left.
pub(crate) const DONE: u8 = 1 << 5;

impl RqIo {
    /// An empty I/O, a place to hold another request's aside.
    pub(crate) const fn aside() -> Self {
        Self::EMPTY
    }

    /// The request's flush-sequence state: zero outside a sequence.
    #[inline(always)]
    pub(crate) fn flush_state(&self) -> u8 {
        self.flush
    }

    /// Sets the flush-sequence state.
    pub(crate) fn set_flush_state(&mut self, state: u8) {
        self.flush = state;
    }

    /// Whether the elevator never sees this request: a flush, or a request in a flush
    /// sequence (both go straight to dispatch, as Linux's `RQF_FLUSH_SEQ`).
    #[inline(always)]
    pub(crate) fn bypasses_elevator(&self) -> bool {
        self.op == Op::Flush || self.flush != 0
    }

    /// The next step of the sequence (the lowest not done), or [`DONE`].
    pub(crate) fn flush_next(&self) -> u8 {
        let left = !self.flush & ACTIONS;
        if left == 0 {
            DONE
        } else {
            left & left.wrapping_neg()
        }
    }

    /// Changes the flags the driver sees (the bios keep theirs).
    pub(crate) fn set_flags(&mut self, flags: BioFlags) {
        self.flags = flags;
    }

    /// Moves this request's I/O into `aside` (empty) and describes an empty flush instead:
    /// no bio, no sector, no flag. A flush is one already and keeps its own.
    pub(crate) fn hold_aside(&mut self, aside: &mut RqIo) {
        debug_assert!(aside.first.is_none() && aside.nr_bios == 0);
        self.flush |= AS_FLUSH;
        if self.op == Op::Flush {
            return;
        }
        aside.first = self.first.take();
        aside.chain_head = core::mem::replace(&mut self.chain_head, NO_TAG);
        aside.chain_tail = core::mem::replace(&mut self.chain_tail, NO_TAG);
        aside.nr_bios = core::mem::take(&mut self.nr_bios);
        aside.op = core::mem::replace(&mut self.op, Op::Flush);
        aside.flags = core::mem::take(&mut self.flags);
        aside.sector = core::mem::take(&mut self.sector);
        aside.sectors = core::mem::take(&mut self.sectors);
        aside.segments = core::mem::take(&mut self.segments);
        aside.prio = self.prio;
        aside.issuer = self.issuer;
    }

    /// Gives back the I/O [`hold_aside`](Self::hold_aside) moved into `aside`, which is
    /// left empty.
    pub(crate) fn restore_from(&mut self, aside: &mut RqIo) {
        self.flush &= !AS_FLUSH;
        if self.op == Op::Flush && self.first.is_some() {
            // A flush kept its own I/O.
            return;
        }
        debug_assert!(self.first.is_none() && self.nr_bios == 0);
        self.first = aside.first.take();
        self.chain_head = core::mem::replace(&mut aside.chain_head, NO_TAG);
        self.chain_tail = core::mem::replace(&mut aside.chain_tail, NO_TAG);
        self.nr_bios = core::mem::take(&mut aside.nr_bios);
        self.op = core::mem::replace(&mut aside.op, Op::Read);
        self.flags = core::mem::take(&mut aside.flags);
        self.sector = core::mem::take(&mut aside.sector);
        self.sectors = core::mem::take(&mut aside.sectors);
        self.segments = core::mem::take(&mut aside.segments);
    }
}
