//! Waiting for one's own I/O: a submission that sleeps while the queue cannot take the bio,
//! and one that also waits for the bio's end (Linux's `submit_bio_wait`, and `io_schedule`
//! in `blk_mq_get_tag`).
//!
//! # Design
//!
//! [`submit`](RequestQueue::submit) never waits: a bio it cannot take comes back. A bio
//! comes back for one of three reasons, and each has an event that ends it:
//!
//! * the queue is frozen: the last [`unfreeze`](RequestQueue::unfreeze) wakes the queue's
//!   thaw list, on which the waiter registers before it looks at the frozen flag again;
//! * no request could be had (no tag free, the fair share or an elevator's shallow depth
//!   used up): the waiter waits as a tag allocation with the same hardware queue, CPU and
//!   depth limit would ([`QueueTags::alloc_async`]), holding a usage reference meanwhile so
//!   the tags it waits on cannot be replaced (as Linux holds `q_usage_counter` while it
//!   sleeps for a tag). Once that allocation succeeds, the tag is freed at once and the bio
//!   submitted again: a tag was free a moment ago, so the retry usually goes in, and when
//!   another submitter took it first, the waiter waits again;
//! * every split slot was taken: slots come free when a split parent ends, which is in the
//!   completion of a request, before its tag is freed; so the tag wait above covers it.
//!   Should a tag wait end without ever having to wait and the retry still come back (slots
//!   held by pieces merged into fewer requests than tags), the future does not retry in a
//!   loop: it wakes its own task and returns `Pending`, so it runs again after its executor's
//!   other work, and waits for a tag again the time after.
//!
//! A waiter for a tag holds a usage reference, so a freeze started meanwhile drains only
//! once that waiter has had its tag (when a request ends) and let go; a freeze from the same
//! thread as a pending future (a single-threaded executor) would wait for ever, as it would
//! for any request of that thread still in flight.
//!
//! Only the waker of the waiting task is stored (in the bitmap's wait queues or the thaw
//! list), and both reuse their storage, so waiting allocates nothing once they have held as
//! many waiters as they ever will. The end of the bio reaches the waiter through a
//! [`Completion`] inside the future: no table, no allocation.
//!
//! [`QueueTags::alloc_async`]: crate::QueueTags::alloc_async

use alloc::collections::VecDeque;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use crate::bio::{Bio, BioFlags, Op, Status};
use crate::completion::Completion;
use crate::driver::Driver;
use crate::queue_tags::{Alloc, AllocFuture};
use crate::sync::Ordering;

use super::usage::UsageRef;
use super::{Lock, RequestQueue};

/// The tasks waiting for a frozen queue to thaw, by key.
///
/// Its storage is reused: registering allocates only when more tasks wait at once than ever
/// before.
#[derive(Default)]
pub(super) struct ThawList {
    entries: VecDeque<(u64, Waker)>,
    next_key: u64,
}

impl ThawList {
    /// Registers `waker` under `key` (updating it while it is still listed), or under a new
    /// key; the key it is listed under.
    fn register(&mut self, key: Option<u64>, waker: &Waker) -> u64 {
        if let Some(key) = key {
            if let Some((_, listed)) = self.entries.iter_mut().find(|(k, _)| *k == key) {
                if !listed.will_wake(waker) {
                    *listed = waker.clone();
                }
                return key;
            }
        }
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        self.entries.push_back((key, waker.clone()));
        key
    }

    fn remove(&mut self, key: u64) {
        if let Some(i) = self.entries.iter().position(|(k, _)| *k == key) {
            self.entries.remove(i);
        }
    }
}

/// A thaw list under the platform's lock.
pub(super) type Thaw<D> = Lock<D, ThawList>;

impl<D: Driver> RequestQueue<D> {
    /// Wakes every task waiting for the queue to thaw (the last unfreeze calls it, after
    /// clearing the frozen flag). Waking happens outside the lock, one waker at a time.
    pub(super) fn wake_thawed(&self) {
        // Those registered now: a task registering meanwhile looks at the flag after it
        // registers, and sees the queue thawed.
        let listed = self.thaw.lock().entries.len();
        for _ in 0..listed {
            let Some((_, waker)) = self.thaw.lock().entries.pop_front() else {
                return;
            };
            waker.wake();
        }
    }

    /// Submits a bio, waiting while the queue cannot take it, and returns once it is in (or
    /// has ended); it does not wait for the bio's end. With `std` the thread sleeps (parks)
    /// until a tag frees up or the queue thaws; nothing spins. A bio marked
    /// [`BioFlags::NOWAIT`] ends with [`Status::Again`] instead of waiting.
    ///
    /// To wait for the bio's end as well, see [`submit_and_wait`](Self::submit_and_wait);
    /// without `std`, [`submit_async`](Self::submit_async) waits on any executor.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// # use std::sync::Mutex;
    /// static ENDED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());
    /// fn done(bio: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push((bio.sector, status));
    /// }
    /// queue.freeze_start();
    /// queue.submit_wait(Bio::new(Op::Read, 0, 8).flags(BioFlags::NOWAIT).end_io(done));
    /// assert_eq!(*ENDED.lock().unwrap(), [(0, Status::Again)]);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| queue.submit_wait(Bio::new(Op::Read, 8, 8).end_io(done))); // sleeps
    ///     queue.unfreeze(); // wakes it
    /// });
    /// assert_eq!(ENDED.lock().unwrap()[1], (8, Status::Ok));
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn submit_wait(&self, bio: Bio) {
        let mut entry = Entry::new(self, bio);
        blkmq_sbitmap::block_on(core::future::poll_fn(|cx| entry.poll_in(cx)));
    }

    /// Submits a bio and waits, parking the thread, until it has ended; its status (Linux's
    /// `submit_bio_wait`). Waits for room as [`submit_wait`](Self::submit_wait) does, so
    /// nothing spins; a bio marked [`BioFlags::NOWAIT`] that cannot go in now ends with
    /// [`Status::Again`].
    ///
    /// The bio's own `end_io` (if any) still runs, with its own `private` word, before this
    /// returns. A bio split to the queue's limits ends once, with the first error of its
    /// pieces. No heap allocation per I/O: the thread's waker is made once, and the end
    /// reaches it through a [`Completion`] on this call's stack.
    ///
    /// ```
    /// use blkmq_core::testing::Hold;
    /// use blkmq_core::*;
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// std::thread::scope(|s| {
    ///     let waiter = s.spawn(|| queue.submit_and_wait(Bio::new(Op::Read, 0, 8)));
    ///     // The driver, elsewhere, ends what it was given.
    ///     let rq = loop {
    ///         if let Some(rq) = host.driver().take().pop() {
    ///             break rq;
    ///         }
    ///         std::thread::yield_now();
    ///     };
    ///     queue.end_request(rq, Status::Medium).unwrap();
    ///     assert_eq!(waiter.join().unwrap(), Status::Medium);
    /// });
    /// // Past the end of the device: it ends at once.
    /// assert_eq!(queue.submit_and_wait(Bio::new(Op::Read, 2048, 8)), Status::IoErr);
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn submit_and_wait(&self, bio: Bio) -> Status {
        blkmq_sbitmap::block_on(self.submit_async(bio))
    }

    /// Submits a bio, for any executor: the future waits (registering its task's waker,
    /// never spinning) while the queue cannot take the bio, then until the bio has ended,
    /// and resolves to its status. `no_std`; no heap allocation per I/O.
    ///
    /// The bio goes in on the first poll. Its own `end_io` (if any) still runs, with its own
    /// `private` word, before the future resolves. Dropping the future before the bio went
    /// in ends the bio (what of it is not in) with [`Status::Again`]; dropping it after
    /// waits, as a [`Completion`]'s drop does, for the bio's end.
    ///
    /// ```
    /// use blkmq_core::testing::Hold;
    /// use blkmq_core::*;
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::task::{Context, Poll, Waker};
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// let mut read = pin!(queue.submit_async(Bio::new(Op::Read, 0, 8)));
    /// assert!(read.as_mut().poll(&mut cx).is_pending()); // in the driver
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// assert_eq!(read.as_mut().poll(&mut cx), Poll::Ready(Status::Ok));
    /// ```
    pub fn submit_async(&self, bio: Bio) -> SubmitFuture<'_, D> {
        SubmitFuture {
            entry: Entry::new(self, bio),
            attached: false,
            completion: Completion::new(),
        }
    }

    /// The tag allocation a submission of `bio` makes: its hardware queue, CPU and (with an
    /// elevator) depth limit.
    fn alloc_like(&self, bio: &Bio) -> Alloc {
        let (cpu, hctx) = match self.place(bio) {
            Some((cpu, hctx, _)) => (cpu, hctx),
            None => (self.cpu(), 0),
        };
        let mut alloc = Alloc::new(hctx, cpu);
        if self.has_elevator.load(Ordering::Relaxed)
            && bio.op != Op::Flush
            && !self.flush_sequenced(bio)
        {
            alloc.shallow_depth = self
                .elevator
                .lock()
                .as_ref()
                .and_then(|e| e.limit_depth(bio.op, bio.flags));
        }
        alloc
    }
}

/// What a submission that found no room waits for.
enum Room<'q, D: Driver> {
    /// Nothing: the bio is submitted (again) next.
    Nothing,
    /// A tag, as an allocation would wait for one. `alloc` is declared first so it goes
    /// before the usage reference that keeps its tags in place.
    Tag {
        alloc: AllocFuture<'q, D::Payload, D::Platform>,
        _usage: UsageRef<'q, D>,
    },
    /// The queue to thaw, listed under `key` on its thaw list.
    Thaw { key: u64 },
}

/// A bio on its way into a request queue, waiting while the queue cannot take it.
///
/// # Invariants
///
/// * `bio` is the bio (or the rest of a split bio) not yet in; `None` once in or ended.
/// * A bio still held when this drops ends with [`Status::Again`], so it ends exactly once
///   whatever happens (a split rest has its parent waiting for it).
struct Entry<'q, D: Driver> {
    queue: &'q RequestQueue<D>,
    bio: Option<Bio>,
    room: Room<'q, D>,
    /// The last tag wait ended without ever waiting: a retry refused after it found room
    /// only for want of something other than a tag (a split slot).
    quick: bool,
}

impl<'q, D: Driver> Entry<'q, D> {
    fn new(queue: &'q RequestQueue<D>, bio: Bio) -> Self {
        Self {
            queue,
            bio: Some(bio),
            room: Room::Nothing,
            quick: false,
        }
    }

    /// Submits the bio, waiting for room: `Ready` once it is in (or has ended).
    fn poll_in(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let queue = self.queue;
        loop {
            match &mut self.room {
                Room::Nothing => {}
                Room::Tag { alloc, .. } => {
                    let polled = Pin::new(alloc).poll(cx);
                    match polled {
                        Poll::Pending => {
                            self.quick = false;
                            return Poll::Pending;
                        }
                        Poll::Ready(Ok(rq)) => {
                            // A tag is free: give it back and submit. Freed while the usage
                            // reference still holds the tags in place.
                            let _ = queue.tags().free(rq);
                        }
                        Poll::Ready(Err(_)) => {
                            // No allocation like the bio's can ever succeed (a submission
                            // would have failed it the same way).
                            self.room = Room::Nothing;
                            if let Some(bio) = self.bio.take() {
                                queue.splits.end(bio, Status::IoErr);
                            }
                            return Poll::Ready(());
                        }
                    }
                    self.room = Room::Nothing;
                }
                Room::Thaw { key } => {
                    let key = *key;
                    if queue.is_frozen() {
                        let key = queue.thaw.lock().register(Some(key), cx.waker());
                        self.room = Room::Thaw { key };
                        // Looked at after registering: an unfreeze since either shows here
                        // or wakes the waker just listed.
                        if queue.is_frozen() {
                            return Poll::Pending;
                        }
                    }
                    self.leave_thaw_list();
                }
            }
            let Some(bio) = self.bio.take() else {
                return Poll::Ready(());
            };
            let back = match queue.submit(bio) {
                Ok(()) => return Poll::Ready(()),
                Err(back) => back,
            };
            if back.flags.contains(BioFlags::NOWAIT) {
                queue.splits.end(back, Status::Again);
                return Poll::Ready(());
            }
            let alloc = queue.alloc_like(&back);
            self.bio = Some(back);
            // Requests handed back by the driver hold tags: send them on their way.
            queue.kick_requeue_list();
            let Some(usage) = queue.enter() else {
                let key = queue.thaw.lock().register(None, cx.waker());
                self.room = Room::Thaw { key };
                continue;
            };
            if core::mem::take(&mut self.quick) {
                // Room was found without waiting and the bio still came back, not for a
                // tag: let the task run again later rather than retry in a loop here.
                drop(usage);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            self.quick = true;
            self.room = Room::Tag {
                // The usage reference beside it keeps these tags in place (see `tags`).
                alloc: queue.tags().alloc_async(alloc),
                _usage: usage,
            };
        }
    }

    fn leave_thaw_list(&mut self) {
        if let Room::Thaw { key } = self.room {
            self.queue.thaw.lock().remove(key);
        }
        self.room = Room::Nothing;
    }
}

impl<D: Driver> Drop for Entry<'_, D> {
    fn drop(&mut self) {
        self.leave_thaw_list();
        if let Some(bio) = self.bio.take() {
            self.queue.splits.end(bio, Status::Again);
        }
    }
}

/// The future of [`RequestQueue::submit_async`]: resolves to the bio's status once it has
/// ended.
///
/// ```
/// use blkmq_core::testing::Null; // ends every request inside `queue_rq`
/// use blkmq_core::*;
/// use std::future::Future;
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// let write = pin!(queue.submit_async(Bio::new(Op::Write, 0, 8)));
/// let mut cx = Context::from_waker(Waker::noop());
/// assert_eq!(write.poll(&mut cx), Poll::Ready(Status::Ok));
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct SubmitFuture<'q, D: Driver> {
    /// Declared first, so dropped first: a bio not yet in ends, and then the completion
    /// has nothing to wait for but the pieces already in.
    entry: Entry<'q, D>,
    /// Whether the bio carries `completion` (from the first poll, when it is pinned).
    attached: bool,
    completion: Completion,
}

impl<D: Driver> Future for SubmitFuture<'_, D> {
    type Output = Status;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Status> {
        // SAFETY: `completion` is pinned structurally (never moved out, only reached as
        // `Pin`); the other fields are not, and may be reached as plain references.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above: `completion` stays where it is until the future's drop.
        let mut completion = unsafe { Pin::new_unchecked(&mut this.completion) };
        if !this.attached {
            this.attached = true;
            if let Some(bio) = this.entry.bio.take() {
                // SAFETY: the bio ends exactly once: the entry hands it to the queue or
                // ends it itself (`splits.end`), and no copy of it is ended elsewhere.
                this.entry.bio = Some(unsafe { completion.as_mut().attach(bio) });
            }
        }
        if this.entry.poll_in(cx).is_pending() {
            return Poll::Pending;
        }
        completion.as_ref().poll_status(cx)
    }
}

impl<D: Driver> fmt::Debug for SubmitFuture<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitFuture")
            .field("in", &self.entry.bio.is_none())
            .field("completion", &self.completion)
            .finish()
    }
}
