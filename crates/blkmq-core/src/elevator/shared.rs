//! The part of an elevator that runs without its lock ([`ElvShared`]), and where a request
//! queue keeps an elevator's two parts ([`ElvSlot`]).
//!
//! # The split
//!
//! An [`Elevator`] is one object behind one lock: insertion, merging and dispatch reorder
//! what it holds and need the whole view (Linux takes `dd->lock` and `bfqd->lock` there).
//! Completion is different: Linux's mq-deadline only counts it (`dd_finish_request`:
//! `atomic_inc(&stats->completed)`), outside `dd->lock`. A lock taken to bump a counter
//! costs an I/O a locked read-modify-write and a line written by every CPU that completes
//! there; so the elevator may hand the queue a second part, [`ElvShared`], that the queue
//! calls without the lock. It lives in its own allocation ([`Arc`]), apart from the locked
//! part: the locked part's `&mut self` never covers it, so the two run at once soundly.
//!
//! # What the shared part may do
//!
//! [`ElvShared::request_done`] runs on the completing CPU, possibly on several CPUs at once
//! and beside any locked hook on another. It may read the ending request's I/O
//! (handed to it: its `sched_data`, written by the locked hooks while the elevator held the
//! request) and update the elevator's shared state (atomics). It must not touch the
//! requests the elevator holds, nor anything the locked part keeps.
//!
//! # Memory ordering
//!
//! What the locked part wrote into a request's `sched_data` before it gave the request up
//! (dispatch) is seen by its completion: the request's token went from the dispatcher to
//! the completer through the driver, and that hand-over orders them (the same argument as
//! every other field of the request the completer reads). The shared part's counters are
//! written and read `Relaxed`: the locked part may read a count one completion late (as
//! if the completion came a moment later), never one early: a completion counted is of a
//! request inserted under a hold of the lock that came before, and a load never reads a
//! store that it happens before (read-write coherence), so a locked reader that sees a
//! completion's count sees that request's insertion too.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::cell::UnsafeCell;

use super::{Elevator, ElvCx};
use crate::request::{Rq, RqIo};

/// The part of an elevator that the request queue calls without the elevator's lock:
/// completion and its accounting. Handed out by [`Elevator::shared`], once, when the
/// elevator is attached.
///
/// ```
/// use blkmq_core::*;
/// use std::collections::VecDeque;
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// # struct Null;
/// # impl Driver for Null {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         cx.queue().end_request(rq, Status::Ok).unwrap();
/// #         Ok(())
/// #     }
/// # }
///
/// /// Requests ended, counted without the elevator's lock.
/// #[derive(Default)]
/// struct Ended(AtomicU64);
/// impl ElvShared for Ended {
///     fn request_done(&self, _: &ElvCx<'_>, _: &Rq, _: &RqIo, _issued: bool) -> bool {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         false // nothing for the locked hooks to do
///     }
/// }
///
/// /// First in, first out, counting what ends.
/// #[derive(Default)]
/// struct Fifo {
///     q: VecDeque<Rq>,
///     ended: Arc<Ended>,
/// }
/// impl Elevator for Fifo {
///     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
/// #         self.q.extend(rqs);
/// #     }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
/// #         self.q.pop_front()
/// #     }
/// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
///     fn shared(&self) -> Option<Arc<dyn ElvShared>> {
///         Some(self.ended.clone())
///     }
///     fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
///         // Driven directly (no queue), the locked hook does the same.
///         self.ended.request_done(cx, rq, cx.io(rq).unwrap(), true);
///     }
/// }
///
/// let fifo = Fifo::default();
/// let ended = fifo.ended.clone();
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
/// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(Box::new(fifo));
/// let queue = host.add_queue(config).unwrap();
/// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.submit(Bio::new(Op::Write, 64, 8)).unwrap();
/// assert_eq!(ended.0.load(Ordering::Relaxed), 2);
/// ```
pub trait ElvShared: Send + Sync {
    /// `rq`, which went through the elevator, ended (`io`: its I/O, as it ended): `issued`
    /// when the device completed it (else it ended with an error before it was issued).
    /// Called without the elevator's
    /// lock, on the completing CPU, possibly on several at once and beside the locked
    /// hooks (see the module's contract: the request's own I/O to read, the shared part's
    /// atomics to update, nothing the locked part holds).
    ///
    /// Returns whether the elevator's locked completion hooks are still to run for `rq`
    /// ([`Elevator::completed_request`] when `issued`, then
    /// [`Elevator::finish_request`], under the lock): `false` when this call did all
    /// the completion asks of the elevator. The locked hooks stay the whole completion for
    /// a caller that drives the elevator directly (without a queue); a shared part that
    /// answers `false` does what they would.
    ///
    /// The [`ElvShared`] example counts here and answers `false`.
    fn request_done(&self, cx: &ElvCx<'_>, rq: &Rq, io: &RqIo, issued: bool) -> bool;
}

/// A request queue's elevator: the locked part behind the queue's lock type `L`, and the
/// shared part beside it, which completion reads without the lock.
///
/// # Invariants
/// `shared` is the shared part of the elevator in `locked` when it was attached (or of the
/// last one, once [`lock`](Self::lock)'s holder took it away); it changes only through
/// [`get_mut`](Self::get_mut) or [`replace`](Self::replace), whose caller guarantees that
/// no [`shared`](Self::shared) reader runs.
pub(crate) struct ElvSlot<L> {
    locked: L,
    shared: UnsafeCell<Option<Arc<dyn ElvShared>>>,
}

// SAFETY: `shared` is written only with no reader about (see the invariants); what it holds
// is `Sync`, and `L` (a lock) is `Sync` on its own.
unsafe impl<L: Sync> Sync for ElvSlot<L> {}

/// The lock an [`ElvSlot`] keeps its locked part in.
type ElvLock<R> = lock_api::Mutex<R, Option<Box<dyn Elevator>>>;

impl<R: lock_api::RawMutex> ElvSlot<ElvLock<R>> {
    /// The slot of `elevator` (or of none).
    pub(crate) fn new(elevator: Option<Box<dyn Elevator>>) -> Self {
        let shared = elevator.as_ref().and_then(|e| e.shared());
        Self {
            locked: lock_api::Mutex::new(elevator),
            shared: UnsafeCell::new(shared),
        }
    }

    /// The locked part, under the lock.
    #[inline(always)]
    pub(crate) fn lock(&self) -> lock_api::MutexGuard<'_, R, Option<Box<dyn Elevator>>> {
        self.locked.lock()
    }

    /// The locked part, if the lock is free now (for a state dump that must not wait).
    pub(crate) fn try_lock(
        &self,
    ) -> Option<lock_api::MutexGuard<'_, R, Option<Box<dyn Elevator>>>> {
        self.locked.try_lock()
    }

    /// The locked part, owned.
    pub(crate) fn get_mut(&mut self) -> &mut Option<Box<dyn Elevator>> {
        self.locked.get_mut()
    }

    /// The shared part, if the elevator has one.
    #[inline(always)]
    pub(crate) fn shared(&self) -> Option<&dyn ElvShared> {
        // SAFETY: writers (`replace`) run only while no reader does (its contract).
        unsafe { (*self.shared.get()).as_deref() }
    }

    /// Attaches `elevator` (or none), dropping the one attached.
    ///
    /// # Safety
    /// No [`shared`](Self::shared) reader may run meanwhile, nor keep what it read: the
    /// queue is frozen with no usage left (every completion holds one).
    pub(crate) unsafe fn replace(&self, elevator: Option<Box<dyn Elevator>>) {
        let shared = elevator.as_ref().and_then(|e| e.shared());
        let old = core::mem::replace(&mut *self.locked.lock(), elevator);
        // SAFETY: no reader runs (the caller's guarantee), so this is the only access.
        let old_shared = unsafe { core::mem::replace(&mut *self.shared.get(), shared) };
        drop((old, old_shared));
    }
}
