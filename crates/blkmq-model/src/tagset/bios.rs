//! Bios with a recording `end_io`, and the book of which bio must end how.
//!
//! `end_io` is a plain `fn`, so the ends go to a static log, keyed by the run that made the
//! bio (the upper half of its `private` value), so that runs on several threads at once (test
//! harness threads) keep apart. Each run takes its entries out when it is done.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use spin::mutex::SpinMutex;

use super::BioSpec;
use blkmq_core::{Bio, Op as BioOp, Status};

/// Ends recorded by `end_io`: run -> (bio sequence number, status), in the order they came.
static LOG: SpinMutex<BTreeMap<u32, Vec<(u32, Status)>>> = SpinMutex::new(BTreeMap::new());

/// Hands out run identities.
static NEXT_RUN: AtomicU32 = AtomicU32::new(1);

/// The `end_io` of every bio the model makes.
fn record_end(bio: Bio, status: Status) {
    let run = (bio.private >> 32) as u32;
    let seq = bio.private as u32;
    // A run that is over (its book dropped) no longer listens.
    if let Some(ends) = LOG.lock().get_mut(&run) {
        ends.push((seq, status));
    }
}

/// A run's place in [`LOG`]: the bios it marks end into it, until it is dropped. Runs on
/// several threads at once (test harness threads) keep apart.
pub(crate) struct EndLog {
    run: u32,
}

impl EndLog {
    pub(crate) fn new() -> Self {
        let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        LOG.lock().insert(run, Vec::new());
        Self { run }
    }

    /// `bio` as this run's bio `seq`: its `private` value names both, its `end_io` records.
    pub(crate) fn mark(&self, bio: Bio, seq: u32) -> Bio {
        bio.private((u64::from(self.run) << 32) | u64::from(seq))
            .end_io(record_end)
    }

    /// The sequence number of a bio this run marked, from its `private` value.
    pub(crate) fn seq_of(&self, bio: &Bio) -> Option<u32> {
        ((bio.private >> 32) as u32 == self.run).then_some(bio.private as u32)
    }

    /// The ends recorded since the last call, in the order they came.
    pub(crate) fn take(&self) -> Vec<(u32, Status)> {
        LOG.lock()
            .get_mut(&self.run)
            .map(core::mem::take)
            .unwrap_or_default()
    }
}

impl Drop for EndLog {
    fn drop(&mut self) {
        LOG.lock().remove(&self.run);
    }
}

/// What the model knows about a bio on a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BioModel {
    pub(super) seq: u32,
    pub(super) op: BioOp,
    pub(super) sector: u64,
    pub(super) sectors: u32,
}

/// The bios of one run: which the core holds, which ended, and which ends the current op is
/// expected to cause.
pub(super) struct Book {
    log: EndLog,
    next_seq: u32,
    /// Bios handed to the core and not yet ended.
    outstanding: BTreeSet<u32>,
    /// Bios that ended (by the core, or by the runner for a bio handed back).
    ended: BTreeSet<u32>,
    /// Ends the current op should cause, in order.
    expected: Vec<(u32, Status)>,
}

impl Book {
    pub(super) fn new() -> Self {
        Self {
            log: EndLog::new(),
            next_seq: 0,
            outstanding: BTreeSet::new(),
            ended: BTreeSet::new(),
            expected: Vec::new(),
        }
    }

    /// A fresh bio as `spec` describes, with a recording `end_io`.
    pub(super) fn make(&mut self, spec: BioSpec) -> (Bio, BioModel) {
        const OPS: [BioOp; 5] = [
            BioOp::Read,
            BioOp::Write,
            BioOp::Flush,
            BioOp::Discard,
            BioOp::WriteZeroes,
        ];
        let seq = self.next_seq;
        self.next_seq += 1;
        let op = OPS[usize::from(spec.op) % OPS.len()];
        let bio = self.log.mark(
            Bio::new(op, u64::from(spec.sector), u32::from(spec.sectors)).payload(u64::from(seq)),
            seq,
        );
        let model = BioModel {
            seq,
            op,
            sector: u64::from(spec.sector),
            sectors: u32::from(spec.sectors),
        };
        (bio, model)
    }

    /// The sequence number of a bio this run made, from its `private` value.
    pub(super) fn seq_of(&self, bio: &Bio) -> Option<u32> {
        self.log.seq_of(bio)
    }

    /// The core now holds bio `seq`.
    pub(super) fn hand_over(&mut self, seq: u32) {
        self.outstanding.insert(seq);
    }

    /// The current op should end `bios`, front to back, with `status`.
    pub(super) fn expect_ends(&mut self, bios: &[BioModel], status: Status) {
        self.expected.extend(bios.iter().map(|b| (b.seq, status)));
    }

    /// The runner ends a bio the core handed back, itself.
    pub(super) fn end_returned(&mut self, bio: Bio, status: Status) {
        if let Some(seq) = self.seq_of(&bio) {
            self.expected.push((seq, status));
            // The core gave it back, so it no longer holds it.
            self.outstanding.insert(seq);
        }
        bio.complete(status);
    }

    /// Checks the ends recorded since the last call against those expected. With
    /// `any_order`, as multisets (a detach ends bios in its own order).
    pub(super) fn settle(&mut self, any_order: bool) -> Result<(), String> {
        let mut got = self.log.take();
        let mut expected = core::mem::take(&mut self.expected);
        if any_order {
            got.sort_by_key(|&(seq, status)| (seq, status as u8));
            expected.sort_by_key(|&(seq, status)| (seq, status as u8));
        }
        for &(seq, _) in &got {
            ensure!(
                !self.ended.contains(&seq),
                "bio {seq} ended a second time (ends this op: {got:?})"
            );
            ensure!(
                self.outstanding.contains(&seq),
                "bio {seq} ended, but no request held it (ends this op: {got:?})"
            );
            self.outstanding.remove(&seq);
            self.ended.insert(seq);
        }
        ensure!(
            got == expected,
            "bio ends (sequence number, status): got {got:?}, expected {expected:?}"
        );
        Ok(())
    }

    /// Bios the core still holds.
    pub(super) fn outstanding(&self) -> &BTreeSet<u32> {
        &self.outstanding
    }

    /// How many bios ended.
    pub(super) fn nr_ended(&self) -> usize {
        self.ended.len()
    }
}
