//! [`RingTracer`]: events in per-CPU rings, allocated once, drained by a reader.
//!
//! # The ring
//!
//! Each CPU has a bounded ring of slots, Dmitry Vyukov's bounded MPMC queue: every slot
//! carries a sequence word, and positions only grow (a slot is `position & mask`).
//!
//! * A writer reads the tail position `p` and its slot's sequence `s`. `s == p`: the slot
//!   is free for position `p`; the writer claims `p` by moving the tail from `p` to `p + 1`
//!   (compare-and-swap; on failure it retries with the tail it saw), writes the event, and
//!   publishes it by storing `p + 1` in the sequence (Release). `s < p`: the slot still
//!   holds the event of position `p - capacity`, not yet read: the ring is full and the
//!   event is counted as dropped, never waited for. `s > p`: another writer took `p`;
//!   reload the tail.
//! * The reader does the same on the head: `s == p + 1` means published; it claims `p`,
//!   reads the event, and frees the slot for position `p + capacity` by storing that in
//!   the sequence (Release). `s < p + 1`: nothing more is published.
//!
//! The Acquire load of the sequence pairs with the other side's Release store, so the
//! writer's event is visible to the reader that sees `p + 1`, and the reader's read is done
//! before the writer that sees `p + capacity` overwrites the slot. Several threads on one
//! CPU index (threads under an OS) share a ring safely: the tail is claimed, not assumed.
//! Nothing is allocated after [`RingTracer::new`]; an event costs one compare-and-swap on
//! its CPU's own line, and a sequence store. `tests/loom.rs` checks a writer against the
//! reader and two writers on a full ring.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use super::{TraceEvent, Tracer};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// One event's room in a ring.
struct Slot {
    /// The position this slot is free for (`== position`), or published at
    /// (`== position + 1`).
    seq: AtomicUsize,
    event: EventCell,
}

/// One CPU's ring.
struct Ring {
    /// The next position a writer claims.
    tail: CachePadded<AtomicUsize>,
    /// The next position the reader takes.
    head: CachePadded<AtomicUsize>,
    /// Events not kept: the ring was full.
    dropped: CachePadded<AtomicU64>,
    slots: Box<[Slot]>,
    mask: usize,
}

/// A [`Tracer`] that keeps events in a ring per CPU, allocated once, and counts the events
/// it drops when a ring is full; a reader takes them out with [`drain`](Self::drain).
///
/// An event goes to the ring of its own [`cpu`](TraceEvent::cpu) (modulo the rings), and
/// gets that ring's next sequence number as its [`seq`](TraceEvent::seq), as blktrace
/// numbers events per CPU. The protocol is in the module's source docs; it is lock-free
/// for writers and the reader alike.
///
/// ```
/// use blkmq_core::{Action, RingTracer, TraceEvent, Tracer};
/// let rings = RingTracer::new(2, 2); // 2 CPUs, 2 events each
/// for t in 0..3 {
///     rings.event(&TraceEvent { cpu: 1, ..TraceEvent::new(Action::Queue, t) });
/// }
/// assert_eq!(rings.dropped(), 1); // the third found CPU 1's ring full
/// let mut seen = Vec::new();
/// assert_eq!(rings.drain(|e| seen.push((e.cpu, e.seq, e.time_ns))), 2);
/// assert_eq!(seen, [(1, 0, 0), (1, 1, 1)]);
/// ```
pub struct RingTracer {
    rings: Box<[Ring]>,
}

impl RingTracer {
    /// Rings for `nr_cpus` CPUs (at least one) of `capacity` events each (rounded up to a
    /// power of two, at least 2): all the memory it will use.
    ///
    /// ```
    /// use blkmq_core::RingTracer;
    /// let rings = RingTracer::new(4, 1000);
    /// assert_eq!((rings.nr_rings(), rings.capacity()), (4, 1024));
    /// ```
    pub fn new(nr_cpus: usize, capacity: usize) -> Self {
        let capacity = capacity.max(2).next_power_of_two();
        let rings = (0..nr_cpus.max(1))
            .map(|_| Ring {
                tail: CachePadded::new(AtomicUsize::new(0)),
                head: CachePadded::new(AtomicUsize::new(0)),
                dropped: CachePadded::new(AtomicU64::new(0)),
                slots: (0..capacity)
                    .map(|i| Slot {
                        seq: AtomicUsize::new(i),
                        event: EventCell::new(),
                    })
                    .collect(),
                mask: capacity - 1,
            })
            .collect();
        Self { rings }
    }

    /// How many rings (CPUs).
    ///
    /// ```
    /// assert_eq!(blkmq_core::RingTracer::new(0, 8).nr_rings(), 1);
    /// ```
    pub fn nr_rings(&self) -> usize {
        self.rings.len()
    }

    /// Events each ring holds.
    ///
    /// ```
    /// assert_eq!(blkmq_core::RingTracer::new(1, 5).capacity(), 8);
    /// ```
    pub fn capacity(&self) -> usize {
        self.rings[0].slots.len()
    }

    /// Events dropped so far because a ring was full.
    ///
    /// ```
    /// use blkmq_core::{Action, RingTracer, TraceEvent, Tracer};
    /// let rings = RingTracer::new(1, 2);
    /// (0..5).for_each(|t| rings.event(&TraceEvent::new(Action::Queue, t)));
    /// assert_eq!(rings.dropped(), 3);
    /// ```
    pub fn dropped(&self) -> u64 {
        self.rings
            .iter()
            .map(|r| r.dropped.load(Ordering::Relaxed))
            .sum()
    }

    /// Takes every event published so far out of the rings, ring by ring (CPU 0 first),
    /// each ring's in its order; returns how many. Writers may go on meanwhile: what they
    /// publish after a ring was looked at waits for the next drain.
    ///
    /// ```
    /// use blkmq_core::{Action, RingTracer, TraceEvent, Tracer};
    /// let rings = RingTracer::new(1, 4);
    /// rings.event(&TraceEvent::new(Action::Queue, 5));
    /// let mut times = Vec::new();
    /// assert_eq!(rings.drain(|e| times.push(e.time_ns)), 1);
    /// assert_eq!(rings.drain(|_| unreachable!()), 0);
    /// assert_eq!(times, [5]);
    /// ```
    pub fn drain(&self, mut f: impl FnMut(TraceEvent)) -> usize {
        let mut n = 0;
        for ring in self.rings.iter() {
            while let Some(event) = ring.pop() {
                f(event);
                n += 1;
            }
        }
        n
    }

    /// [`drain`](Self::drain) into a vector, sorted by time (events of one time keep their
    /// ring's order, CPU by CPU).
    ///
    /// ```
    /// use blkmq_core::{Action, RingTracer, TraceEvent, Tracer};
    /// let rings = RingTracer::new(2, 4);
    /// rings.event(&TraceEvent { cpu: 1, ..TraceEvent::new(Action::Queue, 1) });
    /// rings.event(&TraceEvent { cpu: 0, ..TraceEvent::new(Action::Queue, 2) });
    /// let times: Vec<u64> = rings.drain_sorted().iter().map(|e| e.time_ns).collect();
    /// assert_eq!(times, [1, 2]);
    /// ```
    pub fn drain_sorted(&self) -> Vec<TraceEvent> {
        let mut out = Vec::new();
        self.drain(|e| out.push(e));
        out.sort_by_key(|e| e.time_ns);
        out
    }
}

impl Tracer for RingTracer {
    #[inline]
    fn event(&self, event: &TraceEvent) {
        let cpu = event.cpu as usize;
        // A CPU with a ring of its own, the usual case, costs no division.
        let ring = match self.rings.get(cpu) {
            Some(ring) => ring,
            None => &self.rings[cpu % self.rings.len()],
        };
        ring.push(event);
    }
}

impl core::fmt::Debug for RingTracer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingTracer")
            .field("nr_rings", &self.nr_rings())
            .field("capacity", &self.capacity())
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl Ring {
    /// Publishes `event` at the next position, or counts it dropped when the ring is full.
    #[inline]
    fn push(&self, event: &TraceEvent) {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            // Pairs with the reader's Release store freeing the slot.
            let seq = slot.seq.load(Ordering::Acquire);
            let lag = seq.wrapping_sub(pos) as isize;
            if lag == 0 {
                match self.tail.compare_exchange(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let mut event = *event;
                        event.seq = pos as u64;
                        // SAFETY: the tail moved from `pos` to `pos + 1` here, so this
                        // writer alone owns the slot for `pos`; the reader reads it only
                        // after the Release store below, and its last read of the slot
                        // (position `pos - capacity`) happened before its Release store
                        // of `pos`, which the Acquire load above saw.
                        unsafe { slot.event.write(event) };
                        // Publishes the event: pairs with the reader's Acquire load.
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return;
                    }
                    Err(now) => pos = now,
                }
            } else if lag < 0 {
                // The slot still holds an unread event: full.
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest published event.
    fn pop(&self) -> Option<TraceEvent> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            // Pairs with the writer's Release store publishing the event.
            let seq = slot.seq.load(Ordering::Acquire);
            let lag = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if lag == 0 {
                match self.head.compare_exchange(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the sequence said `pos + 1`: the writer of `pos` wrote the
                        // event before its Release store, which the Acquire load saw; the
                        // head moved from `pos` here, so no other reader takes it, and no
                        // writer reuses the slot until the store below.
                        let event = unsafe { slot.event.read() };
                        // Frees the slot for position `pos + capacity`.
                        slot.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(event);
                    }
                    Err(now) => pos = now,
                }
            } else if lag < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }
}

/// A slot's event, written by one writer and read by one reader at a time (the ring's
/// protocol says which).
#[cfg(not(loom))]
struct EventCell(core::cell::UnsafeCell<MaybeUninit<TraceEvent>>);

#[cfg(not(loom))]
impl EventCell {
    fn new() -> Self {
        Self(core::cell::UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// # Safety
    /// The caller owns the slot: nobody reads or writes it meanwhile.
    unsafe fn write(&self, event: TraceEvent) {
        // SAFETY: the caller owns the slot.
        unsafe { (*self.0.get()).write(event) };
    }

    /// # Safety
    /// The caller owns the slot, and an event was written to it.
    unsafe fn read(&self) -> TraceEvent {
        // SAFETY: the caller owns the slot, which holds an event (`TraceEvent` is `Copy`).
        unsafe { (*self.0.get()).assume_init_read() }
    }
}

#[cfg(loom)]
struct EventCell(loom::cell::UnsafeCell<MaybeUninit<TraceEvent>>);

#[cfg(loom)]
impl EventCell {
    fn new() -> Self {
        Self(loom::cell::UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// # Safety
    /// As without loom, which checks it.
    unsafe fn write(&self, event: TraceEvent) {
        // SAFETY: the caller owns the slot; loom checks that nobody else touches it.
        self.0.with_mut(|p| unsafe { (*p).write(event) });
    }

    /// # Safety
    /// As without loom, which checks it.
    unsafe fn read(&self) -> TraceEvent {
        // SAFETY: the caller owns the slot, which holds an event; loom checks the first.
        self.0.with(|p| unsafe { (*p).assume_init_read() })
    }
}

// SAFETY: a slot's event is reached only by the one writer or the one reader the ring's
// protocol hands it to (see `Ring::push` and `Ring::pop`); `TraceEvent` is plain data.
unsafe impl Sync for Slot {}
// SAFETY: as above; the events are plain data.
unsafe impl Send for Slot {}
