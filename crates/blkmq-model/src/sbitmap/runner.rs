//! Executes ops against a target and the model, checking the bitmap's promises.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::model::{Model, Region, pick_free};
use super::target::Target;
use super::waiting::{Waiting, wake_batch_for};
use super::{BogusBatch, BogusPut, Config, NR_HINTS, Op};
use blkmq_sbitmap::{AllocHint, BitBatch, SbitmapError};

/// Where a get starts for a hint value: the bit itself, or for a value beyond the depth the
/// same fraction (`value / 2^32`) of the depth.
pub(super) fn start_bit(value: u32, depth: usize) -> usize {
    let value = value as usize;
    if value < depth {
        value
    } else {
        ((value as u128 * depth as u128) >> 32) as usize
    }
}

/// Executes ops against one target and the model.
pub(super) struct Runner<'q, T> {
    pub(super) target: &'q T,
    pub(super) waiting: Option<Waiting<'q>>,
    pub(super) hints: [AllocHint; NR_HINTS],
    pub(super) model: Model,
    /// The wake batch the queue should have now.
    pub(super) wake_batch: usize,
    /// Bits the last batch put gave back.
    pub(super) batch_freed: usize,
}

impl<'q, T: Target> Runner<'q, T> {
    pub(super) fn new(
        target: &'q T,
        waiting: Option<Waiting<'q>>,
        config: &Config,
        depth: usize,
        shift: Option<u32>,
    ) -> Result<Self, String> {
        let bpw = target.bits_per_word();
        ensure!(
            bpw.is_power_of_two() && bpw <= usize::BITS as usize,
            "bits_per_word {bpw} is not a power of two up to usize::BITS"
        );
        let actual = bpw.trailing_zeros();
        if let Some(shift) = shift {
            ensure!(actual == shift, "asked for shift {shift}, got {actual}");
        }
        ensure!(target.depth() == depth, "built depth {}", target.depth());
        let wake_batch = waiting
            .as_ref()
            .map_or(0, |w| wake_batch_for(depth, w.min_shallow_depth));
        Ok(Self {
            target,
            waiting,
            hints: core::array::from_fn(|i| AllocHint::new(i as u64)),
            model: Model {
                capacity: depth,
                depth,
                shift: actual,
                round_robin: config.round_robin,
                held: BTreeSet::new(),
                ever_held: BTreeSet::new(),
                freed: Vec::new(),
                maybe_pending: BTreeSet::new(),
            },
            wake_batch,
            batch_freed: 0,
        })
    }

    pub(super) fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        self.verify()
            .map_err(|e| format!("after building: {e}\n{}", self.target.dump()))?;
        for (i, op) in ops.iter().enumerate() {
            let asleep = self.asleep();
            self.step(op)
                .and_then(|()| self.check_wakes(op, &asleep))
                .and_then(|()| self.verify())
                .map_err(|e| format!("op #{i} {op:?}: {e}\n{}", self.target.dump()))?;
        }
        // Put everything back: the map must end empty.
        if let Some(waiting) = self.waiting.as_mut() {
            waiting.waiters.clear();
        }
        let held: Vec<usize> = self.model.held.iter().copied().collect();
        for bit in held {
            self.put(bit, 0)
                .map_err(|e| format!("final put of {bit}: {e}\n{}", self.target.dump()))?;
        }
        self.verify()
            .map_err(|e| format!("after putting everything back: {e}\n{}", self.target.dump()))
    }

    fn hint(&self, hint: u8) -> &AllocHint {
        &self.hints[usize::from(hint) % NR_HINTS]
    }

    /// The bit a get through `hint` starts from.
    fn start(&self, hint: &AllocHint) -> usize {
        start_bit(hint.value(), self.model.depth)
    }

    fn step(&mut self, op: &Op) -> Result<(), String> {
        let capacity = self.model.capacity;
        match *op {
            Op::Get { hint } => self.get(hint, Region::Full),
            Op::GetShallow { hint, depth } => {
                self.get(hint, Region::Shallow(usize::from(depth) % (capacity + 2)))
            }
            Op::GetBatch { hint, nr } => self.get_batch(hint, nr),
            Op::Put { index, hint } => {
                if self.model.held.is_empty() {
                    return Ok(());
                }
                let nth = usize::from(index) % self.model.held.len();
                let bit = *self.model.held.iter().nth(nth).unwrap_or(&0);
                self.put(bit, hint)
            }
            Op::PutBatch { pick, select, hint } => self.put_batch(pick, select, hint),
            Op::PutBogus { bit, kind } => self.put_bogus(bit, kind),
            Op::PutBatchBogus { pick, kind } => self.put_batch_bogus(pick, kind),
            Op::Resize { depth } => self.resize(usize::from(depth) % (capacity + 2)),
            Op::Rehint { hint, bit } => {
                self.hints[usize::from(hint) % NR_HINTS] = AllocHint::at(u32::from(bit));
                Ok(())
            }
            Op::TestBit { bit } => {
                let bit = usize::from(bit) % (capacity + 8);
                let expected = if bit < capacity {
                    Ok(self.model.held.contains(&bit))
                } else {
                    Err(SbitmapError::OutOfRange {
                        bit,
                        depth: capacity,
                    })
                };
                let got = self.target.test_bit(bit);
                ensure!(
                    got == expected,
                    "test_bit({bit}) = {got:?}, expected {expected:?}"
                );
                Ok(())
            }
            Op::ForEachSet { start, stop_after } => self.for_each_set(start, stop_after),
            Op::Dump => {
                let text = self.target.dump();
                let busy = format!("busy={}", self.model.held.len());
                let depth = format!("depth={}", self.model.depth);
                ensure!(
                    text.contains(&busy) && text.contains(&depth),
                    "dump lacks {busy:?} or {depth:?}"
                );
                Ok(())
            }
            Op::Wait { hint, shallow } => {
                let shallow = shallow.map(|d| 1 + usize::from(d) % (capacity + 1));
                if self.waiting.is_none() {
                    let region = shallow.map_or(Region::Full, Region::Shallow);
                    return self.get(hint, region);
                }
                self.wait(hint, shallow)
            }
            Op::PollWaiter { index } => self.poll_waiter(index),
            Op::PollWoken => self.poll_woken(),
            Op::DropWaiter { index } => self.drop_waiter(index),
            Op::WakeAll => self.wake_all(),
            Op::RecalculateWakeBatch { users } => self.recalculate_wake_batch(users),
        }
    }

    pub(super) fn get(&mut self, hint: u8, region: Region) -> Result<(), String> {
        let index = usize::from(hint) % NR_HINTS;
        let h = &self.hints[index];
        let start = self.start(h);
        let got = match region {
            Region::Full => self.target.get(h),
            Region::Shallow(d) => {
                let result = self.target.get_shallow(h, d);
                let expected_err = self.waiting.as_ref().and_then(|w| {
                    (d < self.model.capacity && d < w.min_shallow_depth).then_some(
                        SbitmapError::ShallowBelowMinimum {
                            shallow_depth: d,
                            min_shallow_depth: w.min_shallow_depth,
                        },
                    )
                });
                match (result, expected_err) {
                    (Ok(got), None) => got,
                    (Err(e), Some(x)) if e == x => return Ok(()),
                    (result, expected) => {
                        return Err(format!(
                            "get_shallow({d}) = {result:?}, expected error {expected:?}"
                        ));
                    }
                }
            }
        };
        let hint_after = self.hints[index].value();
        self.model.check_alloc(got, region, start, hint_after)
    }

    fn get_batch(&mut self, hint: u8, nr: u8) -> Result<(), String> {
        let bpw = self.model.bits_per_word();
        let nr = usize::from(nr) % (bpw + 2);
        let h = &self.hints[usize::from(hint) % NR_HINTS];
        let got = self.target.get_batch(h, nr);
        let hint_after = h.value() as usize;
        let model = &mut self.model;
        let Some(batch) = got else {
            ensure!(
                model.round_robin || nr == 0 || !model.region_has_free(Region::Full),
                "get_batch({nr}) failed, but a bit is free"
            );
            return Ok(());
        };
        ensure!(
            !model.round_robin,
            "get_batch in round-robin mode returned {batch:?}"
        );
        ensure!(nr > 0, "get_batch(0) returned {batch:?}");
        ensure!(
            !batch.is_empty() && batch.len() <= nr.min(bpw),
            "get_batch({nr}) returned {} bits",
            batch.len()
        );
        ensure!(
            batch.offset() % bpw == 0 && (bpw == usize::BITS as usize || batch.mask() >> bpw == 0),
            "get_batch returned {batch:?}, not one word"
        );
        for bit in batch.iter() {
            ensure!(
                bit < model.depth,
                "get_batch handed out {bit} at depth {}",
                model.depth
            );
            ensure!(model.is_free(bit), "get_batch handed out {bit} twice");
            model.take(bit);
        }
        ensure!(
            hint_after >> model.shift == batch.offset() >> model.shift,
            "get_batch of {batch:?} left the hint at {hint_after}, on another word"
        );
        Ok(())
    }

    fn put(&mut self, bit: usize, hint: u8) -> Result<(), String> {
        let h = &self.hints[usize::from(hint) % NR_HINTS];
        let before = h.value();
        let result = self.target.put(bit, h);
        ensure!(result.is_ok(), "put of held bit {bit} failed: {result:?}");
        let after = h.value();
        if self.model.round_robin {
            ensure!(
                after == before,
                "round-robin put moved the hint {before} -> {after}"
            );
        } else if bit < self.model.depth {
            ensure!(
                after as usize == bit,
                "put of {bit} left the hint at {after}"
            );
        }
        self.model.release(bit);
        Ok(())
    }

    fn put_batch(&mut self, pick: u16, select: u64, hint: u8) -> Result<(), String> {
        let words = self.model.words_with_held();
        if words.is_empty() {
            return Ok(());
        }
        let index = words[usize::from(pick) % words.len()];
        let held = self.model.held_mask(index);
        let mask = match held & select as usize {
            0 => held,
            some => some,
        };
        let batch = BitBatch::new(index << self.model.shift, mask);
        self.batch_freed = batch.len();
        let result = self.target.put_batch(batch, self.hint(hint));
        ensure!(
            result.is_ok(),
            "put_batch of held {batch:?} failed: {result:?}"
        );
        for bit in batch.iter() {
            self.model.release(bit);
        }
        Ok(())
    }

    fn put_bogus(&mut self, pick: u16, kind: BogusPut) -> Result<(), String> {
        let model = &self.model;
        let bit = match kind {
            BogusPut::OutOfRange => model.capacity + usize::from(pick),
            BogusPut::NeverAllocated => {
                match pick_free(model, pick, |b| !model.ever_held.contains(&b)) {
                    Some(bit) => bit,
                    None => return Ok(()),
                }
            }
            BogusPut::DoublePut => {
                let recent: Vec<usize> = model
                    .freed
                    .iter()
                    .copied()
                    .filter(|&b| model.is_free(b))
                    .collect();
                match recent.len() {
                    0 => match pick_free(model, pick, |_| true) {
                        Some(bit) => bit,
                        None => return Ok(()),
                    },
                    n => recent[usize::from(pick) % n],
                }
            }
        };
        let expected = if bit >= model.capacity {
            SbitmapError::OutOfRange {
                bit,
                depth: model.capacity,
            }
        } else {
            SbitmapError::NotAllocated { bit }
        };
        let h = &self.hints[usize::from(pick) % NR_HINTS];
        let before = h.value();
        let result = self.target.put(bit, h);
        ensure!(
            result == Err(expected),
            "bogus put of {bit}: {result:?}, expected {expected:?}"
        );
        ensure!(h.value() == before, "a failed put moved the hint");
        Ok(())
    }

    fn put_batch_bogus(&mut self, pick: u16, kind: BogusBatch) -> Result<(), String> {
        let model = &self.model;
        let bpw = model.bits_per_word();
        let nr_words = model.words_for(model.capacity);
        let pick = usize::from(pick);
        let word = pick % nr_words;
        let start = word * bpw;
        let (batch, expected) = match kind {
            BogusBatch::Misaligned => {
                if bpw == 1 {
                    return Ok(());
                }
                let offset = start + 1 + pick % (bpw - 1);
                let batch = BitBatch::new(offset, 1);
                (batch, SbitmapError::BadBatch { offset, mask: 1 })
            }
            BogusBatch::PastCapacity => {
                let tail = model.capacity % bpw;
                let batch = if pick % 2 == 0 && tail != 0 {
                    // The last word's held bits plus its first bit beyond the capacity.
                    let last = nr_words - 1;
                    BitBatch::new(last * bpw, model.held_mask(last) | 1 << tail)
                } else {
                    BitBatch::new(nr_words * bpw, 1 | (pick % 4))
                };
                let expected = SbitmapError::BadBatch {
                    offset: batch.offset(),
                    mask: batch.mask(),
                };
                (batch, expected)
            }
            BogusBatch::NeverAllocated | BogusBatch::DoublePut => {
                let end = (start + bpw).min(model.capacity);
                let candidates: Vec<usize> = (start..end)
                    .filter(|&b| {
                        model.is_free(b)
                            && (model.ever_held.contains(&b) == (kind == BogusBatch::DoublePut))
                    })
                    .collect();
                if candidates.is_empty() {
                    return Ok(());
                }
                let bad = candidates[(pick / nr_words) % candidates.len()];
                let batch = BitBatch::new(start, model.held_mask(word) | 1 << (bad - start));
                (batch, SbitmapError::NotAllocated { bit: bad })
            }
        };
        let h = &self.hints[pick % NR_HINTS];
        let before = h.value();
        let result = self.target.put_batch(batch, h);
        ensure!(
            result == Err(expected),
            "bogus put_batch of {batch:?}: {result:?}, expected {expected:?}"
        );
        ensure!(h.value() == before, "a failed put_batch moved the hint");
        // The invariant check after this op finds any bit the failed batch freed.
        Ok(())
    }

    fn resize(&mut self, depth: usize) -> Result<(), String> {
        let capacity = self.model.capacity;
        let expected = if depth == 0 {
            Err(SbitmapError::ZeroDepth)
        } else if depth > capacity {
            Err(SbitmapError::DepthTooLarge {
                depth,
                max: capacity,
            })
        } else {
            Ok(())
        };
        let result = self.target.resize(depth);
        ensure!(
            result == expected,
            "resize({depth}) = {result:?}, expected {expected:?}"
        );
        if result.is_err() {
            return Ok(());
        }
        self.model.depth = depth;
        // Resizing moves every pending free into its word.
        self.model.maybe_pending.clear();
        if let Some(waiting) = self.waiting.as_ref() {
            self.wake_batch = wake_batch_for(depth, waiting.min_shallow_depth);
            Self::check_all_woken(waiting, "resize")?;
        }
        Ok(())
    }

    fn for_each_set(&mut self, start: u16, stop_after: u16) -> Result<(), String> {
        let model = &self.model;
        let start = usize::from(start) % (model.capacity + 4);
        let stop_after = 1 + usize::from(stop_after) % (model.held.len() + 2);
        let from = if start < model.capacity { start } else { 0 };
        let expected: Vec<usize> = model
            .held
            .range(from..)
            .chain(model.held.range(..from))
            .copied()
            .take(stop_after)
            .collect();
        let mut seen = Vec::new();
        self.target.for_each_set(start, &mut |bit| {
            seen.push(bit);
            seen.len() < stop_after
        });
        ensure!(
            seen == expected,
            "for_each_set({start}) stopping after {stop_after} saw {seen:?}, expected {expected:?}"
        );
        Ok(())
    }

    /// The state checks run after every op.
    fn verify(&self) -> Result<(), String> {
        let model = &self.model;
        let target = self.target;
        ensure!(
            target.depth() == model.depth,
            "depth {} in the map, {} in the model",
            target.depth(),
            model.depth
        );
        let weight = target.weight();
        ensure!(
            weight == model.held.len(),
            "weight {weight}, but {} bits held",
            model.held.len()
        );
        ensure!(
            target.any_bit_set() != model.held.is_empty(),
            "any_bit_set {} with {} bits held",
            target.any_bit_set(),
            model.held.len()
        );
        for bit in 0..model.capacity {
            let got = target.test_bit(bit);
            let held = model.held.contains(&bit);
            ensure!(
                got == Ok(held),
                "test_bit({bit}) = {got:?}, model says {held}"
            );
        }
        if let Some(waiting) = self.waiting.as_ref() {
            self.verify_waiting(waiting)?;
        }
        Ok(())
    }
}
