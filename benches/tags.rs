//! Request allocation through a tag set, against the bare bitmap under it.
//!
//! Every I/O allocates a request (a tag and the request it numbers) and frees it when it
//! completes, so the cost that matters is one allocation plus one free. Here that is
//! [`QueueTags::alloc`] (NOWAIT) of a request and [`QueueTags::free`] of it, with the unit
//! `()` as the driver's payload so only the tag layer is measured. Each criterion group holds
//! one setting (a thread count, a depth) and compares:
//!
//! * `raw`: [`SbitmapQueue::get`] and [`SbitmapQueue::put`] of one bitmap of the same depth
//!   (normal tags only), through a hint [`AllocHint::spread`]`(cpu, CPUS)` owned by the
//!   thread, as the tag set makes its per-CPU hints: the floor the tag-set layer adds to;
//! * `raw_percpu`: the same bitmaps reached as a multi-queue layer must reach them, one per
//!   hardware queue with a hint per CPU, both looked up on each call (a yardstick, with no
//!   target: `per_hctx / raw_percpu` is what the layer adds beyond that shape);
//! * `raw_owned`: `raw` plus the least a layer must do to hand out numbered requests
//!   soundly: the tag's request takes a new allocation count in its state word, and the free
//!   checks the caller's count against it and clears the state before the bit goes back (a
//!   yardstick too: no lookups, no checks of the caller, nothing else on the request);
//! * `per_hctx`: a [`TagSet`] of `HW_QUEUES` hardware queues, each with its own tags, and one
//!   request queue attached; thread `t` is CPU `t` and allocates on hardware queue `t`, so
//!   two threads use two different maps;
//! * `shared`: the same set with [`TagSetFlags::SHARED_HOST_TAGS`]: thread `t` still
//!   allocates on hardware queue `t`, but every queue takes its tags from the one map, so two
//!   threads share it (each starting on its own word, through its CPU's hint), as `raw` does.
//!
//! The groups:
//!
//! * `tags_1t/depth=N`: one thread (CPU 0, hardware queue 0);
//! * `tags_2t/depth=N`: two threads at once, each doing the same number of allocation and
//!   free pairs after a common start (a spinning rendezvous). The time reported for an
//!   iteration is the wall time for *each* thread to do one pair, so it compares directly
//!   with the one-thread time; the throughput counts the pairs of both threads. `raw` is then
//!   one bitmap for both threads, like `shared`; `per_hctx` is two maps, so `per_hctx / raw`
//!   is there not like for like, and `shared / raw` is the layer's cost.
//!
//! What goes through [`black_box`]: the [`Alloc`] (and the raw hint), because a block layer
//! learns its CPU and hardware queue at run time, and folding `cpu % nr_cpus` or the queue
//! check into constants would flatter the layer; the [`Rq`](blkmq_core::Rq) token (and the
//! raw bit) between allocation and free, because a real free happens on another call chain
//! (the driver's completion), where the compiler cannot see the values the allocation just
//! wrote and so cannot fold the free's ownership checks against them.
//!
//! After the benchmarks, a summary gives the ratios the project tracks from criterion's
//! medians: the tag-set layer over `raw` (target at most [`LAYER_TARGET`]) and the
//! throughput of `shared` over `per_hctx` (target at least [`SHARED_TARGET`]). After an
//! unfiltered run, the same ratios are measured again as paired comparisons (interleaved
//! rounds, the median of the per-round ratios), which a noisy machine disturbs far less.
//!
//! `cargo bench --bench tags` runs everything (about a minute); `cargo bench --bench tags --
//! tags_2t` only the two-thread groups; `cargo bench --bench tags -- paired` only the paired
//! table. Give criterion's options with values as `--name value` or `--name=value`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use blkmq_core::{Alloc, QueueTags, StdPlatform, TagSet, TagSetFlags};
use blkmq_sbitmap::{AllocHint, SbitmapQueue};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use crossbeam_utils::CachePadded;

mod common;
use common::{
    PAIRED_ROUNDS, bind_to_cpu, config, criterion_median, paired_ratio, paired_wanted, rendezvous,
    wait_for,
};

/// The depths every group runs at: words of 16 bits and of 64 bits, four words each.
const DEPTHS: [usize; 2] = [64, 256];

/// Hardware queues of the tag sets.
const HW_QUEUES: usize = 4;

/// CPUs of the platform, one per hardware queue: thread `t` is CPU `t` on hardware queue `t`.
const CPUS: usize = HW_QUEUES;

/// The most threads any group runs.
const THREADS: usize = 2;

/// The most the tag-set layer may cost, as a ratio of time over `raw`.
const LAYER_TARGET: f64 = 1.25;

/// The least throughput `shared` may have, as a ratio over `per_hctx`.
const SHARED_TARGET: f64 = 0.97;

/// An allocator under test: one allocation and one free per call of [`GetPut::get_put`].
///
/// Each `get_put` is `#[inline(never)]`: one compiled body per allocator, called by the
/// criterion loops and the paired comparisons alike, so both measure the same machine code.
/// Inlined into each loop, the optimiser decided differently per loop (in one build it
/// inlined [`QueueTags::free`] into the criterion loop and called it out of line in the
/// paired one), so the two methods measured different code. The call costs every allocator
/// the same few cycles, as it would in a block layer, whose allocation and free are calls.
trait GetPut: Sync {
    /// What each thread keeps for itself: its hint, or where it allocates from.
    type Local;

    /// The per-thread state of thread number `thread` (its CPU).
    fn local(&self, thread: usize) -> Self::Local;

    /// Allocates one tag (or request) and frees it again.
    fn get_put(&self, local: &Self::Local);
}

/// The bitmap a tag map keeps its normal tags in, used directly.
struct Raw(SbitmapQueue);

impl Raw {
    fn new(depth: usize) -> Self {
        Self(SbitmapQueue::new(depth).expect("a valid depth"))
    }
}

impl GetPut for Raw {
    type Local = AllocHint;

    fn local(&self, thread: usize) -> AllocHint {
        AllocHint::spread(thread, CPUS)
    }

    #[inline(never)]
    fn get_put(&self, hint: &AllocHint) {
        let hint = black_box(hint);
        let bit = self.0.get(hint).expect("a free tag");
        self.0.put(black_box(bit), hint).expect("an allocated tag");
    }
}

/// The same bitmaps reached the way a multi-queue layer must reach them: one per hardware
/// queue, each with a hint per CPU, both looked up on every call. Not a target, a yardstick:
/// `per_hctx / raw_percpu` is what the tag-set layer adds beyond that shape.
struct RawPerCpu(Box<[HintedMap]>);

/// A bitmap and a hint per CPU into it.
type HintedMap = (SbitmapQueue, Box<[CachePadded<AllocHint>]>);

impl RawPerCpu {
    fn new(depth: usize) -> Self {
        Self(
            (0..HW_QUEUES)
                .map(|_| {
                    let hints = (0..CPUS)
                        .map(|cpu| CachePadded::new(AllocHint::spread(cpu, CPUS)))
                        .collect();
                    (SbitmapQueue::new(depth).expect("a valid depth"), hints)
                })
                .collect(),
        )
    }
}

impl GetPut for RawPerCpu {
    /// (hardware queue, CPU).
    type Local = (usize, usize);

    fn local(&self, thread: usize) -> (usize, usize) {
        (thread % HW_QUEUES, thread % CPUS)
    }

    #[inline(never)]
    fn get_put(&self, local: &(usize, usize)) {
        let &(hctx, cpu) = black_box(local);
        let (map, hints) = &self.0[hctx];
        let bit = map.get(&hints[cpu]).expect("a free tag");
        let (map, hints) = &self.0[hctx];
        map.put(black_box(bit), &hints[cpu])
            .expect("an allocated tag");
    }
}

/// A request's state word, alone on its cache line as the tag set's requests are.
#[repr(align(64))]
struct OwnedSlot(AtomicU64);

/// [`Raw`] and one state word per tag, stamped on allocation and checked on free.
struct RawOwned {
    raw: Raw,
    slots: Box<[OwnedSlot]>,
}

impl RawOwned {
    fn new(depth: usize) -> Self {
        Self {
            raw: Raw::new(depth),
            slots: (0..depth).map(|_| OwnedSlot(AtomicU64::new(0))).collect(),
        }
    }
}

impl GetPut for RawOwned {
    type Local = AllocHint;

    fn local(&self, thread: usize) -> AllocHint {
        self.raw.local(thread)
    }

    #[inline(never)]
    fn get_put(&self, hint: &AllocHint) {
        let hint = black_box(hint);
        let bit = self.raw.0.get(hint).expect("a free tag");
        // Allocated: a new count, in state 1.
        let state = &self.slots[bit].0;
        let count = (state.load(Ordering::Relaxed) >> 1) + 1;
        state.store(count << 1 | 1, Ordering::Release);
        // The token, as a completion would get it.
        let (bit, count) = black_box((bit, count));
        let state = &self.slots.get(bit).expect("a tag of the map").0;
        if state.load(Ordering::Acquire) != count << 1 | 1 {
            panic!("not the caller's request");
        }
        state.store(count << 1, Ordering::Release);
        self.raw.0.put(bit, hint).expect("an allocated tag");
    }
}

/// A request queue attached to a tag set of its own.
struct Tags(QueueTags<(), StdPlatform>);

impl Tags {
    /// Per-hardware-queue tags, or shared host tags with `shared`.
    fn new(depth: usize, shared: bool) -> Self {
        let flags = if shared {
            TagSetFlags::SHARED_HOST_TAGS
        } else {
            TagSetFlags::empty()
        };
        let set = TagSet::builder(depth)
            .hw_queues(HW_QUEUES)
            .flags(flags)
            .build(StdPlatform::with_cpus(CPUS), |_| ())
            .expect("a valid tag set");
        assert_eq!(set.nr_maps(), if shared { 1 } else { HW_QUEUES });
        let tags = Self(set.attach().expect("room for a queue"));
        tags.check();
        tags
    }

    /// Each thread's requests come from where the bench says, and go back.
    fn check(&self) {
        for thread in 0..THREADS {
            let alloc = self.local(thread);
            let rq = self.0.alloc(&alloc).expect("a free tag");
            let request = self.0.request(&rq).expect("our request");
            assert_eq!(request.hctx(), alloc.hctx);
            assert!((request.tag() as usize) < self.0.set().depth());
            self.0.free(rq).expect("our request");
        }
        assert_eq!(self.0.set().busy(), 0);
    }
}

impl GetPut for Tags {
    type Local = Alloc;

    fn local(&self, thread: usize) -> Alloc {
        Alloc::new(thread % HW_QUEUES, thread % CPUS)
    }

    #[inline(never)]
    fn get_put(&self, alloc: &Alloc) {
        let rq = self.0.alloc(black_box(alloc)).expect("a free tag");
        self.0.free(black_box(rq)).expect("our request");
    }
}

/// The allocators at one depth.
struct Contenders {
    raw: Raw,
    raw_percpu: RawPerCpu,
    raw_owned: RawOwned,
    per_hctx: Tags,
    shared: Tags,
}

impl Contenders {
    fn new(depth: usize) -> Self {
        Self {
            raw: Raw::new(depth),
            raw_percpu: RawPerCpu::new(depth),
            raw_owned: RawOwned::new(depth),
            per_hctx: Tags::new(depth, false),
            shared: Tags::new(depth, true),
        }
    }
}

/// One thread (CPU 0) doing `iters` pairs on `imp`; returns the time it took.
fn one_thread<A: GetPut>(imp: &A, iters: u64) -> Duration {
    bind_to_cpu(0);
    let local = imp.local(0);
    let start = Instant::now();
    for _ in 0..iters {
        imp.get_put(&local);
    }
    start.elapsed()
}

/// Two threads (CPUs 0 and 1) doing `iters` pairs each on `imp` at the same time; returns
/// the wall time from their common start until both are done.
fn two_threads<A: GetPut>(imp: &A, iters: u64) -> Duration {
    let ready = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    thread::scope(|s| {
        s.spawn(|| {
            bind_to_cpu(1);
            let local = imp.local(1);
            rendezvous(&ready, THREADS);
            for _ in 0..iters {
                imp.get_put(&local);
            }
            done.fetch_add(1, Ordering::AcqRel);
        });
        bind_to_cpu(0);
        let local = imp.local(0);
        rendezvous(&ready, THREADS);
        let start = Instant::now();
        for _ in 0..iters {
            imp.get_put(&local);
        }
        done.fetch_add(1, Ordering::AcqRel);
        wait_for(&done, THREADS);
        start.elapsed()
    })
}

/// `iters` pairs on `imp` by one thread or by two at once.
fn timed<A: GetPut>(imp: &A, threads: usize, iters: u64) -> Duration {
    if threads == 1 {
        one_thread(imp, iters)
    } else {
        two_threads(imp, iters)
    }
}

fn tags_1t(c: &mut Criterion) {
    fn one<A: GetPut>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, imp: &A) {
        let local = imp.local(0);
        g.bench_function(name, |b| b.iter(|| imp.get_put(&local)));
    }
    for depth in DEPTHS {
        let all = Contenders::new(depth);
        let mut g = c.benchmark_group(format!("tags_1t/depth={depth}"));
        g.throughput(Throughput::Elements(1));
        one(&mut g, "raw", &all.raw);
        one(&mut g, "raw_percpu", &all.raw_percpu);
        one(&mut g, "raw_owned", &all.raw_owned);
        one(&mut g, "per_hctx", &all.per_hctx);
        one(&mut g, "shared", &all.shared);
        g.finish();
    }
}

fn tags_2t(c: &mut Criterion) {
    fn one<A: GetPut>(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, imp: &A) {
        g.bench_function(name, |b| b.iter_custom(|iters| two_threads(imp, iters)));
    }
    for depth in DEPTHS {
        let all = Contenders::new(depth);
        let mut g = c.benchmark_group(format!("tags_2t/depth={depth}"));
        // One iteration is one pair on each of the two threads.
        g.throughput(Throughput::Elements(THREADS as u64));
        one(&mut g, "raw", &all.raw);
        one(&mut g, "raw_percpu", &all.raw_percpu);
        one(&mut g, "raw_owned", &all.raw_owned);
        one(&mut g, "per_hctx", &all.per_hctx);
        one(&mut g, "shared", &all.shared);
        g.finish();
    }
}

fn main() {
    let started = SystemTime::now();
    let paired = paired_wanted();
    // What `criterion_group!` and `criterion_main!` expand to, less the undocumented `pub fn`.
    let mut c = config().configure_from_args();
    tags_1t(&mut c);
    tags_2t(&mut c);
    c.final_summary();
    summary(started);
    if paired {
        paired_summary();
    }
}

/// Allocation and free pairs per thread in one round of a paired comparison.
const PAIRED_PAIRS: u64 = 200_000;

/// A ratio of time against [`LAYER_TARGET`], starred when it misses it.
fn layer(ratio: f64) -> String {
    let miss = if ratio > LAYER_TARGET { "*" } else { " " };
    format!("{ratio:>5.2}{miss}")
}

/// A ratio of throughput against [`SHARED_TARGET`], starred when it misses it.
fn speed(ratio: f64) -> String {
    let miss = if ratio < SHARED_TARGET { "*" } else { " " };
    format!("{ratio:>5.2}{miss}")
}

/// The header of both ratio tables, after the leading columns `lead`.
fn ratio_header(lead: &str, lead_align: &str) {
    println!(
        "| {lead} | per_hctx / raw (<= {LAYER_TARGET}) | shared / raw (<= {LAYER_TARGET}) | shared vs per_hctx throughput (>= {SHARED_TARGET}) | raw_percpu / raw | per_hctx / raw_percpu | raw_owned / raw |"
    );
    println!("|{lead_align}---:|---:|---:|---:|---:|---:|");
}

/// The tracked ratios again, each measured as a paired comparison (see [`paired_ratio`]).
fn paired_summary() {
    println!();
    println!(
        "Paired ratios (median of {PAIRED_ROUNDS} back-to-back rounds of {PAIRED_PAIRS} pairs per thread; * misses its target):"
    );
    ratio_header("threads | depth", "---:|---:|");
    let n = PAIRED_PAIRS;
    for threads in 1..=THREADS {
        for depth in DEPTHS {
            let all = Contenders::new(depth);
            let (raw, percpu, owned, per_hctx, shared) = (
                &all.raw,
                &all.raw_percpu,
                &all.raw_owned,
                &all.per_hctx,
                &all.shared,
            );
            let per_hctx_raw =
                paired_ratio(|| timed(per_hctx, threads, n), || timed(raw, threads, n));
            let shared_raw = paired_ratio(|| timed(shared, threads, n), || timed(raw, threads, n));
            // Throughput of shared over per_hctx: time of per_hctx over shared.
            let shared_speed =
                paired_ratio(|| timed(per_hctx, threads, n), || timed(shared, threads, n));
            let percpu_raw = paired_ratio(|| timed(percpu, threads, n), || timed(raw, threads, n));
            let per_hctx_percpu =
                paired_ratio(|| timed(per_hctx, threads, n), || timed(percpu, threads, n));
            let owned_raw = paired_ratio(|| timed(owned, threads, n), || timed(raw, threads, n));
            println!(
                "| {threads} | {depth:>5} | {} | {} | {} | {percpu_raw:>5.2} | {per_hctx_percpu:>5.2} | {owned_raw:>5.2} |",
                layer(per_hctx_raw),
                layer(shared_raw),
                speed(shared_speed),
            );
        }
    }
}

/// Prints the tracked ratios from criterion's medians, for every group this run measured.
fn summary(started: SystemTime) {
    let mut rows = Vec::new();
    for (threads, prefix) in [(1, "tags_1t"), (2, "tags_2t")] {
        for depth in DEPTHS {
            let group = format!("{prefix}/depth={depth}");
            let m = |f: &str| criterion_median(started, &group, f);
            let (Some(raw), Some(percpu), Some(owned), Some(per_hctx), Some(shared)) = (
                m("raw"),
                m("raw_percpu"),
                m("raw_owned"),
                m("per_hctx"),
                m("shared"),
            ) else {
                continue;
            };
            rows.push(format!(
                "| {threads} | {depth:>5} | {raw:>6.2} | {per_hctx:>6.2} | {shared:>6.2} | {} | {} | {} | {:>5.2} | {:>5.2} | {:>5.2} |",
                layer(per_hctx / raw),
                layer(shared / raw),
                speed(per_hctx / shared),
                percpu / raw,
                per_hctx / percpu,
                owned / raw,
            ));
        }
    }
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "Summary (criterion medians, ns per pair and thread; ratios of time except the throughput; * misses its target):"
    );
    ratio_header(
        "threads | depth | raw ns | per_hctx ns | shared ns",
        "---:|---:|---:|---:|---:|",
    );
    for row in rows {
        println!("{row}");
    }
}
