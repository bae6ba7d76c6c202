//! Tag allocation: `blkmq-sbitmap` against its peers, side by side in one run.
//!
//! A block layer allocates a tag (a bit) for every request and frees it on completion, so the
//! cost that matters is one get plus one put. Each criterion group below holds one setting
//! (a depth, a thread count) and compares the implementations at that setting:
//!
//! * `get_put_1t/depth=N`: one thread, one get then one put of that bit, through a hint
//!   owned by the thread. Peers:
//!   - `blkmq`: [`blkmq_sbitmap::Sbitmap`];
//!   - `blkmq_queue`: [`blkmq_sbitmap::SbitmapQueue`], whose put also checks for waiters;
//!   - `sbitmap_crate`: the crates.io `sbitmap` crate (Linux's sbitmap without deferred
//!     clears: a put is a `fetch_and` on the word allocators use), with a `usize` hint;
//!   - `arrayqueue`: a lock-free free list, a `crossbeam_queue::ArrayQueue<u32>` filled with
//!     `0..depth` (pop, then push);
//!   - `mutex_bitmap`: a `std::sync::Mutex<Vec<u64>>` bitmap (find the first zero and set it
//!     under the lock, then clear it under the lock);
//!   - `floor`: two uncontended atomic read-modify-writes on a private cache line, the least
//!     any lock-free get plus put can cost.
//! * `get_put_2t/depth=N`: two threads, each with its own hint, doing get+put pairs on one
//!   shared structure at the same time (same peers, less `floor`). Both threads start
//!   together (a spinning rendezvous) and each does the same number of pairs; the time
//!   reported for an iteration is the wall time for *each* thread to do one pair, so it
//!   compares directly with the one-thread time, and the throughput is the pairs per second
//!   of both threads together. Thread `t` starts `t / 2` of the way into the map
//!   ([`blkmq_sbitmap::AllocHint::spread`], as a block layer spreads its CPUs); the numbers
//!   also depend on whether the two CPUs share a physical core, which a virtual machine may
//!   change between runs.
//! * `batch8/depth=N`: `get_batch_8` takes eight tags with [`blkmq_sbitmap::Sbitmap::get_batch`]
//!   and gives them back with one `put_batch`; `get_single_x8` takes eight with `get` and
//!   gives them back with eight `put`s. The throughput is per tag.
//!
//! The settings keep the run to a few minutes (`cargo bench --bench sbitmap`); pass a filter
//! such as `cargo bench --bench sbitmap -- get_put_2t` to run one part.

use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use blkmq_sbitmap::{AllocHint, Sbitmap, SbitmapQueue};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

mod common;
use common::{
    PAIRED_ROUNDS, bind_to_cpu, config, criterion_median, paired_ratio, paired_wanted, rendezvous,
    wait_for,
};

/// The depths every group is run at: a small tag set (words of 8 bits), a typical one
/// (words of 64 bits) and a large one.
const DEPTHS: [usize; 3] = [32, 256, 4096];

/// The most threads any group runs; each thread's hint starts `thread / THREADS` of the way
/// into the map, as a block layer spreads its CPUs.
const THREADS: usize = 2;

/// Tags taken per round in the batch group.
const BATCH: usize = 8;

/// A tag allocator under test: one get and one put per call of [`GetPut::get_put`].
trait GetPut: Sync {
    /// What each thread keeps for itself (its hint).
    type Local;

    /// The per-thread state of thread number `thread`.
    fn local(&self, thread: u64) -> Self::Local;

    /// Allocates one tag and frees it again.
    fn get_put(&self, local: &mut Self::Local);
}

/// blkmq's bitmap and its waiting queue have the same get and put.
macro_rules! blkmq_get_put {
    ($($ty:ty),*) => {$(
        impl GetPut for $ty {
            type Local = AllocHint;

            fn local(&self, thread: u64) -> AllocHint {
                AllocHint::spread(thread as usize, THREADS)
            }

            #[inline]
            fn get_put(&self, hint: &mut AllocHint) {
                let bit = self.get(hint).expect("a free bit");
                self.put(bit, hint).expect("an allocated bit");
            }
        }
    )*};
}

blkmq_get_put!(Sbitmap, SbitmapQueue);

/// The crates.io `sbitmap` crate; it does not know its depth's hint range, so keep it.
struct CrateSbitmap {
    map: sbitmap::Sbitmap,
    depth: usize,
}

impl CrateSbitmap {
    fn new(depth: usize) -> Self {
        Self {
            map: sbitmap::Sbitmap::new(depth, None, false),
            depth,
        }
    }
}

impl GetPut for CrateSbitmap {
    type Local = usize;

    /// The same starting bit as blkmq's hint for this thread, so both spread alike.
    fn local(&self, thread: u64) -> usize {
        // Where `AllocHint::spread` starts this thread: the same fraction of the depth.
        thread as usize * self.depth / THREADS
    }

    #[inline]
    fn get_put(&self, hint: &mut usize) {
        let bit = self.map.get(hint).expect("a free bit");
        self.map.put(bit, hint);
    }
}

/// A lock-free free list of tags.
struct FreeList(ArrayQueue<u32>);

impl FreeList {
    fn new(depth: usize) -> Self {
        let queue = ArrayQueue::new(depth);
        for tag in 0..depth as u32 {
            queue.push(tag).expect("room for every tag");
        }
        Self(queue)
    }
}

impl GetPut for FreeList {
    type Local = ();

    fn local(&self, _thread: u64) {}

    #[inline]
    fn get_put(&self, _: &mut ()) {
        let tag = self.0.pop().expect("a free tag");
        self.0.push(tag).expect("room for the tag");
    }
}

/// A bitmap behind one lock: the simplest correct tag allocator.
struct MutexBitmap(Mutex<Vec<u64>>);

impl MutexBitmap {
    fn new(depth: usize) -> Self {
        let mut words = vec![0u64; depth.div_ceil(64)];
        // Bits at and above the depth are permanently taken.
        if depth % 64 != 0 {
            *words.last_mut().expect("one word at least") = !0 << (depth % 64);
        }
        Self(Mutex::new(words))
    }

    #[inline]
    fn get(&self) -> Option<usize> {
        let mut words = self.0.lock().expect("not poisoned");
        let (index, word) = words.iter_mut().enumerate().find(|(_, w)| **w != !0)?;
        let nr = word.trailing_ones() as usize;
        *word |= 1 << nr;
        Some(index * 64 + nr)
    }

    #[inline]
    fn put(&self, bit: usize) {
        let mut words = self.0.lock().expect("not poisoned");
        words[bit / 64] &= !(1 << (bit % 64));
    }
}

impl GetPut for MutexBitmap {
    type Local = ();

    fn local(&self, _thread: u64) {}

    #[inline]
    fn get_put(&self, _: &mut ()) {
        let bit = self.get().expect("a free bit");
        self.put(bit);
    }
}

/// Two uncontended atomic read-modify-writes on a private cache line.
struct Floor;

impl GetPut for Floor {
    type Local = CachePadded<AtomicUsize>;

    fn local(&self, _thread: u64) -> Self::Local {
        CachePadded::new(AtomicUsize::new(0))
    }

    #[inline]
    fn get_put(&self, word: &mut Self::Local) {
        let word: &AtomicUsize = black_box(word);
        black_box(word.fetch_or(1, Ordering::Acquire));
        black_box(word.fetch_and(!1, Ordering::Release));
    }
}

/// Two threads do `iters` get+put pairs each on `imp`, at the same time. Returns the wall
/// time from their common start until both are done.
fn two_threads<A: GetPut>(imp: &A, iters: u64) -> Duration {
    let ready = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            bind_to_cpu(1);
            let mut local = imp.local(1);
            rendezvous(&ready, 2);
            for _ in 0..iters {
                imp.get_put(&mut local);
            }
            done.fetch_add(1, Ordering::AcqRel);
        });
        bind_to_cpu(0);
        let mut local = imp.local(0);
        rendezvous(&ready, 2);
        let start = Instant::now();
        for _ in 0..iters {
            imp.get_put(&mut local);
        }
        done.fetch_add(1, Ordering::AcqRel);
        wait_for(&done, 2);
        start.elapsed()
    })
}

fn get_put_1t(c: &mut Criterion) {
    fn one<A: GetPut>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, imp: &A) {
        let mut local = imp.local(0);
        g.bench_function(name, |b| b.iter(|| imp.get_put(&mut local)));
    }
    for depth in DEPTHS {
        let mut g = c.benchmark_group(format!("get_put_1t/depth={depth}"));
        g.throughput(Throughput::Elements(1));
        one(&mut g, "blkmq", &Sbitmap::new(depth).unwrap());
        let queue: SbitmapQueue = SbitmapQueue::new(depth).unwrap();
        one(&mut g, "blkmq_queue", &queue);
        one(&mut g, "sbitmap_crate", &CrateSbitmap::new(depth));
        one(&mut g, "arrayqueue", &FreeList::new(depth));
        one(&mut g, "mutex_bitmap", &MutexBitmap::new(depth));
        one(&mut g, "floor", &Floor);
        g.finish();
    }
}

fn get_put_2t(c: &mut Criterion) {
    fn one<A: GetPut>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, imp: &A) {
        g.bench_function(name, |b| b.iter_custom(|iters| two_threads(imp, iters)));
    }
    for depth in DEPTHS {
        let mut g = c.benchmark_group(format!("get_put_2t/depth={depth}"));
        // One iteration is one pair on each of the two threads.
        g.throughput(Throughput::Elements(2));
        one(&mut g, "blkmq", &Sbitmap::new(depth).unwrap());
        let queue: SbitmapQueue = SbitmapQueue::new(depth).unwrap();
        one(&mut g, "blkmq_queue", &queue);
        one(&mut g, "sbitmap_crate", &CrateSbitmap::new(depth));
        one(&mut g, "arrayqueue", &FreeList::new(depth));
        one(&mut g, "mutex_bitmap", &MutexBitmap::new(depth));
        g.finish();
    }
}

fn batch8(c: &mut Criterion) {
    for depth in DEPTHS {
        let map = Sbitmap::new(depth).unwrap();
        let hint = AllocHint::new(0);
        // Every batch must really hold eight tags, or the per-tag numbers would flatter it.
        for _ in 0..1000 {
            let batch = map.get_batch(&hint, BATCH).expect("a free word");
            assert_eq!(batch.len(), BATCH, "depth {depth}: a short batch");
            map.put_batch(batch, &hint).unwrap();
        }

        let mut g = c.benchmark_group(format!("batch8/depth={depth}"));
        g.throughput(Throughput::Elements(BATCH as u64));
        // No `black_box` on the tags between get and put: they come out of calls the
        // optimiser cannot see through, and forcing the batch through memory costs a
        // store-forwarding stall (about 6 ns here) that has nothing to do with the bitmap.
        g.bench_function("get_batch_8", |b| {
            b.iter(|| {
                let batch = map.get_batch(&hint, BATCH).expect("a free word");
                map.put_batch(batch, &hint).unwrap();
            })
        });
        g.bench_function("get_single_x8", |b| {
            b.iter(|| {
                let mut bits = [0usize; BATCH];
                for bit in &mut bits {
                    *bit = map.get(&hint).expect("a free bit");
                }
                for bit in bits {
                    map.put(bit, &hint).unwrap();
                }
            })
        });
        g.finish();
    }
}

fn main() {
    let started = SystemTime::now();
    // What `criterion_group!` and `criterion_main!` expand to, less the undocumented `pub fn`.
    let mut c = config().configure_from_args();
    get_put_1t(&mut c);
    get_put_2t(&mut c);
    batch8(&mut c);
    c.final_summary();
    summary(started);
    if paired_wanted() {
        paired_summary();
    }
}

/// Get+put pairs per thread in one round of a paired comparison.
const PAIRED_PAIRS: u64 = 200_000;

/// One thread doing `iters` get+put pairs; returns the time it took.
fn one_thread<A: GetPut>(imp: &A, iters: u64) -> Duration {
    bind_to_cpu(0);
    let mut local = imp.local(0);
    let start = Instant::now();
    for _ in 0..iters {
        imp.get_put(&mut local);
    }
    start.elapsed()
}

/// `iters` rounds of eight tags taken and given back, as a batch or one by one.
fn batch_rounds(map: &Sbitmap, iters: u64, batched: bool) -> Duration {
    let hint = AllocHint::new(0);
    let start = Instant::now();
    for _ in 0..iters {
        if batched {
            let batch = map.get_batch(&hint, BATCH).expect("a free word");
            map.put_batch(batch, &hint).unwrap();
        } else {
            let mut bits = [0usize; BATCH];
            for bit in &mut bits {
                *bit = map.get(&hint).expect("a free bit");
            }
            for bit in bits {
                map.put(bit, &hint).unwrap();
            }
        }
    }
    start.elapsed()
}

/// The tracked ratios again, each measured as a paired comparison (see [`paired_ratio`]).
/// Runs after a full, unfiltered bench run, or alone with the filter `paired`.
fn paired_summary() {
    println!();
    println!(
        "Paired ratios (median of {PAIRED_ROUNDS} back-to-back rounds of {PAIRED_PAIRS} pairs):"
    );
    println!(
        "| depth | 1t / sbitmap crate | 1t / floor | queue 1t / floor | 2t speed-up vs ArrayQueue | 2t speed-up vs Mutex | get_batch(8) / 8 gets |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let n = PAIRED_PAIRS;
    for depth in DEPTHS {
        let map = Sbitmap::new(depth).unwrap();
        let queue: SbitmapQueue = SbitmapQueue::new(depth).unwrap();
        let krate = CrateSbitmap::new(depth);
        let free = FreeList::new(depth);
        let mutex = MutexBitmap::new(depth);
        let crate_1t = paired_ratio(|| one_thread(&map, n), || one_thread(&krate, n));
        let floor_1t = paired_ratio(|| one_thread(&map, n), || one_thread(&Floor, n));
        let queue_floor_1t = paired_ratio(|| one_thread(&queue, n), || one_thread(&Floor, n));
        let vs_free_2t = paired_ratio(|| two_threads(&free, n), || two_threads(&map, n));
        let vs_mutex_2t =
            paired_ratio(|| two_threads(&mutex, n / 10), || two_threads(&map, n / 10));
        let batch = paired_ratio(
            || batch_rounds(&map, n / 8, true),
            || batch_rounds(&map, n / 8, false),
        );
        println!(
            "| {depth:>5} | {crate_1t:>5.2} | {floor_1t:>5.2} | {queue_floor_1t:>5.2} | {vs_free_2t:>5.1} | {vs_mutex_2t:>5.1} | {batch:>5.2} |"
        );
    }
}

/// Prints the ratios the project tracks, when every benchmark they need ran.
fn summary(started: SystemTime) {
    let mut rows = Vec::new();
    for depth in DEPTHS {
        let one = format!("get_put_1t/depth={depth}");
        let two = format!("get_put_2t/depth={depth}");
        let batch = format!("batch8/depth={depth}");
        let m = |g: &str, f: &str| criterion_median(started, g, f);
        let (Some(b1), Some(q1), Some(c1), Some(f1)) = (
            m(&one, "blkmq"),
            m(&one, "blkmq_queue"),
            m(&one, "sbitmap_crate"),
            m(&one, "floor"),
        ) else {
            return;
        };
        let (Some(b2), Some(a2), Some(x2)) = (
            m(&two, "blkmq"),
            m(&two, "arrayqueue"),
            m(&two, "mutex_bitmap"),
        ) else {
            return;
        };
        let (Some(gb), Some(gs)) = (m(&batch, "get_batch_8"), m(&batch, "get_single_x8")) else {
            return;
        };
        rows.push(format!(
            "| {depth:>5} | {b1:>5.2} | {:>5.2} | {:>5.2} | {:>5.2} | {b2:>5.2} | {:>5.1} | {:>5.1} | {:>5.2} |",
            b1 / c1,
            b1 / f1,
            q1 / f1,
            a2 / b2,
            x2 / b2,
            gb / gs,
        ));
    }
    println!();
    println!("Summary (criterion medians; ratios of time, so lower is better for blkmq / peer):");
    println!(
        "| depth | 1t ns | 1t / sbitmap crate | 1t / floor | queue 1t / floor | 2t ns | 2t speed-up vs ArrayQueue | 2t speed-up vs Mutex | get_batch(8) / 8 gets |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        println!("{row}");
    }
}
