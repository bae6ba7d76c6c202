//! The waiting side: an [`Sbitmap`] whose frees wake the callers that found it full.
//!
//! # Design
//!
//! A caller that finds no free bit registers a [`Waker`] on one of eight wait queues
//! (round-robin, so registrations and wake-ups do not all meet on one lock), then tries once
//! more, then sleeps. Frees wake sleepers in batches: waking one waiter per free would make
//! every free pay for a lock and a wake-up on a busy map, so a freer only counts completions
//! and, once `wake_batch` have accumulated since the last wake-up, claims that batch with a
//! compare-exchange and wakes up to `wake_batch` waiters, starting after the wait queue woken
//! last. This is Linux's v6.2 scheme; it replaced per-wait-queue counters that lost wake-ups.
//!
//! `wake_batch = clamp(usable_depth / 8, 1, 8)`, where the usable depth is what the most
//! limited (shallow) caller can reach. With at most `depth / 8` completions needed per batch,
//! a waiter on a full map always has enough bits in flight behind it to fill a batch.
//!
//! ## Why no wake-up is lost
//!
//! * `ws_active` counts registered waiters; a free skips all wake-up work when it is zero, so
//!   a map nobody waits on pays one load per free.
//! * A waiter increments `ws_active` before it registers and retries; a freer sets its bit
//!   before it reads `ws_active`. All four accesses are sequentially consistent, so either
//!   the waiter's retry sees the freed bit, or the freer sees the waiter (Dekker's pattern).
//! * A freer that sees the waiter but finds its wait queue still empty took that queue's lock
//!   before the waiter did, so the waiter's retry, which follows its registration under the
//!   same lock, sees the free.
//! * The word-full race of the deferred clear is closed by the word's swap lock (see
//!   [`Sbitmap`]).
//! * A future that is woken and then dropped without taking a bit passes its wake-up on to
//!   another waiter, so cancellation cannot strand anyone.
//!
//! `tests/loom.rs` checks these claims over every interleaving of small models.

use alloc::collections::VecDeque;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use crossbeam_utils::CachePadded;

use crate::map::{BitBatch, Sbitmap, SbitmapBuilder, SbitmapDump};
use crate::sync::{AtomicUsize, Lock, Ordering, seqcst_pair};
use crate::{AllocHint, SbitmapError};

/// The number of wait queues.
pub const WAIT_QUEUES: usize = 8;

/// The largest wake batch.
pub const MAX_WAKE_BATCH: usize = 8;

/// The raw lock used by default for the wait queues: a spin lock that needs no OS.
///
/// Any [`lock_api::RawMutex`] can replace it, such as an IRQ-safe spin lock in a kernel or a
/// critical-section lock on a single-core microcontroller.
pub type DefaultRawMutex = spin::mutex::SpinMutex<()>;

/// A registered waiter: its key (to find it again) and its waker.
struct Entry {
    key: u64,
    waker: Waker,
}

/// One wait queue's list of sleepers.
///
/// The list reuses its storage: after the largest number of simultaneous waiters has been
/// seen once, registering allocates nothing.
#[derive(Default)]
struct WaitList {
    entries: VecDeque<Entry>,
    next_key: u64,
}

impl WaitList {
    fn push(&mut self, waker: Waker) -> u64 {
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        self.entries.push_back(Entry { key, waker });
        key
    }

    fn find(&mut self, key: u64) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.key == key)
    }

    /// Removes the entry; false when it is gone (a wake-up took it).
    fn remove(&mut self, key: u64) -> bool {
        match self.entries.iter().position(|e| e.key == key) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }
}

/// An [`Sbitmap`] with wait queues: when the map is full, callers wait (asynchronously, or
/// blocking with `std`) and frees wake them in batches.
///
/// `R` is the raw lock of the wait queues (see [`DefaultRawMutex`]); the bitmap itself is
/// lock-free.
///
/// # Example
///
/// ```
/// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
///
/// let queue: SbitmapQueue = SbitmapQueue::new(64).unwrap();
/// let hint = AllocHint::new(0);
/// let tag = queue.get(&hint).unwrap();
/// queue.put(tag, &hint).unwrap();
/// assert_eq!(queue.wake_batch(), 8);
/// ```
pub struct SbitmapQueue<R = DefaultRawMutex> {
    map: Sbitmap,
    /// Registered waiters; frees read it on every put.
    ws_active: CachePadded<AtomicUsize>,
    /// Frees counted while someone waited.
    completions: CachePadded<AtomicUsize>,
    /// Completions already turned into wake-ups, advanced a batch at a time by CAS.
    wakeups: AtomicUsize,
    wake_batch: AtomicUsize,
    /// The wait queue to wake first next time.
    wake_index: AtomicUsize,
    /// The wait queue the next registration goes to.
    wait_index: AtomicUsize,
    min_shallow_depth: AtomicUsize,
    queues: [CachePadded<Lock<R, WaitList>>; WAIT_QUEUES],
}

/// `clamp(usable / 8, 1, 8)`, where `usable` is the depth the most limited caller reaches.
fn calc_wake_batch(depth: usize, min_shallow_depth: usize) -> usize {
    (depth.min(min_shallow_depth) / WAIT_QUEUES).clamp(1, MAX_WAKE_BATCH)
}

/// Wakes up to `nr` sleepers from the head of one wait queue and returns how many it woke.
/// Wakers are taken out under the lock, a batch at a time, and woken after it is released.
fn wake_from<R: lock_api::RawMutex>(queue: &Lock<R, WaitList>, nr: usize) -> usize {
    let mut woken = 0;
    while woken < nr {
        let mut wakers: [Option<Waker>; MAX_WAKE_BATCH] = Default::default();
        let mut taken = 0;
        {
            let mut list = queue.lock();
            while taken < (nr - woken).min(MAX_WAKE_BATCH) {
                let Some(entry) = list.entries.pop_front() else {
                    break;
                };
                wakers[taken] = Some(entry.waker);
                taken += 1;
            }
        }
        wakers.into_iter().flatten().for_each(Waker::wake);
        woken += taken;
        if taken < MAX_WAKE_BATCH {
            break;
        }
    }
    woken
}

impl SbitmapQueue<DefaultRawMutex> {
    /// A queue over a bitmap of `depth` bits, with the default word size and lock.
    ///
    /// # Errors
    /// As [`Sbitmap::new`].
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    /// let queue: SbitmapQueue = SbitmapQueue::new(32).unwrap();
    /// assert_eq!(queue.depth(), 32);
    /// ```
    pub fn new(depth: usize) -> Result<Self, SbitmapError> {
        Self::from_builder(Sbitmap::builder(depth))
    }
}

impl SbitmapBuilder {
    /// Builds an [`SbitmapQueue`] with the default lock.
    ///
    /// # Errors
    /// As [`SbitmapBuilder::build`].
    ///
    /// ```
    /// use blkmq_sbitmap::Sbitmap;
    ///
    /// let queue = Sbitmap::builder(128).min_shallow_depth(16).build_queue().unwrap();
    /// assert_eq!(queue.wake_batch(), 2); // sized on the 16 bits a shallow caller reaches
    /// ```
    pub fn build_queue(self) -> Result<SbitmapQueue, SbitmapError> {
        SbitmapQueue::from_builder(self)
    }

    /// Builds an [`SbitmapQueue`] whose wait queues use the raw lock `R`.
    ///
    /// # Errors
    /// As [`SbitmapBuilder::build`].
    ///
    /// ```
    /// use blkmq_sbitmap::{Sbitmap, SbitmapQueue};
    ///
    /// type MyLock = spin::mutex::SpinMutex<()>;
    /// let queue: SbitmapQueue<MyLock> = Sbitmap::builder(8).build_queue_with().unwrap();
    /// assert_eq!(queue.depth(), 8);
    /// ```
    pub fn build_queue_with<R: lock_api::RawMutex>(self) -> Result<SbitmapQueue<R>, SbitmapError> {
        SbitmapQueue::from_builder(self)
    }
}

impl<R: lock_api::RawMutex> SbitmapQueue<R> {
    fn from_builder(b: SbitmapBuilder) -> Result<Self, SbitmapError> {
        let map = b.build()?;
        let min_shallow_depth = b.min_shallow_depth.unwrap_or(usize::MAX);
        Ok(Self {
            wake_batch: AtomicUsize::new(calc_wake_batch(map.depth(), min_shallow_depth)),
            map,
            ws_active: CachePadded::new(AtomicUsize::new(0)),
            completions: CachePadded::new(AtomicUsize::new(0)),
            wakeups: AtomicUsize::new(0),
            wake_index: AtomicUsize::new(0),
            wait_index: AtomicUsize::new(0),
            min_shallow_depth: AtomicUsize::new(min_shallow_depth),
            queues: core::array::from_fn(|_| CachePadded::new(Lock::new(WaitList::default()))),
        })
    }

    /// Allocates a bit without waiting; `None` when the map is full.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(1).unwrap();
    /// let hint = AllocHint::new(0);
    /// assert_eq!(queue.get(&hint), Some(0));
    /// assert_eq!(queue.get(&hint), None);
    /// ```
    #[inline(always)]
    pub fn get(&self, hint: &AllocHint) -> Option<usize> {
        self.map.get(hint)
    }

    /// Allocates a bit within `shallow_depth` (see [`Sbitmap::get_shallow`]) without waiting.
    ///
    /// # Errors
    /// [`SbitmapError::ShallowBelowMinimum`] when `shallow_depth` is below the declared
    /// `min_shallow_depth` (by default nothing is declared, so any cap below the capacity is
    /// refused) — such a caller could wait for a batch that never fills.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let queue = Sbitmap::builder(64).min_shallow_depth(8).build_queue().unwrap();
    /// let hint = AllocHint::new(0);
    /// assert!(queue.get_shallow(&hint, 8).unwrap().is_some());
    /// assert!(queue.get_shallow(&hint, 4).is_err());
    /// ```
    #[inline]
    pub fn get_shallow(
        &self,
        hint: &AllocHint,
        shallow_depth: usize,
    ) -> Result<Option<usize>, SbitmapError> {
        self.check_shallow(shallow_depth)?;
        Ok(self.map.get_shallow(hint, shallow_depth))
    }

    fn check_shallow(&self, shallow_depth: usize) -> Result<(), SbitmapError> {
        let min_shallow_depth = self.min_shallow_depth.load(Ordering::Relaxed);
        // Against the capacity, not the current depth: a resize may grow the depth under a
        // waiter, turning its cap into a real limit.
        if shallow_depth < self.map.capacity() && shallow_depth < min_shallow_depth {
            return Err(SbitmapError::ShallowBelowMinimum {
                shallow_depth,
                min_shallow_depth,
            });
        }
        Ok(())
    }

    /// Allocates up to `nr` bits of one word (see [`Sbitmap::get_batch`]).
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(64).unwrap();
    /// let hint = AllocHint::new(0);
    /// let batch = queue.get_batch(&hint, 4).unwrap();
    /// assert_eq!(batch.len(), 4);
    /// queue.put_batch(batch, &hint).unwrap();
    /// ```
    #[inline]
    pub fn get_batch(&self, hint: &AllocHint, nr: usize) -> Option<BitBatch> {
        self.map.get_batch(hint, nr)
    }

    /// Frees a bit and counts it towards waking waiters.
    ///
    /// # Errors
    /// As [`Sbitmap::put`]; nothing is freed or woken then.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(8).unwrap();
    /// let hint = AllocHint::new(0);
    /// let tag = queue.get(&hint).unwrap();
    /// assert!(queue.put(tag, &hint).is_ok());
    /// assert!(queue.put(tag, &hint).is_err());
    /// ```
    #[inline(always)]
    pub fn put(&self, bit: usize, hint: &AllocHint) -> Result<(), SbitmapError> {
        self.map.put(bit, hint)?;
        self.wake_up(1);
        Ok(())
    }

    /// Frees a batch and counts its bits towards waking waiters.
    ///
    /// # Errors
    /// As [`Sbitmap::put_batch`].
    pub fn put_batch(&self, batch: BitBatch, hint: &AllocHint) -> Result<(), SbitmapError> {
        let freed = self.map.put_batch(batch, hint);
        // A double put that races the first frees the batch's other bits and still fails
        // (see `Sbitmap::put_batch`): count the batch then too, so no waiter misses them.
        if freed.is_ok() || matches!(freed, Err(SbitmapError::NotAllocated { .. })) {
            self.wake_up(batch.len());
        }
        freed
    }

    /// Counts `nr` frees and wakes a batch of waiters when enough have accumulated.
    #[inline(always)]
    fn wake_up(&self, nr: usize) {
        // SeqCst: pairs with the waiter's increment (see the module documentation).
        seqcst_pair();
        if self.ws_active.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.wake_up_counted(nr);
    }

    /// Counts `nr` frees and wakes a batch of waiters for every [`wake_batch`] frees
    /// counted and not yet answered, up to as many batches as `nr` single puts would wake
    /// (`ceil(nr / wake_batch)`): frees counted while nobody waited, or under a wider batch
    /// before a resize, never wake a crowd at once.
    ///
    /// [`wake_batch`]: Self::wake_batch
    #[cold]
    fn wake_up_counted(&self, nr: usize) {
        let batch = self.wake_batch.load(Ordering::Relaxed);
        self.completions.fetch_add(nr, Ordering::SeqCst);
        let mut wakeups = self.wakeups.load(Ordering::SeqCst);
        let mut claims = nr.div_ceil(batch.max(1));
        while claims != 0 {
            let completions = self.completions.load(Ordering::SeqCst);
            if completions.wrapping_sub(wakeups) < batch {
                return;
            }
            match self.wakeups.compare_exchange_weak(
                wakeups,
                wakeups.wrapping_add(batch),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                // This batch is ours to wake; then look again, for the frees still left.
                Ok(_) => {
                    self.wake_waiters(batch);
                    wakeups = wakeups.wrapping_add(batch);
                    claims -= 1;
                    if self.ws_active.load(Ordering::SeqCst) == 0 {
                        return;
                    }
                }
                Err(now) => wakeups = now,
            }
        }
    }

    /// Wakes up to `nr` waiters, starting with the wait queue after the one woken last.
    fn wake_waiters(&self, mut nr: usize) {
        let mut index = self.wake_index.load(Ordering::Relaxed);
        let start = index;
        for _ in 0..WAIT_QUEUES {
            let queue = &self.queues[index];
            // Advance first: the next batch starts on the next queue even if this one still
            // has sleepers, so no queue is drained before the others get a turn.
            index = (index + 1) % WAIT_QUEUES;
            nr -= wake_from(queue, nr);
            if nr == 0 {
                break;
            }
        }
        if index != start {
            self.wake_index.store(index, Ordering::Relaxed);
        }
    }

    /// Wakes every waiter (they retry, and wait again if the map is still full). Used when
    /// the depth changes or the owner goes idle.
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    /// let queue: SbitmapQueue = SbitmapQueue::new(8).unwrap();
    /// queue.wake_all(); // no waiters: nothing to do
    /// ```
    pub fn wake_all(&self) {
        for queue in self.queues.iter() {
            // Wake only those registered now; anyone registering meanwhile has retried after
            // registering and needs no wake-up from us.
            let registered = queue.lock().entries.len();
            wake_from(queue, registered);
        }
    }

    /// Resizes the bitmap (see [`Sbitmap::resize`]), recomputes the wake batch and wakes all
    /// waiters so none waits on a batch sized for the old depth.
    ///
    /// # Errors
    /// As [`Sbitmap::resize`].
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(64).unwrap();
    /// queue.resize(16).unwrap();
    /// assert_eq!(queue.depth(), 16);
    /// assert_eq!(queue.wake_batch(), 2);
    /// ```
    pub fn resize(&self, depth: usize) -> Result<(), SbitmapError> {
        self.map.resize(depth)?;
        let min_shallow_depth = self.min_shallow_depth.load(Ordering::Relaxed);
        self.wake_batch
            .store(calc_wake_batch(depth, min_shallow_depth), Ordering::Relaxed);
        self.wake_all();
        Ok(())
    }

    /// Recomputes the wake batch for a bitmap shared fairly by `users` users (each can reach
    /// `ceil(depth / users)` bits), as shared tag sets do when a user joins or leaves. Zero
    /// users counts as one.
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(256).unwrap();
    /// assert_eq!(queue.wake_batch(), 8);
    /// queue.recalculate_wake_batch(16); // 16 bits each
    /// assert_eq!(queue.wake_batch(), 2);
    /// ```
    pub fn recalculate_wake_batch(&self, users: usize) {
        let share = self.map.depth().div_ceil(users.max(1));
        let min_shallow_depth = self.min_shallow_depth.load(Ordering::Relaxed);
        self.wake_batch
            .store(calc_wake_batch(share, min_shallow_depth), Ordering::Relaxed);
    }

    /// Declares the smallest shallow depth callers will use, and resizes the wake batch for
    /// it.
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(256).unwrap();
    /// queue.set_min_shallow_depth(24);
    /// assert_eq!(queue.wake_batch(), 3);
    /// ```
    pub fn set_min_shallow_depth(&self, min_shallow_depth: usize) {
        self.min_shallow_depth
            .store(min_shallow_depth, Ordering::Relaxed);
        self.wake_batch.store(
            calc_wake_batch(self.map.depth(), min_shallow_depth),
            Ordering::Relaxed,
        );
    }

    /// How many frees wake one batch of waiters.
    pub fn wake_batch(&self) -> usize {
        self.wake_batch.load(Ordering::Relaxed)
    }

    /// The number of callers currently registered as waiting.
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    /// let queue: SbitmapQueue = SbitmapQueue::new(8).unwrap();
    /// assert_eq!(queue.waiters(), 0);
    /// ```
    pub fn waiters(&self) -> usize {
        self.ws_active.load(Ordering::Relaxed)
    }

    /// The current depth (see [`Sbitmap::depth`]).
    pub fn depth(&self) -> usize {
        self.map.depth()
    }

    /// The number of allocated bits (see [`Sbitmap::weight`]).
    pub fn weight(&self) -> usize {
        self.map.weight()
    }

    /// Whether any bit is allocated (see [`Sbitmap::any_bit_set`]).
    pub fn any_bit_set(&self) -> bool {
        self.map.any_bit_set()
    }

    /// Whether `bit` is allocated (see [`Sbitmap::test_bit`]).
    ///
    /// # Errors
    /// As [`Sbitmap::test_bit`].
    pub fn test_bit(&self, bit: usize) -> Result<bool, SbitmapError> {
        self.map.test_bit(bit)
    }

    /// Visits allocated bits (see [`Sbitmap::for_each_set`]).
    pub fn for_each_set(&self, start: usize, f: impl FnMut(usize) -> bool) {
        self.map.for_each_set(start, f)
    }

    /// The bitmap's geometry, for callers that size things by it.
    pub fn bits_per_word(&self) -> usize {
        self.map.bits_per_word()
    }

    /// A human-readable picture of the bitmap (see [`Sbitmap::dump`]) and the wait state.
    ///
    /// ```
    /// use blkmq_sbitmap::SbitmapQueue;
    /// let queue: SbitmapQueue = SbitmapQueue::new(16).unwrap();
    /// assert!(queue.dump().to_string().contains("wake_batch=2"));
    /// ```
    pub fn dump(&self) -> QueueDump<'_, R> {
        QueueDump { queue: self }
    }

    /// A waiter that allocates one bit, waiting when the map is full. Drive it with
    /// [`Waiter::poll_get`]; dropping it withdraws its registration.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    /// use std::task::{Context, Poll, Waker};
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(1).unwrap();
    /// let hint = AllocHint::new(0);
    /// let held = queue.get(&hint).unwrap();
    ///
    /// let mut waiter = queue.waiter(&hint);
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(waiter.poll_get(&mut cx).is_pending()); // full: registered
    /// assert_eq!(queue.waiters(), 1);
    /// queue.put(held, &hint).unwrap();
    /// assert_eq!(waiter.poll_get(&mut cx), Poll::Ready(0));
    /// assert_eq!(queue.waiters(), 0);
    /// ```
    pub fn waiter<'q>(&'q self, hint: &'q AllocHint) -> Waiter<'q, R> {
        Waiter {
            queue: self,
            hint,
            shallow_depth: None,
            registration: None,
            active: false,
        }
    }

    /// A waiter limited to `shallow_depth` (see [`get_shallow`](Self::get_shallow)).
    ///
    /// # Errors
    /// [`SbitmapError::ShallowBelowMinimum`], as for `get_shallow`.
    pub fn shallow_waiter<'q>(
        &'q self,
        hint: &'q AllocHint,
        shallow_depth: usize,
    ) -> Result<Waiter<'q, R>, SbitmapError> {
        self.check_shallow(shallow_depth)?;
        Ok(Waiter {
            shallow_depth: Some(shallow_depth),
            ..self.waiter(hint)
        })
    }

    /// A future that resolves to an allocated bit, for any executor.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::task::{Context, Poll, Waker};
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(4).unwrap();
    /// let hint = AllocHint::new(0);
    /// let mut future = pin!(queue.get_async(&hint));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(matches!(future.as_mut().poll(&mut cx), Poll::Ready(bit) if bit < 4));
    /// ```
    pub fn get_async<'q>(&'q self, hint: &'q AllocHint) -> GetFuture<'q, R> {
        GetFuture {
            waiter: self.waiter(hint),
        }
    }

    /// Allocates a bit, parking the calling thread while the map is full.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    /// use std::sync::Arc;
    ///
    /// let queue: Arc<SbitmapQueue> = Arc::new(SbitmapQueue::new(1).unwrap());
    /// let hint = AllocHint::new(0);
    /// let held = queue.get(&hint).unwrap();
    /// let q = Arc::clone(&queue);
    /// let t = std::thread::spawn(move || q.get_blocking(&AllocHint::new(1)));
    /// queue.put(held, &hint).unwrap();
    /// assert_eq!(t.join().unwrap(), 0);
    /// ```
    #[cfg(all(feature = "std", not(loom)))]
    pub fn get_blocking(&self, hint: &AllocHint) -> usize {
        if let Some(bit) = self.get(hint) {
            return bit;
        }
        crate::park::block_on(self.get_async(hint))
    }
}

/// One caller's attempt to allocate a bit, waiting if need be.
///
/// Created by [`SbitmapQueue::waiter`]. While it is registered it counts as a waiter; once it
/// returns a bit, or when it is dropped, it withdraws. A waiter that was woken and is then
/// dropped without taking a bit passes its wake-up on to another waiter.
pub struct Waiter<'q, R: lock_api::RawMutex = DefaultRawMutex> {
    queue: &'q SbitmapQueue<R>,
    hint: &'q AllocHint,
    shallow_depth: Option<usize>,
    /// The wait queue and key of our entry, once registered.
    registration: Option<(usize, u64)>,
    /// Whether we are counted in `ws_active`.
    active: bool,
}

impl<R: lock_api::RawMutex> Waiter<'_, R> {
    #[inline]
    fn try_get(&self) -> Option<usize> {
        match self.shallow_depth {
            None => self.queue.map.get(self.hint),
            Some(depth) => self.queue.map.get_shallow(self.hint, depth),
        }
    }

    /// Tries to allocate; when the map is full, registers `cx`'s waker to be woken by a
    /// later free and returns `Pending`. Call it again after the wake-up.
    ///
    /// Once it has returned `Ready`, the waiter is spent: further calls allocate again.
    pub fn poll_get(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        self.poll_inner(cx, |waiter| waiter.try_get())
    }

    /// As [`poll_get`](Self::poll_get), but `attempt` makes each try, for callers that gate
    /// an allocation on more than the bitmap (a fair share of a shared tag space, say).
    ///
    /// `attempt` runs once before registering and once after. A condition it checks must be
    /// made true only by something that then frees a bit of this queue (or calls
    /// [`SbitmapQueue::wake_all`]), with a sequentially consistent write before that free:
    /// that is what guarantees the second try, or a wake-up, sees it.
    ///
    /// Wake-ups are batched and go to the oldest waiters, whatever gates them: a waiter
    /// whose gate is still shut when woken takes a wake-up another waiter could have used.
    /// Callers whose gates differ between waiters must wake more (say, [`wake_all`] when a
    /// gate opens), as the tag sets above this crate do for fair shares.
    ///
    /// [`wake_all`]: SbitmapQueue::wake_all
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, SbitmapQueue};
    /// use std::task::{Context, Poll, Waker};
    ///
    /// use std::cell::Cell;
    ///
    /// let queue: SbitmapQueue = SbitmapQueue::new(8).unwrap();
    /// let hint = AllocHint::new(0);
    /// let open = Cell::new(false); // a gate beside the bitmap
    /// let attempt = || if open.get() { queue.get(&hint) } else { None };
    /// let mut waiter = queue.waiter(&hint);
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(waiter.poll_get_with(&mut cx, attempt).is_pending());
    /// assert_eq!(queue.waiters(), 1);
    /// open.set(true);
    /// assert!(waiter.poll_get_with(&mut cx, attempt).is_ready());
    /// assert_eq!(queue.waiters(), 0);
    /// ```
    pub fn poll_get_with<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut attempt: impl FnMut() -> Option<T>,
    ) -> Poll<T> {
        self.poll_inner(cx, |_| attempt())
    }

    fn poll_inner<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut attempt: impl FnMut(&Self) -> Option<T>,
    ) -> Poll<T> {
        if let Some(bit) = attempt(self) {
            self.withdraw();
            return Poll::Ready(bit);
        }
        if !self.active {
            // SeqCst: the waiter's half of Dekker's pattern with `wake_up`.
            self.queue.ws_active.fetch_add(1, Ordering::SeqCst);
            self.active = true;
        }
        self.register(cx.waker());
        seqcst_pair();
        // Retry after registering: a free that came before our registration either left its
        // bit for us to find here, or saw us in `ws_active` and will count towards a wake-up.
        if let Some(bit) = attempt(self) {
            self.withdraw();
            return Poll::Ready(bit);
        }
        Poll::Pending
    }

    fn register(&mut self, waker: &Waker) {
        if let Some((index, key)) = self.registration {
            let mut list = self.queue.queues[index].lock();
            match list.find(key) {
                Some(entry) => {
                    if !entry.waker.will_wake(waker) {
                        entry.waker = waker.clone();
                    }
                }
                // A wake-up took our entry: queue up again.
                None => self.registration = Some((index, list.push(waker.clone()))),
            }
            return;
        }
        let index = self.queue.wait_index.fetch_add(1, Ordering::Relaxed) % WAIT_QUEUES;
        let key = self.queue.queues[index].lock().push(waker.clone());
        self.registration = Some((index, key));
    }

    /// Leaves the wait queue. Returns whether a wake-up had taken our entry.
    fn withdraw(&mut self) -> bool {
        let mut woken = false;
        if let Some((index, key)) = self.registration.take() {
            woken = !self.queue.queues[index].lock().remove(key);
        }
        if self.active {
            self.queue.ws_active.fetch_sub(1, Ordering::SeqCst);
            self.active = false;
        }
        woken
    }
}

impl<R: lock_api::RawMutex> Drop for Waiter<'_, R> {
    fn drop(&mut self) {
        if self.withdraw() {
            // We were woken for a bit we will never take: hand the wake-up on.
            self.queue.wake_waiters(1);
        }
    }
}

impl<R: lock_api::RawMutex> fmt::Debug for Waiter<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("shallow_depth", &self.shallow_depth)
            .field("registered", &self.registration.is_some())
            .finish()
    }
}

/// The future of [`SbitmapQueue::get_async`]: resolves to an allocated bit.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct GetFuture<'q, R: lock_api::RawMutex = DefaultRawMutex> {
    waiter: Waiter<'q, R>,
}

impl<R: lock_api::RawMutex> Future for GetFuture<'_, R> {
    type Output = usize;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        self.get_mut().waiter.poll_get(cx)
    }
}

/// See [`SbitmapQueue::dump`].
pub struct QueueDump<'a, R> {
    queue: &'a SbitmapQueue<R>,
}

impl<R: lock_api::RawMutex> fmt::Display for QueueDump<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.queue;
        writeln!(
            f,
            "wake_batch={} ws_active={} completions={} wakeups={} wake_index={} min_shallow_depth={}",
            q.wake_batch(),
            q.waiters(),
            q.completions.load(Ordering::Relaxed),
            q.wakeups.load(Ordering::Relaxed),
            q.wake_index.load(Ordering::Relaxed),
            q.min_shallow_depth.load(Ordering::Relaxed),
        )?;
        for (i, queue) in q.queues.iter().enumerate() {
            writeln!(f, "wait queue {i}: {} waiting", queue.lock().entries.len())?;
        }
        let map: SbitmapDump<'_> = q.map.dump();
        write!(f, "{map}")
    }
}

impl<R: lock_api::RawMutex> fmt::Debug for SbitmapQueue<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SbitmapQueue")
            .field("map", &self.map)
            .field("wake_batch", &self.wake_batch())
            .field("waiters", &self.waiters())
            .finish()
    }
}
