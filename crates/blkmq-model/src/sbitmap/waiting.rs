//! The waiting side of a queue run: waiters polled with counting wakers, and the checks on
//! who is woken when.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::task::Wake;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use core::task::{Context, Poll, Waker};

use super::model::Region;
use super::runner::Runner;
use super::target::Target;
use super::{MAX_WAITERS, NR_HINTS, Op};
use blkmq_sbitmap::{AllocHint, MAX_WAKE_BATCH, SbitmapError, SbitmapQueue, WAIT_QUEUES, Waiter};

/// A waker that counts its wake-ups: what the models check waiting with.
///
/// ```
/// use blkmq_model::sbitmap::WakeCount;
/// use std::sync::Arc;
/// use std::task::Waker;
///
/// let count = Arc::new(WakeCount::default());
/// Waker::from(Arc::clone(&count)).wake_by_ref();
/// assert_eq!(count.count(), 1);
/// ```
#[derive(Debug, Default)]
pub struct WakeCount(AtomicUsize);

impl WakeCount {
    /// Wake-ups so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A pending waiter and what the model knows about it.
pub(super) struct ModelWaiter<'q> {
    /// Tells waiters apart across ops (their positions shift as others leave).
    id: usize,
    waiter: Waiter<'q>,
    hint: &'q AllocHint,
    shallow: Option<usize>,
    wakes: Arc<WakeCount>,
    waker: Waker,
    /// Wake-ups counted when it was last polled: more now means it was woken since.
    seen: usize,
}

impl ModelWaiter<'_> {
    fn wakes(&self) -> usize {
        self.wakes.count()
    }

    fn is_woken(&self) -> bool {
        self.wakes() > self.seen
    }

    fn region(&self) -> Region {
        self.shallow.map_or(Region::Full, Region::Shallow)
    }
}

/// The waiting side of a queue run.
pub(super) struct Waiting<'q> {
    pub(super) queue: &'q SbitmapQueue,
    pub(super) hints: &'q [AllocHint; NR_HINTS],
    pub(super) min_shallow_depth: usize,
    /// Waiters that returned `Pending` and are still registered.
    pub(super) waiters: Vec<ModelWaiter<'q>>,
    /// The id of the next waiter.
    next_id: usize,
}

impl<'q> Waiting<'q> {
    pub(super) fn new(
        queue: &'q SbitmapQueue,
        hints: &'q [AllocHint; NR_HINTS],
        min_shallow_depth: usize,
    ) -> Self {
        Self {
            queue,
            hints,
            min_shallow_depth,
            waiters: Vec::new(),
            next_id: 0,
        }
    }
}

/// `clamp(usable / 8, 1, 8)`, from `SbitmapQueue`'s documentation.
pub(super) fn wake_batch_for(usable: usize, min_shallow_depth: usize) -> usize {
    (usable.min(min_shallow_depth) / WAIT_QUEUES).clamp(1, MAX_WAKE_BATCH)
}

impl<T: Target> Runner<'_, T> {
    pub(super) fn wait(&mut self, hint: u8, shallow: Option<usize>) -> Result<(), String> {
        let Some(waiting) = self.waiting.as_mut() else {
            return Ok(());
        };
        if waiting.waiters.len() >= MAX_WAITERS {
            return Ok(());
        }
        let queue = waiting.queue;
        let h = &waiting.hints[usize::from(hint) % NR_HINTS];
        let waiter = match shallow {
            None => queue.waiter(h),
            Some(d) => {
                let result = queue.shallow_waiter(h, d);
                let min = waiting.min_shallow_depth;
                let expected = (d < self.model.capacity && d < min).then_some(
                    SbitmapError::ShallowBelowMinimum {
                        shallow_depth: d,
                        min_shallow_depth: min,
                    },
                );
                match (result, expected) {
                    (Ok(waiter), None) => waiter,
                    (Err(e), Some(x)) if e == x => return Ok(()),
                    (result, expected) => {
                        return Err(format!(
                            "shallow_waiter({d}) = {:?}, expected error {expected:?}",
                            result.err()
                        ));
                    }
                }
            }
        };
        let wakes = Arc::new(WakeCount::default());
        let id = waiting.next_id;
        waiting.next_id += 1;
        waiting.waiters.push(ModelWaiter {
            id,
            waiter,
            hint: h,
            shallow,
            waker: Waker::from(Arc::clone(&wakes)),
            wakes,
            seen: 0,
        });
        let last = waiting.waiters.len() - 1;
        self.poll_at(last).map(|_| ())
    }

    pub(super) fn poll_waiter(&mut self, index: u8) -> Result<(), String> {
        let Some(waiting) = self.waiting.as_ref() else {
            return Ok(());
        };
        if waiting.waiters.is_empty() {
            return Ok(());
        }
        let i = usize::from(index) % waiting.waiters.len();
        self.poll_at(i).map(|_| ())
    }

    /// Polls waiter `i`: checks a `Ready` bit like a get's (and drops the waiter), or that a
    /// `Pending` one had no bit to take. Returns whether the waiter is still pending.
    pub(super) fn poll_at(&mut self, i: usize) -> Result<bool, String> {
        let Some(waiting) = self.waiting.as_mut() else {
            return Ok(false);
        };
        let w = &mut waiting.waiters[i];
        let start = super::runner::start_bit(w.hint.value(), self.model.depth);
        let region = w.region();
        let mut cx = Context::from_waker(&w.waker);
        let poll = w.waiter.poll_get(&mut cx);
        let hint_after = w.hint.value();
        match poll {
            Poll::Ready(bit) => {
                waiting.waiters.remove(i);
                self.model
                    .check_alloc(Some(bit), region, start, hint_after)
                    .map_err(|e| format!("waiter {i}: {e}"))?;
                Ok(false)
            }
            Poll::Pending => {
                w.seen = w.wakes();
                ensure!(
                    !self.model.region_has_free(region),
                    "waiter {i} ({region:?}) is pending, but a bit of its region is free"
                );
                Ok(true)
            }
        }
    }

    pub(super) fn drop_waiter(&mut self, index: u8) -> Result<(), String> {
        let Some(waiting) = self.waiting.as_mut() else {
            return Ok(());
        };
        if waiting.waiters.is_empty() {
            return Ok(());
        }
        let i = usize::from(index) % waiting.waiters.len();
        let dropped = waiting.waiters.remove(i);
        let was_woken = dropped.is_woken();
        let before: Vec<usize> = waiting.waiters.iter().map(ModelWaiter::wakes).collect();
        let asleep = waiting.waiters.iter().filter(|w| !w.is_woken()).count();
        drop(dropped);
        let newly_woken = waiting
            .waiters
            .iter()
            .zip(before)
            .filter(|(w, b)| w.wakes() > *b)
            .count();
        let expected = usize::from(was_woken && asleep > 0);
        ensure!(
            newly_woken == expected,
            "dropping a {} waiter woke {newly_woken} others ({asleep} asleep)",
            if was_woken { "woken" } else { "sleeping" }
        );
        Ok(())
    }

    /// Polls every woken waiter, as an executor would.
    pub(super) fn poll_woken(&mut self) -> Result<(), String> {
        let mut i = 0;
        while let Some(w) = self.waiting.as_ref().and_then(|w| w.waiters.get(i)) {
            if w.is_woken() {
                // A waiter that gets its bit leaves the list.
                if !self.poll_at(i)? {
                    continue;
                }
            }
            i += 1;
        }
        Ok(())
    }

    pub(super) fn wake_all(&mut self) -> Result<(), String> {
        let Some(waiting) = self.waiting.as_ref() else {
            return Ok(());
        };
        waiting.queue.wake_all();
        Self::check_all_woken(waiting, "wake_all")
    }

    pub(super) fn recalculate_wake_batch(&mut self, users: u8) -> Result<(), String> {
        let Some(waiting) = self.waiting.as_ref() else {
            return Ok(());
        };
        let users = usize::from(users);
        waiting.queue.recalculate_wake_batch(users);
        let share = self.model.depth.div_ceil(users.max(1));
        self.wake_batch = wake_batch_for(share, waiting.min_shallow_depth);
        Ok(())
    }

    /// The ids of the waiters asleep now (registered, and not woken since their last poll).
    pub(super) fn asleep(&self) -> Vec<usize> {
        self.waiting.as_ref().map_or(Vec::new(), |w| {
            w.waiters
                .iter()
                .filter(|w| !w.is_woken())
                .map(|w| w.id)
                .collect()
        })
    }

    /// Checks who `op` woke of the waiters that were `asleep` before it: a put claims at
    /// most one batch of wake-ups, and a batch put of `n` bits as many as `n` single puts
    /// would: fewer than a batch of frees is left over before it, so at most
    /// `ceil(n / wake_batch)` batches; an allocation, a failed put, a registration or a poll
    /// wakes nobody. (A failed batch put may: it counts the batch's bits towards a wake-up,
    /// because it may have freed some.)
    pub(super) fn check_wakes(&self, op: &Op, asleep: &[usize]) -> Result<(), String> {
        let Some(waiting) = self.waiting.as_ref() else {
            return Ok(());
        };
        let woken = waiting
            .waiters
            .iter()
            .filter(|w| w.is_woken() && asleep.contains(&w.id))
            .count();
        let most = match op {
            Op::Put { .. } => self.wake_batch,
            Op::PutBatch { .. } => {
                self.wake_batch * self.batch_freed.max(1).div_ceil(self.wake_batch.max(1))
            }
            Op::Get { .. }
            | Op::GetShallow { .. }
            | Op::GetBatch { .. }
            | Op::PutBogus { .. }
            | Op::Rehint { .. }
            | Op::TestBit { .. }
            | Op::ForEachSet { .. }
            | Op::Dump
            | Op::Wait { .. }
            | Op::PollWaiter { .. }
            | Op::PollWoken => 0,
            _ => return Ok(()),
        };
        ensure!(
            woken <= most,
            "{} woke {woken} waiters (at most {most} allowed)",
            op.kind()
        );
        Ok(())
    }

    pub(super) fn check_all_woken(waiting: &Waiting<'_>, what: &str) -> Result<(), String> {
        let asleep = waiting.waiters.iter().filter(|w| !w.is_woken()).count();
        ensure!(asleep == 0, "{asleep} waiters still asleep after {what}");
        Ok(())
    }

    pub(super) fn verify_waiting(&self, waiting: &Waiting<'_>) -> Result<(), String> {
        let queue = waiting.queue;
        ensure!(
            queue.waiters() == waiting.waiters.len(),
            "waiters() = {}, the model has {} pending",
            queue.waiters(),
            waiting.waiters.len()
        );
        ensure!(
            queue.wake_batch() == self.wake_batch,
            "wake_batch() = {}, expected {}",
            queue.wake_batch(),
            self.wake_batch
        );
        ensure!(
            waiting.waiters.iter().all(|w| w.wakes() <= w.seen + 1),
            "a waiter was woken twice for one registration"
        );
        // A lost wake-up: someone sleeps, nobody is about to act on a wake-up, and no bit is
        // held, so no put will ever come. Each waiter slept on a full region of at least one
        // wake batch, and every put of those bits counted towards a wake-up.
        let asleep = waiting.waiters.iter().filter(|w| !w.is_woken()).count();
        let woken = waiting.waiters.len() - asleep;
        ensure!(
            !(asleep > 0 && woken == 0 && self.model.held.is_empty()),
            "lost wake-up: {asleep} waiters asleep, none woken, no bit held"
        );
        Ok(())
    }
}
