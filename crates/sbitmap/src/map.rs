//! The scalable bitmap itself.
//!
//! # Design
//!
//! A tag allocator is hammered from every CPU at once. A single word of bits would put every
//! allocation and every free on one cache line, so the map is cut into words of
//! `bits_per_word = 1 << shift` bits, each on its own cache line, and each CPU starts its
//! search on a different word (its [`AllocHint`]).
//!
//! Frees would still bounce the word's line between the freeing CPU and the allocating one.
//! So a free does not touch the word: it sets the bit in the word's `cleared` mask, which
//! lives on a second cache line. Only when an allocator finds a word full does it move the
//! whole `cleared` mask into the word in one swap and one and-not (the *deferred clear*):
//! two atomics per word-full, instead of one per free on the contended line.
//!
//! ## The swap lock
//!
//! A deferred clear is two atomics, and between them the freed bits are in neither mask. An
//! allocator that looks at the word in that window sees "full, nothing pending" and gives
//! up; if it then sleeps as a waiter, nobody wakes it, because the free that made the bit
//! available already happened (Linux hung this way until 2024). So each word carries a tiny
//! spin lock, taken only on the word-full path: the clearer holds it across swap and and-not,
//! and an allocator that finds nothing pending takes it before re-reading the word, so it sees
//! the word either before the swap or after the and-not. `tests/loom.rs` explores this.
//!
//! ## Memory ordering
//!
//! * Allocation sets its bit with an acquire RMW on `word`; a free sets its bit in `cleared`
//!   with a sequentially consistent RMW (release for the hand-over of the tag's data, SC for
//!   the waiter protocol of [`SbitmapQueue`](crate::SbitmapQueue)).
//! * The deferred clear swaps `cleared` with acquire-release and and-nots `word` with
//!   release, so the next owner of a bit, whose acquire RMW on `word` reads from that chain,
//!   happens after everything the previous owner did before freeing it.
//! * A get whose hint names a bit waiting in `cleared` (the bit its CPU last put) takes it
//!   back with one sequentially consistent `fetch_and` on `cleared`, leaving `word` alone: it
//!   reads from the free's RMW directly. A deferred clear that swapped the bit out first wins
//!   it instead; the get then goes the full-word path. One atomic per get on the common path,
//!   where the swap-lock path costs three.

use alloc::boxed::Box;
use core::fmt;

use crossbeam_utils::CachePadded;

use crate::SbitmapError;
use crate::hint::AllocHint;
use crate::sync::{AtomicBool, AtomicUsize, Ordering, spin_hint};

/// The largest depth a bitmap may have.
pub const MAX_DEPTH: usize = 1 << 30;

/// `log2(usize::BITS)`: the widest word.
const MAX_SHIFT: u32 = usize::BITS.trailing_zeros();

/// One word of the map and its deferred-clear state, on two cache lines.
struct Word {
    /// Bits in use. Allocators set bits here; frees never write it.
    bits: CachePadded<AtomicUsize>,
    /// Bits freed but not yet cleared from `bits`, with the lock that makes moving them
    /// atomic with respect to other allocators.
    pending: CachePadded<Pending>,
}

struct Pending {
    cleared: AtomicUsize,
    swap_lock: AtomicBool,
}

/// Holds a word's swap lock; releases it on drop.
struct SwapGuard<'a>(&'a AtomicBool);

impl Drop for SwapGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What a deferred clear found.
enum Cleared {
    /// Frees were moved in, and this one of them was kept for the caller.
    Kept(usize),
    /// Frees were moved in (or another clear had just done so): the word may have room.
    Retry,
    /// Nothing was pending and the window is full.
    Full,
}

impl Word {
    fn new() -> Self {
        Self {
            bits: CachePadded::new(AtomicUsize::new(0)),
            pending: CachePadded::new(Pending {
                cleared: AtomicUsize::new(0),
                swap_lock: AtomicBool::new(false),
            }),
        }
    }

    fn lock_swap(&self) -> SwapGuard<'_> {
        let lock = &self.pending.swap_lock;
        while lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while lock.load(Ordering::Relaxed) {
                spin_hint();
            }
        }
        SwapGuard(lock)
    }

    /// Sets the lowest free bit of `window`.
    #[inline(always)]
    fn take_in(&self, window: usize) -> Option<usize> {
        let mut val = self.bits.load(Ordering::Relaxed);
        loop {
            let free = !val & window;
            if free == 0 {
                return None;
            }
            let nr = free.trailing_zeros() as usize;
            let mask = 1usize << nr;
            // Test only our bit of the old value, so this compiles to one `lock bts` rather
            // than a compare-exchange loop.
            if self.bits.fetch_or(mask, Ordering::Acquire) & mask == 0 {
                return Some(nr);
            }
            // Taken under us: look further along the same snapshot.
            val |= mask;
        }
    }

    /// Sets one free bit of `window`, moving deferred clears into the word while that may
    /// uncover one. `hinted` is the mask of the bit the caller's hint names (or zero): when
    /// the word is full and that bit is waiting to be cleared, it is taken back straight from
    /// the pending mask.
    #[inline(always)]
    fn get(&self, window: usize, hinted: usize) -> Option<usize> {
        if let Some(nr) = self.take_in(window) {
            return Some(nr);
        }
        if let Some(nr) = self.take_pending(window & hinted) {
            return Some(nr);
        }
        loop {
            match self.deferred_clear(window, true) {
                Cleared::Kept(nr) => return Some(nr),
                Cleared::Retry => {}
                Cleared::Full => return None,
            }
            if let Some(nr) = self.take_in(window) {
                return Some(nr);
            }
        }
    }

    /// Takes the freed bit `mask` (one bit, or none) out of the pending mask, leaving it set
    /// in the word: it passes from its last owner to the caller with one atomic, where a
    /// deferred clear takes three. The common case after a put, whose hint names the bit it
    /// freed.
    #[inline(always)]
    fn take_pending(&self, mask: usize) -> Option<usize> {
        // No load first to skip the RMW when the bit is not pending: the word is full here,
        // so a deferred clear (three atomics) follows anyway. SeqCst, as the swap in
        // `deferred_clear`: taking a free is reading it (see there), and Acquire for the
        // data its last owner left.
        if mask == 0 {
            return None;
        }
        if self.pending.cleared.fetch_and(!mask, Ordering::SeqCst) & mask == 0 {
            // A deferred clear moved it into the word first (clear, or taken by now).
            return None;
        }
        Some(mask.trailing_zeros() as usize)
    }

    /// Moves the freed bits into the word, under the swap lock. With `keep`, one freed bit of
    /// `window` is left set and handed to the caller, which saves it a second atomic on the
    /// word.
    #[cold]
    fn deferred_clear(&self, window: usize, keep: bool) -> Cleared {
        let _guard = self.lock_swap();
        // SeqCst: the waiter side of the wake-up protocol reads frees from here (see
        // `SbitmapQueue`); it pairs with the SeqCst RMW in `free`. Acquire for the data of
        // the freed tags, which their next owners will read.
        let freed = self.pending.cleared.swap(0, Ordering::SeqCst);
        if freed == 0 {
            // Nothing pending. Under the lock no clear is half done, so this read of the
            // word is the truth.
            return if self.bits.load(Ordering::Acquire) & window != window {
                Cleared::Retry
            } else {
                Cleared::Full
            };
        }
        let ours = if keep { freed & window } else { 0 };
        if ours == 0 {
            self.bits.fetch_and(!freed, Ordering::Release);
            return Cleared::Retry;
        }
        // The lowest freed bit stays set: it passes straight from its last owner to us.
        let nr = ours.trailing_zeros() as usize;
        self.bits
            .fetch_and(!(freed & !(1 << nr)), Ordering::Release);
        Cleared::Kept(nr)
    }

    /// Allocated bits: set in the word and not waiting to be cleared.
    #[inline]
    fn busy(&self) -> usize {
        // Read `cleared` first: a bit freed after that read is still set in `bits`, so it
        // counts as busy, which it was a moment ago; reading in the other order could count
        // a bit as free before its owner let go of it.
        let cleared = self.pending.cleared.load(Ordering::Acquire);
        self.bits.load(Ordering::Acquire) & !cleared
    }
}

/// A mask of the low `n` bits (`n <= usize::BITS`).
#[inline]
fn low_mask(n: usize) -> usize {
    if n >= usize::BITS as usize {
        !0
    } else {
        (1usize << n) - 1
    }
}

/// A lock-free scalable bitmap: bits are allocated and freed from many threads at once.
///
/// This is the allocator under every tag set of blkmq: a bit is a tag. Bits live in words of
/// `1 << shift` bits, each on its own cache line; each caller starts on the word its
/// [`AllocHint`] names. A free sets the bit in a per-word *deferred* mask on a second cache
/// line, so frees do not bounce the line allocators contend on; an allocator that finds a word
/// full moves the deferred frees into it under a small per-word lock, which closes the race
/// that let a waiter miss the last free bit (Linux hung this way until 2024).
///
/// # Example
///
/// ```
/// use blkmq_sbitmap::{AllocHint, Sbitmap};
///
/// let map = Sbitmap::new(4).unwrap();
/// let hint = AllocHint::new(0);
/// let bits: Vec<usize> = (0..4).map(|_| map.get(&hint).unwrap()).collect();
/// assert_eq!(map.get(&hint), None); // full
/// assert_eq!(map.weight(), 4);
/// map.put(bits[1], &hint).unwrap();
/// assert_eq!(map.get(&hint), Some(bits[1]));
/// ```
pub struct Sbitmap {
    words: Box<[Word]>,
    shift: u32,
    /// The depth at creation: the words are sized for it and `resize` never goes above it.
    capacity: usize,
    /// The depth allocations may currently use.
    depth: AtomicUsize,
    round_robin: bool,
}

/// Configures a [`Sbitmap`] or an [`SbitmapQueue`](crate::SbitmapQueue).
///
/// ```
/// use blkmq_sbitmap::Sbitmap;
///
/// let map = Sbitmap::builder(256).shift(4).round_robin(true).build().unwrap();
/// assert_eq!(map.bits_per_word(), 16);
/// assert!(map.is_round_robin());
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SbitmapBuilder {
    pub(crate) depth: usize,
    pub(crate) shift: Option<u32>,
    pub(crate) round_robin: bool,
    pub(crate) min_shallow_depth: Option<usize>,
}

impl SbitmapBuilder {
    /// Words of `1 << shift` bits instead of the default heuristic.
    pub fn shift(mut self, shift: u32) -> Self {
        self.shift = Some(shift);
        self
    }

    /// Strict round-robin allocation: each get starts after the last bit allocated through
    /// the same hint, so bits are handed out in order (some ATA hosts need this). Frees do not
    /// move the hint in this mode, and [`Sbitmap::get_batch`] is unavailable.
    pub fn round_robin(mut self, round_robin: bool) -> Self {
        self.round_robin = round_robin;
        self
    }

    /// For an [`SbitmapQueue`](crate::SbitmapQueue): the smallest shallow depth any caller
    /// will pass to a shallow get. The wake batch is sized so that waiters limited to this
    /// depth are still woken; a shallow get below it is an error.
    pub fn min_shallow_depth(mut self, min_shallow_depth: usize) -> Self {
        self.min_shallow_depth = Some(min_shallow_depth);
        self
    }

    /// Builds the bitmap.
    ///
    /// # Errors
    /// [`SbitmapError::ZeroDepth`], [`SbitmapError::DepthTooLarge`] above [`MAX_DEPTH`],
    /// [`SbitmapError::BadShift`] for words wider than `usize`.
    pub fn build(self) -> Result<Sbitmap, SbitmapError> {
        Sbitmap::from_builder(&self)
    }
}

/// The default shift: words as wide as `usize`, narrowed so that even a small map spreads
/// over about four words (four cache lines), unless it has fewer than four bits.
pub(crate) fn default_shift(depth: usize) -> u32 {
    let mut shift = MAX_SHIFT;
    if depth >= 4 {
        while (4usize << shift) > depth {
            shift -= 1;
        }
    }
    shift
}

/// A group of bits from one word, as returned by [`Sbitmap::get_batch`].
///
/// ```
/// use blkmq_sbitmap::BitBatch;
///
/// let mut batch = BitBatch::new(64, 0b1010);
/// assert_eq!(batch.len(), 2);
/// assert_eq!(batch.iter().collect::<Vec<_>>(), vec![65, 67]);
/// assert_eq!(batch.pop(), Some(65));
/// assert_eq!(batch.mask(), 0b1000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BitBatch {
    offset: usize,
    mask: usize,
}

impl BitBatch {
    /// The bits `offset + i` for every set bit `i` of `mask`.
    pub const fn new(offset: usize, mask: usize) -> Self {
        Self { offset, mask }
    }

    /// The number of the word's first bit.
    pub const fn offset(&self) -> usize {
        self.offset
    }

    /// The bits, relative to [`offset`](Self::offset).
    pub const fn mask(&self) -> usize {
        self.mask
    }

    /// How many bits the batch holds.
    pub const fn len(&self) -> usize {
        self.mask.count_ones() as usize
    }

    /// Whether the batch holds no bit.
    pub const fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// Takes the lowest bit out of the batch.
    pub fn pop(&mut self) -> Option<usize> {
        if self.mask == 0 {
            return None;
        }
        let i = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(self.offset + i)
    }

    /// The bit numbers, lowest first.
    pub fn iter(&self) -> impl Iterator<Item = usize> + use<> {
        let mut rest = *self;
        core::iter::from_fn(move || rest.pop())
    }
}

impl Sbitmap {
    /// A bitmap of `depth` bits with the default word size.
    ///
    /// # Errors
    /// [`SbitmapError::ZeroDepth`] and [`SbitmapError::DepthTooLarge`].
    ///
    /// ```
    /// use blkmq_sbitmap::Sbitmap;
    ///
    /// let map = Sbitmap::new(32).unwrap();
    /// assert_eq!(map.depth(), 32);
    /// assert_eq!(map.bits_per_word(), 8); // spread over four words
    /// ```
    pub fn new(depth: usize) -> Result<Self, SbitmapError> {
        Self::builder(depth).build()
    }

    /// A builder for a bitmap of `depth` bits.
    ///
    /// ```
    /// use blkmq_sbitmap::Sbitmap;
    /// let map = Sbitmap::builder(100).shift(5).build().unwrap();
    /// assert_eq!(map.bits_per_word(), 32);
    /// ```
    pub fn builder(depth: usize) -> SbitmapBuilder {
        SbitmapBuilder {
            depth,
            shift: None,
            round_robin: false,
            min_shallow_depth: None,
        }
    }

    pub(crate) fn from_builder(b: &SbitmapBuilder) -> Result<Self, SbitmapError> {
        if b.depth == 0 {
            return Err(SbitmapError::ZeroDepth);
        }
        if b.depth > MAX_DEPTH {
            return Err(SbitmapError::DepthTooLarge {
                depth: b.depth,
                max: MAX_DEPTH,
            });
        }
        let shift = b.shift.unwrap_or_else(|| default_shift(b.depth));
        if shift > MAX_SHIFT {
            return Err(SbitmapError::BadShift {
                shift,
                max: MAX_SHIFT,
            });
        }
        let nr_words = b.depth.div_ceil(1 << shift);
        Ok(Self {
            words: (0..nr_words).map(|_| Word::new()).collect(),
            shift,
            capacity: b.depth,
            depth: AtomicUsize::new(b.depth),
            round_robin: b.round_robin,
        })
    }

    /// The number of bits allocations may use now.
    #[inline]
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// The depth the bitmap was created with; [`resize`](Self::resize) never goes above it.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `log2` of the bits per word.
    #[inline]
    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// Bits per word (`1 << shift`).
    #[inline]
    pub fn bits_per_word(&self) -> usize {
        1 << self.shift
    }

    /// Whether the map hands bits out in strict round-robin order.
    #[inline]
    pub fn is_round_robin(&self) -> bool {
        self.round_robin
    }

    /// The number of words that hold bits below `depth`.
    #[inline]
    fn words_for(&self, depth: usize) -> usize {
        depth.div_ceil(1 << self.shift)
    }

    /// The mask of bits of word `index` that lie below `depth`.
    #[inline]
    fn window(&self, index: usize, depth: usize) -> usize {
        low_mask((depth - (index << self.shift)).min(1 << self.shift))
    }

    /// The hint's bit. A value outside `0..depth` is a fraction of the map, `value / 2^32`:
    /// it is mapped onto the same fraction of the depth (and written back).
    #[inline(always)]
    fn start_bit(&self, hint: &AllocHint, depth: usize) -> usize {
        let h = hint.value() as usize;
        if h < depth {
            return h;
        }
        let h = ((h as u64 * depth as u64) >> 32) as usize;
        hint.set(h);
        h
    }

    /// Allocates one bit, or returns `None` when every bit below the depth is in use.
    ///
    /// The search starts on the hint's word and moves to the following words, wrapping. In
    /// round-robin mode it starts exactly at the hint's bit, and a get fails only when no bit
    /// is free anywhere (a stricter promise than Linux makes).
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(8).unwrap();
    /// let hint = AllocHint::new(3);
    /// let bit = map.get(&hint).unwrap();
    /// assert!(bit < 8);
    /// assert_eq!(map.test_bit(bit), Ok(true));
    /// ```
    #[inline(always)]
    pub fn get(&self, hint: &AllocHint) -> Option<usize> {
        let depth = self.depth();
        let start = self.start_bit(hint, depth);
        if !self.round_robin {
            // The common case: a free bit in the hint's word, perhaps after moving its
            // deferred frees in. The hint stays as it is.
            let index = start >> self.shift;
            let hinted = 1usize << (start & (self.bits_per_word() - 1));
            if let Some(nr) = self.words[index].get(self.window(index, depth), hinted) {
                return Some((index << self.shift) + nr);
            }
        }
        self.get_slow(hint, depth, start)
    }

    /// The rest of [`get`](Self::get): deferred clears, other words, round-robin order.
    #[inline(never)]
    fn get_slow(&self, hint: &AllocHint, depth: usize, start: usize) -> Option<usize> {
        let nr = self.find(depth, start, None, self.round_robin);
        self.hint_after_get(hint, depth, start, nr);
        nr
    }

    /// Allocates one bit among the first `shallow_depth` bits' worth of the map.
    ///
    /// The cap is over the whole map: each word may use its proportional share of
    /// `shallow_depth` bits (its low bits), and the shares add up to exactly
    /// `min(shallow_depth, depth)`. Block layers use it so that asynchronous I/O can never take
    /// every tag. A `shallow_depth` of zero allocates nothing.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(64).unwrap();
    /// let hint = AllocHint::new(0);
    /// let mut got = 0;
    /// while map.get_shallow(&hint, 10).is_some() {
    ///     got += 1;
    /// }
    /// assert_eq!(got, 10);
    /// assert!(map.get(&hint).is_some()); // the rest is still there for full-depth gets
    /// ```
    #[inline]
    pub fn get_shallow(&self, hint: &AllocHint, shallow_depth: usize) -> Option<usize> {
        let depth = self.depth();
        if shallow_depth >= depth {
            return self.get(hint);
        }
        if shallow_depth == 0 {
            return None;
        }
        let start = self.start_bit(hint, depth);
        let nr = self.find(depth, start, Some(shallow_depth), false);
        self.hint_after_get(hint, depth, start, nr);
        nr
    }

    /// The bits of word `index` a shallow get may use: its share of `shallow` over the map.
    #[inline]
    fn shallow_window(&self, index: usize, depth: usize, shallow: usize) -> usize {
        let begin = (index << self.shift) as u64;
        let end = ((index + 1) << self.shift).min(depth) as u64;
        let (depth, shallow) = (depth as u64, shallow as u64);
        let share = end * shallow / depth - begin * shallow / depth;
        low_mask(share as usize)
    }

    /// The words a search visits, each with the mask of its bits below `limit`: from
    /// `start`'s word on, wrapping. With `from_bit` the walk is in strict bit order from
    /// `start`: its own word only from `start` on, and last that word's bits before `start`.
    fn walk(
        &self,
        limit: usize,
        start: usize,
        from_bit: bool,
    ) -> impl Iterator<Item = (usize, usize)> + '_ {
        let nr_words = self.words_for(limit);
        let first = start >> self.shift;
        let offset = if from_bit {
            start & (self.bits_per_word() - 1)
        } else {
            0
        };
        let visits = if offset == 0 { nr_words } else { nr_words + 1 };
        (0..visits).map(move |i| {
            let mut index = first + i;
            if index >= nr_words {
                index -= nr_words;
            }
            let window = self.window(index, limit);
            let window = if i == 0 {
                window & !low_mask(offset)
            } else if i == nr_words {
                window & low_mask(offset)
            } else {
                window
            };
            (index, window)
        })
    }

    /// Allocates from the first word of the walk with a free bit in its window (its shallow
    /// share when `shallow` is given).
    fn find(
        &self,
        depth: usize,
        start: usize,
        shallow: Option<usize>,
        from_bit: bool,
    ) -> Option<usize> {
        self.walk(depth, start, from_bit)
            .find_map(|(index, window)| {
                let window = match shallow {
                    None => window,
                    Some(s) => self.shallow_window(index, depth, s),
                };
                if window == 0 {
                    return None;
                }
                let nr = self.words[index].get(window, 0)?;
                Some((index << self.shift) + nr)
            })
    }

    #[inline]
    fn hint_after_get(&self, hint: &AllocHint, depth: usize, start: usize, nr: Option<usize>) {
        match nr {
            // A full map: a hint won't help; start over from the beginning next time.
            None => hint.set(0),
            Some(nr) if self.round_robin => hint.set(if nr + 1 >= depth { 0 } else { nr + 1 }),
            // Stay on the word we allocated from; write only when we moved, so the common
            // get stores nothing.
            Some(nr) => {
                if nr >> self.shift != start >> self.shift {
                    hint.set(nr);
                }
            }
        }
    }

    /// Allocates up to `nr` bits from a single word with one atomic operation, for callers
    /// that cache tags (a plug's request cache). Any free bits of the word will do; they need
    /// not be contiguous. Returns `None` when no word has a free bit, or in round-robin mode.
    ///
    /// `nr` above [`bits_per_word`](Self::bits_per_word) is treated as `bits_per_word`.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(256).unwrap();
    /// let hint = AllocHint::new(1);
    /// let batch = map.get_batch(&hint, 8).unwrap();
    /// assert_eq!(batch.len(), 8);
    /// assert_eq!(map.weight(), 8);
    /// map.put_batch(batch, &hint).unwrap();
    /// assert_eq!(map.weight(), 0);
    /// ```
    pub fn get_batch(&self, hint: &AllocHint, nr: usize) -> Option<BitBatch> {
        if self.round_robin || nr == 0 {
            return None;
        }
        let nr = nr.min(self.bits_per_word());
        let depth = self.depth();
        let start = self.start_bit(hint, depth);
        let nr_words = self.words_for(depth);
        let mut index = start >> self.shift;
        for _ in 0..nr_words {
            let window = self.window(index, depth);
            let word = &self.words[index];
            let mut val = word.bits.load(Ordering::Relaxed);
            loop {
                let free = !val & window;
                if free == 0 {
                    if matches!(word.deferred_clear(window, false), Cleared::Retry) {
                        val = word.bits.load(Ordering::Relaxed);
                        continue;
                    }
                    break;
                }
                let take = lowest_bits(free, nr);
                match word.bits.compare_exchange_weak(
                    val,
                    val | take,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let offset = index << self.shift;
                        if index != start >> self.shift {
                            hint.set(offset);
                        }
                        return Some(BitBatch::new(offset, take));
                    }
                    Err(now) => val = now,
                }
            }
            index += 1;
            if index >= nr_words {
                index = 0;
            }
        }
        hint.set(0);
        None
    }

    /// Frees one bit. The bit becomes available to allocators at once (it is cleared from the
    /// word lazily, when an allocator needs room), and the hint is pointed at it so the next
    /// get through the same hint reuses a cache-hot word.
    ///
    /// # Errors
    /// [`SbitmapError::OutOfRange`] beyond [`capacity`](Self::capacity), and
    /// [`SbitmapError::NotAllocated`] for a bit that is visibly free — a double put. Both are
    /// detected before anything changes, in release builds as in debug ones. (Bits above the
    /// current depth after a shrinking [`resize`](Self::resize) may still be put.)
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap, SbitmapError};
    ///
    /// let map = Sbitmap::new(16).unwrap();
    /// let hint = AllocHint::new(0);
    /// let bit = map.get(&hint).unwrap();
    /// assert_eq!(map.put(bit, &hint), Ok(()));
    /// assert_eq!(map.put(bit, &hint), Err(SbitmapError::NotAllocated { bit }));
    /// assert_eq!(map.put(16, &hint), Err(SbitmapError::OutOfRange { bit: 16, depth: 16 }));
    /// ```
    #[inline(always)]
    pub fn put(&self, bit: usize, hint: &AllocHint) -> Result<(), SbitmapError> {
        self.free(bit)?;
        // A bit above a shrunken depth is fine here too: the next get reduces the hint.
        if !self.round_robin {
            hint.set(bit);
        }
        Ok(())
    }

    /// Frees `bit` into its word's deferred-clear mask.
    #[inline(always)]
    pub(crate) fn free(&self, bit: usize) -> Result<(), SbitmapError> {
        if bit >= self.capacity {
            return Err(SbitmapError::OutOfRange {
                bit,
                depth: self.capacity,
            });
        }
        let word = &self.words[bit >> self.shift];
        let mask = 1usize << (bit & (self.bits_per_word() - 1));
        // Checked before the free is published: once it is in `cleared`, a concurrent deferred
        // clear may move it, and the word no longer tells whether the bit was ours to free.
        if word.bits.load(Ordering::Relaxed) & mask == 0 {
            return Err(SbitmapError::NotAllocated { bit });
        }
        // SeqCst: release hands the tag's data to its next owner; the total order pairs with
        // the waiter's registration in `SbitmapQueue` (a waiter either sees this free or is
        // seen by the freer's check of active waiters).
        if word.pending.cleared.fetch_or(mask, Ordering::SeqCst) & mask != 0 {
            return Err(SbitmapError::NotAllocated { bit });
        }
        Ok(())
    }

    /// Frees every bit of a batch (from [`get_batch`](Self::get_batch), or any bits of one
    /// word) with one atomic operation.
    ///
    /// # Errors
    /// [`SbitmapError::BadBatch`] when the offset is not the start of a word or the mask
    /// reaches past the word or the capacity, and [`SbitmapError::NotAllocated`] naming the
    /// first bit of the batch that is visibly free (clear in the word, or already put and
    /// waiting to be cleared). Nothing is freed then. Only a double put that races the first
    /// put of the same bit can slip past that check; it is still reported, and the batch's
    /// other bits are freed.
    pub fn put_batch(&self, batch: BitBatch, hint: &AllocHint) -> Result<(), SbitmapError> {
        self.free_batch(batch)?;
        if !self.round_robin && batch.offset < self.depth() {
            hint.set(batch.offset);
        }
        Ok(())
    }

    pub(crate) fn free_batch(&self, batch: BitBatch) -> Result<(), SbitmapError> {
        let BitBatch { offset, mask } = batch;
        if mask == 0 {
            return Ok(());
        }
        let bad = SbitmapError::BadBatch { offset, mask };
        if offset & (self.bits_per_word() - 1) != 0 || offset >= self.capacity {
            return Err(bad);
        }
        let index = offset >> self.shift;
        if mask & !self.window(index, self.capacity) != 0 {
            return Err(bad);
        }
        let word = &self.words[index];
        // A bit is visibly free when it is clear in the word or its free is still pending.
        let free =
            !word.bits.load(Ordering::Relaxed) | word.pending.cleared.load(Ordering::Relaxed);
        if mask & free != 0 {
            return Err(SbitmapError::NotAllocated {
                bit: offset + (mask & free).trailing_zeros() as usize,
            });
        }
        let twice = word.pending.cleared.fetch_or(mask, Ordering::SeqCst) & mask;
        if twice != 0 {
            return Err(SbitmapError::NotAllocated {
                bit: offset + twice.trailing_zeros() as usize,
            });
        }
        Ok(())
    }

    /// Whether any bit is allocated (including bits above the depth left from before a
    /// shrinking resize).
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(64).unwrap();
    /// let hint = AllocHint::new(0);
    /// assert!(!map.any_bit_set());
    /// let bit = map.get(&hint).unwrap();
    /// assert!(map.any_bit_set());
    /// map.put(bit, &hint).unwrap();
    /// assert!(!map.any_bit_set());
    /// ```
    pub fn any_bit_set(&self) -> bool {
        self.words.iter().any(|w| w.busy() != 0)
    }

    /// The number of allocated bits (including bits above the depth left from before a
    /// shrinking resize). Exact when nothing runs concurrently.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(64).unwrap();
    /// let hint = AllocHint::new(0);
    /// for _ in 0..5 {
    ///     map.get(&hint).unwrap();
    /// }
    /// assert_eq!(map.weight(), 5);
    /// ```
    pub fn weight(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.busy().count_ones() as usize)
            .sum()
    }

    /// Whether `bit` is allocated.
    ///
    /// # Errors
    /// [`SbitmapError::OutOfRange`] beyond [`capacity`](Self::capacity).
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(8).unwrap();
    /// assert_eq!(map.test_bit(3), Ok(false));
    /// assert!(map.test_bit(8).is_err());
    /// ```
    pub fn test_bit(&self, bit: usize) -> Result<bool, SbitmapError> {
        if bit >= self.capacity {
            return Err(SbitmapError::OutOfRange {
                bit,
                depth: self.capacity,
            });
        }
        let word = &self.words[bit >> self.shift];
        Ok(word.busy() >> (bit & (self.bits_per_word() - 1)) & 1 != 0)
    }

    /// Calls `f` with every allocated bit, in order starting at `start` and wrapping around
    /// once, until `f` returns `false`. Bits allocated or freed during the walk may or may not
    /// be seen. A `start` beyond the capacity starts at 0.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::builder(16).round_robin(true).build().unwrap();
    /// let hint = AllocHint::at(0);
    /// for _ in 0..4 {
    ///     map.get(&hint).unwrap(); // bits 0, 1, 2, 3
    /// }
    /// let mut seen = Vec::new();
    /// map.for_each_set(2, |bit| {
    ///     seen.push(bit);
    ///     true
    /// });
    /// assert_eq!(seen, vec![2, 3, 0, 1]);
    /// ```
    pub fn for_each_set(&self, start: usize, mut f: impl FnMut(usize) -> bool) {
        let start = if start < self.capacity { start } else { 0 };
        for (index, window) in self.walk(self.capacity, start, true) {
            let mut set = self.words[index].busy() & window;
            while set != 0 {
                let nr = set.trailing_zeros() as usize;
                set &= set - 1;
                if !f((index << self.shift) + nr) {
                    return;
                }
            }
        }
    }

    /// Changes the depth allocations may use, without reallocating. Pending frees are moved
    /// into their words first. Bits held above a smaller depth stay valid and may be put.
    ///
    /// Run it while allocations are quiet (a block layer freezes the queue first): a get
    /// racing a resize sees the old depth or the new one.
    ///
    /// # Errors
    /// [`SbitmapError::ZeroDepth`], and [`SbitmapError::DepthTooLarge`] above the capacity.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(64).unwrap();
    /// map.resize(2).unwrap();
    /// let hint = AllocHint::new(0);
    /// assert!(map.get(&hint).is_some());
    /// assert!(map.get(&hint).is_some());
    /// assert!(map.get(&hint).is_none());
    /// assert!(map.resize(65).is_err());
    /// ```
    pub fn resize(&self, depth: usize) -> Result<(), SbitmapError> {
        if depth == 0 {
            return Err(SbitmapError::ZeroDepth);
        }
        if depth > self.capacity {
            return Err(SbitmapError::DepthTooLarge {
                depth,
                max: self.capacity,
            });
        }
        for word in self.words.iter() {
            word.deferred_clear(0, false);
        }
        self.depth.store(depth, Ordering::Relaxed);
        Ok(())
    }

    /// A human-readable picture of the map's state, for debugging: the geometry, the busy
    /// count, and every word's bits and pending frees.
    ///
    /// ```
    /// use blkmq_sbitmap::{AllocHint, Sbitmap};
    ///
    /// let map = Sbitmap::new(16).unwrap();
    /// map.get(&AllocHint::at(0)).unwrap();
    /// let text = map.dump().to_string();
    /// assert!(text.contains("depth=16"));
    /// assert!(text.contains("busy=1"));
    /// ```
    pub fn dump(&self) -> SbitmapDump<'_> {
        SbitmapDump { map: self }
    }
}

/// The lowest `n` set bits of `bits`.
#[inline]
fn lowest_bits(bits: usize, n: usize) -> usize {
    if bits.count_ones() as usize <= n {
        return bits;
    }
    let mut rest = bits;
    let mut take = 0;
    for _ in 0..n {
        let low = rest & rest.wrapping_neg();
        take |= low;
        rest &= !low;
    }
    take
}

/// See [`Sbitmap::dump`].
pub struct SbitmapDump<'a> {
    map: &'a Sbitmap,
}

impl fmt::Display for SbitmapDump<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let map = self.map;
        writeln!(
            f,
            "depth={} capacity={} busy={} bits_per_word={} words={} round_robin={}",
            map.depth(),
            map.capacity,
            map.weight(),
            map.bits_per_word(),
            map.words.len(),
            map.round_robin
        )?;
        let width = map.bits_per_word().div_ceil(4);
        for (i, word) in map.words.iter().enumerate() {
            writeln!(
                f,
                "word {i:>4}: bits={:#0w$x} cleared={:#0w$x} busy={}",
                word.bits.load(Ordering::Relaxed),
                word.pending.cleared.load(Ordering::Relaxed),
                word.busy().count_ones(),
                w = width + 2
            )?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sbitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sbitmap")
            .field("depth", &self.depth())
            .field("capacity", &self.capacity)
            .field("shift", &self.shift)
            .field("round_robin", &self.round_robin)
            .field("weight", &self.weight())
            .finish()
    }
}
