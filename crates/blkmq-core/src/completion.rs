//! A bio's end, delivered to the one submitter that waits for it (Linux's on-stack
//! `struct completion` of `submit_bio_wait`).
//!
//! # Design
//!
//! A [`Completion`] lives with its submitter (on its stack, in its future) for the I/O's
//! duration. [`Completion::attach`] makes a bio carry the completion's address in its
//! `private` word and the completion's own callback in `end_io`, keeping the bio's callback
//! and word to call first, so nothing is looked up in a table and nothing is allocated.
//!
//! The end may come on any CPU and in any context (an interrupt handler in a kernel), so the
//! ending side never waits and takes no lock. One word holds the state:
//!
//! * `ATTACHED`: a bio carries the completion and has not ended;
//! * `DONE` with the status beside it: the bio ended;
//! * `REGISTERING`: the owner is storing a waker;
//! * `WAKING`: the ending side is taking the waker out.
//!
//! The waker slot belongs to whoever set its bit (`REGISTERING` or `WAKING`), never to both:
//! the owner sets `REGISTERING` only with a compare-exchange that fails once `DONE` is set,
//! and the ending side sets `DONE | WAKING` in one read-modify-write, then leaves the slot
//! alone if it saw `REGISTERING` (the owner, seeing `DONE` when it clears its bit, finishes
//! instead). The ending side's last access to the completion is the operation that clears
//! `WAKING` (or its `fetch_or`, when the owner was registering): the owner treats the
//! completion as still in use until it sees `DONE` without `WAKING`, so it may free the
//! memory right after, and the waker, already moved out, is woken from the ending side's own
//! stack. This is the protocol of `futures`' `AtomicWaker`, with the end folded into it.

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomPinned;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use crate::bio::{Bio, EndIo, Status};
use crate::sync::{AtomicU32, Ordering};

/// A bio carries the completion and has not ended.
const ATTACHED: u32 = 1 << 0;
/// The owner is storing a waker.
const REGISTERING: u32 = 1 << 1;
/// The ending side is taking the waker out.
const WAKING: u32 = 1 << 2;
/// The bio ended; its status is in the status bits.
const DONE: u32 = 1 << 3;
/// Where the status sits in the state word.
const STATUS_SHIFT: u32 = 8;

fn status_of(state: u32) -> Status {
    let index = ((state >> STATUS_SHIFT) & 0xff) as usize;
    Status::ALL.get(index).copied().unwrap_or(Status::IoErr)
}

/// Where one bio's end reaches the submitter that waits for it: no table, no allocation.
///
/// The submitter owns it, pinned (on its stack with [`core::pin::pin!`], or inside a future
/// such as [`RequestQueue::submit_async`](crate::RequestQueue::submit_async)'s), for as long as
/// the bio is in flight; [`attach`](Self::attach) ties a bio to it, and
/// [`poll_status`](Self::poll_status) (any executor) or [`wait`](Self::wait) (`std`, parking
/// the thread) give its status once it has ended. The end is lock-free and never waits, so a
/// bio may end in an interrupt handler.
///
/// Dropping a completion whose bio has not ended waits for that end (parking the thread with
/// `std`, spinning without), as Linux's on-stack completions must: the bio still points at it.
/// A completion can be reused for another bio once the first has ended.
///
/// Most callers want [`RequestQueue::submit_and_wait`](crate::RequestQueue::submit_and_wait)
/// or [`RequestQueue::submit_async`](crate::RequestQueue::submit_async), which do all of this
/// safely; `Completion` is the piece a kernel's own waiting primitives build on.
///
/// ```
/// use blkmq_core::{Bio, Completion, Op, Status};
/// use std::pin::pin;
///
/// let mut completion = pin!(Completion::new());
/// // SAFETY: the bio is ended exactly once, below, and no copy of it is ended.
/// let bio = unsafe { completion.as_mut().attach(Bio::new(Op::Read, 0, 8)) };
/// assert_eq!(completion.status(), None);
/// std::thread::spawn(move || bio.complete(Status::Medium)); // the "interrupt"
/// assert_eq!(completion.as_ref().wait(), Status::Medium);
/// ```
pub struct Completion {
    state: AtomicU32,
    /// The owner's waker; see the module docs for who may touch it when.
    waker: UnsafeCell<Option<Waker>>,
    /// The bio's own callback and `private` word, given back to it before it ends.
    chained: UnsafeCell<(Option<EndIo>, u64)>,
    /// Its address is in a bio's `private` word.
    _pinned: PhantomPinned,
}

// SAFETY: the waker slot is reached by one side at a time, as the state word's bits say (see
// the module docs); `chained` is written by the owner before the bio is handed in (with
// exclusive access, `Pin<&mut Self>`) and read by the ending side, the bio's hand-over
// ordering the two. `Waker` and `EndIo` are `Send + Sync`.
unsafe impl Sync for Completion {}
// SAFETY: as above; nothing in it is tied to a thread.
unsafe impl Send for Completion {}

impl Completion {
    /// A completion no bio is attached to.
    ///
    /// ```
    /// use blkmq_core::Completion;
    /// assert_eq!(Completion::new().status(), None);
    /// ```
    pub fn new() -> Self {
        Self {
            state: AtomicU32::new(0),
            waker: UnsafeCell::new(None),
            chained: UnsafeCell::new((None, 0)),
            _pinned: PhantomPinned,
        }
    }

    /// `bio`, reporting its end here: its `private` word holds this completion's address
    /// and its `end_io` a callback that, when the bio ends, first gives the bio back its own
    /// `end_io` and `private` and calls that `end_io` (if any), then records the status and
    /// wakes the waiter. A previous bio's status is forgotten.
    ///
    /// # Safety
    /// The returned bio, and every copy of it, must end at most once: hand it to a request
    /// queue (which ends each bio it takes exactly once) or end it yourself, not both, and
    /// never end a copy besides. (A bio that never ends is safe, but then dropping the
    /// completion waits for ever.)
    ///
    /// # Panics
    /// When a bio attached before has not ended yet.
    ///
    /// ```
    /// use blkmq_core::{Bio, Completion, Op, Status};
    /// use std::pin::pin;
    ///
    /// fn own(bio: Bio, status: Status) {
    ///     assert_eq!((bio.private, status), (7, Status::Ok)); // its own word, back
    /// }
    /// let mut completion = pin!(Completion::new());
    /// let bio = Bio::new(Op::Write, 0, 8).private(7).end_io(own);
    /// // SAFETY: ended once, here.
    /// unsafe { completion.as_mut().attach(bio) }.complete(Status::Ok);
    /// assert_eq!(completion.status(), Some(Status::Ok));
    /// ```
    pub unsafe fn attach(self: Pin<&mut Self>, bio: Bio) -> Bio {
        let state = self.state.load(Ordering::Acquire);
        assert!(
            state & ATTACHED == 0 || state & DONE != 0,
            "a completion attached to a second bio before the first ended"
        );
        // Spins only while the last bio's ending side is leaving (a few instructions).
        while self.state.load(Ordering::Acquire) & WAKING != 0 {
            core::hint::spin_loop();
        }
        // SAFETY: we do not move out of the pinned value; we only write its fields.
        let this = unsafe { self.get_unchecked_mut() };
        *this.chained.get_mut() = (bio.end_io, bio.private);
        *this.waker.get_mut() = None;
        this.state.store(ATTACHED, Ordering::Release);
        let address = this as *const Self as usize as u64;
        bio.private(address).end_io(Self::ended)
    }

    /// The `end_io` of an attached bio.
    fn ended(mut bio: Bio, status: Status) {
        let completion = bio.private as usize as *const Self;
        // SAFETY: `private` is the address `attach` stored, of a pinned completion that stays
        // in place until its drop, and its drop waits for this end (`ATTACHED` without
        // `DONE`); `attach`'s contract makes this the bio's only end. The owner reads
        // `chained` only in `attach`, which it cannot call before `DONE`.
        let (end_io, private) = unsafe { *(*completion).chained.get() };
        bio.private = private;
        bio.end_io = end_io;
        bio.complete(status);
        let done = DONE | WAKING | (u32::from(status as u8) << STATUS_SHIFT);
        // SAFETY: as above; the completion is alive until we clear `WAKING` (or, when the
        // owner is registering, until this operation, after which we touch nothing).
        let before = unsafe { (*completion).state.fetch_or(done, Ordering::AcqRel) };
        if before & REGISTERING != 0 {
            // The owner holds the slot; it sees `DONE` when it lets go, and finishes.
            return;
        }
        // SAFETY: `WAKING` is ours and `REGISTERING` was clear: the slot is ours alone.
        let waker = unsafe { (*(*completion).waker.get()).take() };
        // SAFETY: as above. Our last access: from here the owner may free the completion.
        unsafe { (*completion).state.fetch_and(!WAKING, Ordering::AcqRel) };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The status of the bio attached last, once it has ended; `None` before (or when no bio
    /// was ever attached).
    ///
    /// ```
    /// use blkmq_core::{Bio, Completion, Op, Status};
    /// use std::pin::pin;
    ///
    /// let mut completion = pin!(Completion::new());
    /// // SAFETY: ended once, below.
    /// let bio = unsafe { completion.as_mut().attach(Bio::new(Op::Read, 0, 8)) };
    /// assert_eq!(completion.status(), None);
    /// bio.complete(Status::IoErr);
    /// assert_eq!(completion.status(), Some(Status::IoErr));
    /// ```
    pub fn status(&self) -> Option<Status> {
        let state = self.state.load(Ordering::Acquire);
        (state & DONE != 0 && state & WAKING == 0).then(|| status_of(state))
    }

    /// The status once the attached bio has ended; until then `Pending`, and `cx`'s waker
    /// is woken when it ends. For any executor.
    ///
    /// # Panics
    /// When no bio was ever attached (nothing would wake the waiter).
    ///
    /// ```
    /// use blkmq_core::{Bio, Completion, Op, Status};
    /// use std::pin::pin;
    /// use std::task::{Context, Poll, Waker};
    ///
    /// let mut completion = pin!(Completion::new());
    /// // SAFETY: ended once, below.
    /// let bio = unsafe { completion.as_mut().attach(Bio::new(Op::Read, 0, 8)) };
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(completion.as_ref().poll_status(&mut cx).is_pending());
    /// bio.complete(Status::Ok);
    /// assert_eq!(completion.as_ref().poll_status(&mut cx), Poll::Ready(Status::Ok));
    /// ```
    pub fn poll_status(self: Pin<&Self>, cx: &mut Context<'_>) -> Poll<Status> {
        let this = self.get_ref();
        loop {
            let state = this.state.load(Ordering::Acquire);
            assert!(
                state & (ATTACHED | DONE) != 0,
                "waiting on a completion no bio was attached to"
            );
            if state & DONE != 0 {
                if state & WAKING != 0 {
                    // The ending side is leaving with our old waker (a few instructions
                    // from done): be polled again.
                    #[cfg(loom)]
                    loom::thread::yield_now();
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                return Poll::Ready(status_of(state));
            }
            if this
                .state
                .compare_exchange(
                    state,
                    state | REGISTERING,
                    Ordering::Acquire,
                    Ordering::Acquire,
                )
                .is_err()
            {
                continue;
            }
            // SAFETY: `REGISTERING` is ours, set while `DONE` was clear: the ending side
            // leaves the slot to us (module docs).
            let slot = unsafe { &mut *this.waker.get() };
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
            match this.state.compare_exchange(
                state | REGISTERING,
                state,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Poll::Pending,
                Err(ended) => {
                    // The bio ended meanwhile and its ending side left everything to us.
                    drop(slot.take());
                    this.state
                        .store(ended & !(REGISTERING | WAKING), Ordering::Release);
                    return Poll::Ready(status_of(ended));
                }
            }
        }
    }

    /// Waits, parking the thread, until the attached bio has ended; its status (`std`).
    ///
    /// # Panics
    /// As [`poll_status`](Self::poll_status).
    ///
    /// ```
    /// use blkmq_core::{Bio, Completion, Op, Status};
    /// use std::pin::pin;
    ///
    /// let mut completion = pin!(Completion::new());
    /// // SAFETY: ended once, by the thread below.
    /// let bio = unsafe { completion.as_mut().attach(Bio::new(Op::Write, 0, 8)) };
    /// std::thread::spawn(move || bio.complete(Status::Ok));
    /// assert_eq!(completion.as_ref().wait(), Status::Ok);
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn wait(self: Pin<&Self>) -> Status {
        blkmq_sbitmap::block_on(core::future::poll_fn(|cx| self.poll_status(cx)))
    }

    /// Whether a bio still points at the completion: attached, and its end not over.
    fn in_use(&self) -> bool {
        let state = self.state.load(Ordering::Acquire);
        state & ATTACHED != 0 && (state & DONE == 0 || state & WAKING != 0)
    }
}

impl Default for Completion {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.in_use() {
            return;
        }
        // The bio still points here: wait for its end (see the type's docs).
        #[cfg(all(feature = "std", not(loom)))]
        {
            // SAFETY: a value being dropped is not moved again; the borrow ends here.
            let this = unsafe { Pin::new_unchecked(&*self) };
            this.wait();
        }
        #[cfg(not(all(feature = "std", not(loom))))]
        while self.in_use() {
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            core::hint::spin_loop();
        }
    }
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("in_use", &self.in_use())
            .field("status", &self.status())
            .finish()
    }
}
