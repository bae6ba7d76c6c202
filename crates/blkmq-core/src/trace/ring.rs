//! [`RingTracer`]: events in per-CPU rings, allocated once, drained by a reader.
//!
//! # The ring
//!
//! Each CPU has a bounded ring of slots; positions only grow (a slot is
//! `position & mask`), and every slot carries a sequence word, as in Dmitry Vyukov's bounded
//! queue. The reader's position (`head`) says which slots are free, the sequence which are
//! published:
//!
//! * A writer reads the tail position `p` and the head `h` (Acquire). `p - h` is the
//!   capacity: the ring is full and the event is counted as dropped, never waited for.
//!   Otherwise the writer claims `p` by moving the tail from `p` to `p + 1`
//!   (compare-and-swap; on failure it retries with the tail it saw), writes the event, and
//!   publishes it by storing `p + 1` in the slot's sequence (Release).
//! * The reader at the head `p` takes the slot once its sequence is `p + 1` (Acquire), reads
//!   the event, and frees the slot by storing `p + 1` in the head (Release). Readers take
//!   turns through a flag per ring; a reader never waits for a writer (an event claimed but
//!   not published yet waits for the next drain, and the events after it with it). The
//!   reader numbers what it takes, with a count of its own ring's events taken so far.
//!
//! A slot holds one event, or a direct issue's Q, G and D ([`Tracer::direct_issue`]) as
//! its D with a mark: the reader hands out the three. The common I/O so costs two slots,
//! its direct issue and its completion.
//!
//! The writer's Acquire load of the head pairs with the reader's Release store of it, so
//! the reader's read of a slot is done before a writer a lap later overwrites it; the
//! reader's Acquire load of the sequence pairs with the writer's Release store, so the
//! event is whole when read. A writer reads only the tail and the head, two lines that stay
//! in its cache, and writes its slot: each slot is one cache line (the sequence and the
//! event without its number, which the reader gives it), so a slot costs one
//! compare-and-swap on its CPU's own line and one line written. Several threads on one CPU
//! index (threads under an OS) share a ring safely: the tail is claimed, not assumed.
//! Nothing is allocated after [`RingTracer::new`]. `tests/loom.rs` checks a writer against
//! the reader, two writers on a full ring, and two readers.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use super::{TraceEvent, Tracer};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// One event's room in a ring: one cache line.
#[repr(C, align(64))]
struct Slot {
    /// The position published here plus one (a value never equal to `position + 1` for a
    /// position not published yet: `index` at first, then the last lap's).
    seq: AtomicUsize,
    event: EventCell,
}

/// One CPU's ring.
struct Ring {
    /// The next position a writer claims.
    tail: CachePadded<AtomicUsize>,
    /// The next position the reader takes: every slot before it is free.
    head: CachePadded<AtomicUsize>,
    /// Set while a reader takes an event: readers take turns.
    reading: CachePadded<AtomicBool>,
    /// Events not kept: the ring was full.
    dropped: CachePadded<AtomicU64>,
    /// Events taken out so far: the next one's number. Readers only, while the flag is
    /// theirs.
    taken: CachePadded<AtomicU64>,
    slots: Box<[Slot]>,
    mask: usize,
    /// Whether the processor has `PREFETCHW` (see [`prefetch`]).
    prefetchw: bool,
}

/// A [`Tracer`] that keeps events in a ring per CPU, allocated once, and counts the events
/// it drops when a ring is full; a reader takes them out with [`drain`](Self::drain).
///
/// An event goes to the ring of its own [`cpu`](TraceEvent::cpu) (modulo the rings), and
/// gets that ring's next sequence number as its [`seq`](TraceEvent::seq) when it is taken
/// out, as blktrace numbers events per CPU. A direct issue's Q, G and D
/// ([`Tracer::direct_issue`]) take one slot together. The protocol is in the module's
/// source docs; it is lock-free for writers, and a reader never waits for one.
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
    /// Rings for `nr_cpus` CPUs (at least one) of `capacity` slots each (rounded up to a
    /// power of two, at least 2), a slot for an event or for a direct issue's three: all
    /// the memory it will use.
    ///
    /// ```
    /// use blkmq_core::RingTracer;
    /// let rings = RingTracer::new(4, 1000);
    /// assert_eq!((rings.nr_rings(), rings.capacity()), (4, 1024));
    /// ```
    pub fn new(nr_cpus: usize, capacity: usize) -> Self {
        let capacity = capacity.max(2).next_power_of_two();
        let prefetchw = has_prefetchw();
        let rings = (0..nr_cpus.max(1))
            .map(|_| Ring {
                tail: CachePadded::new(AtomicUsize::new(0)),
                head: CachePadded::new(AtomicUsize::new(0)),
                reading: CachePadded::new(AtomicBool::new(false)),
                dropped: CachePadded::new(AtomicU64::new(0)),
                taken: CachePadded::new(AtomicU64::new(0)),
                slots: (0..capacity)
                    .map(|i| Slot {
                        seq: AtomicUsize::new(i),
                        event: EventCell::new(),
                    })
                    .collect(),
                mask: capacity - 1,
                prefetchw,
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

    /// Slots in each ring: events it holds, a direct issue's three counting as one.
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
            while let Some(taken) = ring.pop() {
                for event in taken.events() {
                    f(event);
                    n += 1;
                }
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

impl RingTracer {
    /// The ring of `cpu`'s events.
    #[inline(always)]
    fn ring(&self, cpu: u32) -> &Ring {
        let cpu = cpu as usize;
        // A CPU with a ring of its own, the usual case, costs no division.
        match self.rings.get(cpu) {
            Some(ring) => ring,
            None => &self.rings[cpu % self.rings.len()],
        }
    }
}

impl Tracer for RingTracer {
    #[inline]
    fn event(&self, event: &TraceEvent) {
        self.ring(event.cpu).push(event, false);
    }

    /// The Q, G and D in one slot, taken out as the three events
    /// ([`TraceEvent::direct_issue_events`]); dropped, they count as three.
    #[inline]
    fn direct_issue(&self, issue: &TraceEvent) {
        self.ring(issue.cpu).push(issue, true);
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
    /// Publishes `event` at the next position, or counts it dropped when the ring is full;
    /// `direct`: it is a direct issue's D, standing for its Q and G too.
    #[inline]
    fn push(&self, event: &TraceEvent, direct: bool) {
        let capacity = self.mask + 1;
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            // Pairs with the reader's Release store freeing the slots before it.
            let head = self.head.load(Ordering::Acquire);
            // A tail read before the head may be behind it (events taken since): negative,
            // and the compare-and-swap below fails.
            if pos.wrapping_sub(head) as isize >= capacity as isize {
                // The slot of `pos` still holds an unread event: full.
                let events = if direct { 3 } else { 1 };
                self.dropped.fetch_add(events, Ordering::Relaxed);
                return;
            }
            match self.tail.compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => pos = now,
            }
        }
        let slot = &self.slots[pos & self.mask];
        prefetch(
            &self.slots[pos.wrapping_add(PREFETCH) & self.mask],
            self.prefetchw,
        );
        // SAFETY: the tail moved from `pos` to `pos + 1` here, so this writer alone owns
        // the slot for `pos`; the reader reads it only after the Release store below, and
        // its last read of the slot (position `pos - capacity`) happened before its Release
        // store of a head past it, which the Acquire load above saw.
        unsafe { slot.event.write(Stored::from(event, direct)) };
        // Publishes the event: pairs with the reader's Acquire load.
        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
    }

    /// Takes the oldest published slot: its events, numbered.
    fn pop(&self) -> Option<Taken> {
        // Readers take turns: the head is theirs while the flag is set.
        while self
            .reading
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            crate::sync::spin_wait();
        }
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[pos & self.mask];
        // Pairs with the writer's Release store publishing the event.
        let event = if slot.seq.load(Ordering::Acquire) == pos.wrapping_add(1) {
            // SAFETY: the sequence said `pos + 1`: the writer of `pos` wrote the event
            // before its Release store, which the Acquire load saw; the flag keeps other
            // readers off the head, and no writer reuses the slot until the head passes it
            // (the store below).
            let stored = unsafe { slot.event.read() };
            // Frees the slot for position `pos + capacity`.
            self.head.store(pos.wrapping_add(1), Ordering::Release);
            let seq = self.taken.load(Ordering::Relaxed);
            let taken = Taken::of(stored, seq);
            self.taken.store(seq + taken.len as u64, Ordering::Relaxed);
            Some(taken)
        } else {
            None
        };
        self.reading.store(false, Ordering::Release);
        event
    }
}

/// How many slots ahead of its own a writer asks for: the line of a slot a later event
/// writes is in the cache by then, so the event's stores never wait on memory, nor do the
/// locked instructions after them (which wait for every store before them).
const PREFETCH: usize = 8;

/// Asks for `slot`'s line, to be written: `PREFETCHW` where the processor has it (the line
/// comes exclusive, so the stores to it need not ask again), else a plain prefetch.
#[inline(always)]
fn prefetch(slot: &Slot, for_write: bool) {
    let line: *const Slot = slot;
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if for_write {
        // SAFETY: a prefetch is a hint: it reads nothing the program sees, writes nothing
        // and cannot fault; the processor said it has the instruction (`has_prefetchw`).
        unsafe {
            core::arch::asm!(
                "prefetchw [{line}]",
                line = in(reg) line,
                options(nostack, preserves_flags, readonly)
            );
        }
    } else {
        // SAFETY: as above; SSE, which `PREFETCHT0` is part of, is part of x86-64.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line.cast())
        };
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = (line, for_write);
}

/// Whether the processor has `PREFETCHW` (CPUID leaf `0x8000_0001`, ECX bit 8).
fn has_prefetchw() -> bool {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        // SAFETY: `cpuid` only reads; leaf 0x8000_0000, defined on every x86-64 processor,
        // says how far the extended leaves go. (A safe function from Rust 1.87 on.)
        #[allow(unused_unsafe)]
        let top = unsafe { core::arch::x86_64::__cpuid(0x8000_0000) }.eax;
        // SAFETY: as above, for a leaf the processor said it has.
        #[allow(unused_unsafe)]
        let ecx = unsafe { core::arch::x86_64::__cpuid(0x8000_0001) }.ecx;
        top >= 0x8000_0001 && ecx & (1 << 8) != 0
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    false
}

/// What one slot held: one event, or a direct issue's three.
struct Taken {
    events: [TraceEvent; 3],
    len: u8,
}

impl Taken {
    /// The events of `stored`, numbered from `seq` on.
    fn of(stored: Stored, seq: u64) -> Self {
        let event = stored.event(seq);
        if stored.direct {
            let mut events = event.direct_issue_events();
            for (i, event) in events.iter_mut().enumerate() {
                event.seq = seq + i as u64;
            }
            Self { events, len: 3 }
        } else {
            Self {
                events: [event; 3],
                len: 1,
            }
        }
    }

    fn events(self) -> impl Iterator<Item = TraceEvent> {
        let len = usize::from(self.len);
        self.events.into_iter().take(len)
    }
}

/// An event as a slot keeps it: without its number, which the reader gives it.
#[derive(Clone, Copy)]
struct Stored {
    time_ns: u64,
    sector: u64,
    sectors: u32,
    queue: u32,
    hctx: u32,
    tag: u32,
    cpu: u32,
    issuer: crate::bio::IssuerId,
    flags: crate::bio::BioFlags,
    op: crate::bio::Op,
    action: super::Action,
    status: crate::bio::Status,
    /// A direct issue's D, standing for its Q and G too.
    direct: bool,
}

impl Stored {
    #[inline(always)]
    fn from(e: &TraceEvent, direct: bool) -> Self {
        Self {
            direct,
            time_ns: e.time_ns,
            sector: e.sector,
            sectors: e.sectors,
            queue: e.queue,
            hctx: e.hctx,
            tag: e.tag,
            cpu: e.cpu,
            issuer: e.issuer,
            flags: e.flags,
            op: e.op,
            action: e.action,
            status: e.status,
        }
    }

    fn event(self, seq: u64) -> TraceEvent {
        TraceEvent {
            time_ns: self.time_ns,
            seq,
            sector: self.sector,
            sectors: self.sectors,
            queue: self.queue,
            hctx: self.hctx,
            tag: self.tag,
            cpu: self.cpu,
            issuer: self.issuer,
            op: self.op,
            flags: self.flags,
            action: self.action,
            status: self.status,
        }
    }
}

const _: () = assert!(
    core::mem::size_of::<Slot>() == 64,
    "a slot is one cache line"
);

/// A slot's event, written by one writer and read by one reader at a time (the ring's
/// protocol says which).
#[cfg(not(loom))]
struct EventCell(core::cell::UnsafeCell<MaybeUninit<Stored>>);

#[cfg(not(loom))]
impl EventCell {
    fn new() -> Self {
        Self(core::cell::UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// # Safety
    /// The caller owns the slot: nobody reads or writes it meanwhile.
    unsafe fn write(&self, event: Stored) {
        // SAFETY: the caller owns the slot.
        unsafe { (*self.0.get()).write(event) };
    }

    /// # Safety
    /// The caller owns the slot, and an event was written to it.
    unsafe fn read(&self) -> Stored {
        // SAFETY: the caller owns the slot, which holds an event (`Stored` is `Copy`).
        unsafe { (*self.0.get()).assume_init_read() }
    }
}

#[cfg(loom)]
struct EventCell(loom::cell::UnsafeCell<MaybeUninit<Stored>>);

#[cfg(loom)]
impl EventCell {
    fn new() -> Self {
        Self(loom::cell::UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// # Safety
    /// As without loom, which checks it.
    unsafe fn write(&self, event: Stored) {
        // SAFETY: the caller owns the slot; loom checks that nobody else touches it.
        self.0.with_mut(|p| unsafe { (*p).write(event) });
    }

    /// # Safety
    /// As without loom, which checks it.
    unsafe fn read(&self) -> Stored {
        // SAFETY: the caller owns the slot, which holds an event; loom checks the first.
        self.0.with(|p| unsafe { (*p).assume_init_read() })
    }
}

// SAFETY: a slot's event is reached only by the one writer or the one reader the ring's
// protocol hands it to (see `Ring::push` and `Ring::pop`); `Stored` is plain data.
unsafe impl Sync for Slot {}
// SAFETY: as above; the events are plain data.
unsafe impl Send for Slot {}
