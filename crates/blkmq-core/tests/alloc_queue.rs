//! The request queue's steady state allocates nothing: once warmed up, 10,000 I/Os — submit,
//! `queue_rq`, `end_request` — touch no heap, with and without an elevator, completed one at a
//! time inside `queue_rq` or in batches, through a plug made once and reused or a fresh plug
//! per batch, with merges and with splits, and with bios of many segments that the driver
//! walks and maps to a scatter-gather table, and with I/O accounting on (counting and reading
//! the counters). Measured with a counting allocator on the
//! submitting thread (everything here runs on it).
//!
//! Set `ALLOC_BACKTRACE=1` to have a failing run print where its first allocation came
//! from.

#![cfg(not(loom))]

#[path = "common/counting.rs"]
mod counting;
#[path = "common/fifo.rs"]
mod fifo;

use counting::assert_no_alloc;

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use blkmq_core::{
    Bio, Driver, HctxCx, Host, Op, Platform, Plug, QueueConfig, QueueLimits, Rejected, RequestInit,
    RequestQueue, Rq, Segment, Status, TagSet,
};

/// I/Os counted per configuration.
const IOS: u64 = 10_000;

/// A platform of one CPU, a clock that ticks on each read, and no kicks expected.
struct Fixed {
    clock: AtomicU64,
}

impl Platform for Fixed {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    fn kick(&self, _hctx: usize) {}
}

fn platform() -> Fixed {
    Fixed {
        clock: AtomicU64::new(0),
    }
}

thread_local! {
    /// Bios ended on this thread, and how many of them failed.
    static ENDED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn done(_bio: Bio, status: Status) {
    ENDED.with(|e| {
        let (ended, failed) = e.get();
        e.set((ended + 1, failed + u64::from(!status.is_ok())));
    });
}

/// Bios ended so far on this thread; panics if any failed.
fn ended() -> u64 {
    let (ended, failed) = ENDED.with(Cell::get);
    assert_eq!(failed, 0, "bios failed");
    ended
}

/// A null driver: takes every request and, `inline`, ends it inside `queue_rq`; else holds it
/// (in room made once) for the test to end in a batch, up to `cap` at a time (then it is busy:
/// [`Status::Resource`]). Counts the requests it takes. With `map`, it walks each request's
/// segments and maps them into a scatter-gather table on its stack, counting the bytes.
struct Null {
    inline: bool,
    cap: usize,
    map: bool,
    held: Mutex<Vec<Rq>>,
    requests: AtomicU64,
    mapped: AtomicU64,
}

impl Null {
    fn new(inline: bool) -> Self {
        Self {
            inline,
            cap: usize::MAX,
            map: false,
            held: Mutex::new(Vec::with_capacity(64)),
            requests: AtomicU64::new(0),
            mapped: AtomicU64::new(0),
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Driver for Null {
    type Platform = Fixed;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        if self.map {
            let walked: u64 = cx
                .queue()
                .segments(&rq)
                .unwrap()
                .map(|seg| u64::from(seg.len))
                .sum();
            let mut sg = [Segment::default(); 128];
            let used = cx.queue().map_sg(&rq, &mut sg).unwrap();
            let mapped: u64 = sg[..used].iter().map(|seg| u64::from(seg.len)).sum();
            assert_eq!(walked, mapped);
            self.mapped.fetch_add(mapped, Ordering::Relaxed);
        }
        if self.inline {
            self.requests.fetch_add(1, Ordering::Relaxed);
            cx.queue().end_request(rq, Status::Ok).unwrap();
            return Ok(());
        }
        let mut held = self.held.lock().unwrap();
        if held.len() >= self.cap {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        held.push(rq);
        Ok(())
    }
}

/// A host of one hardware queue and 16 tags, and a queue on it.
fn build(
    inline: bool,
    limits: QueueLimits,
    elevator: bool,
) -> (
    std::sync::Arc<Host<Null>>,
    std::sync::Arc<RequestQueue<Null>>,
) {
    build_with(Null::new(inline), limits, elevator)
}

fn build_with(
    driver: Null,
    limits: QueueLimits,
    elevator: bool,
) -> (
    std::sync::Arc<Host<Null>>,
    std::sync::Arc<RequestQueue<Null>>,
) {
    let host = Host::new(TagSet::builder(16), platform(), driver).unwrap();
    let mut config = QueueConfig::new(limits);
    if elevator {
        config = config.elevator(Box::new(fifo::Fifo::new()));
    }
    let queue = host.add_queue(config).unwrap();
    (host, queue)
}

/// As [`build`], with I/O accounting on.
fn build_accounted(
    inline: bool,
    elevator: bool,
) -> (
    std::sync::Arc<Host<Null>>,
    std::sync::Arc<RequestQueue<Null>>,
) {
    let host = Host::new(TagSet::builder(16), platform(), Null::new(inline)).unwrap();
    let mut config = QueueConfig::new(LIMITS).accounting(true);
    if elevator {
        config = config.elevator(Box::new(fifo::Fifo::new()));
    }
    let queue = host.add_queue(config).unwrap();
    (host, queue)
}

/// A 1 GiB device.
const LIMITS: QueueLimits = QueueLimits::new(1 << 21);

/// A bio of 8 sectors at `sector`.
fn bio(op: Op, sector: u64) -> Bio {
    Bio::new(op, sector, 8).end_io(done)
}

/// Where the `i`-th scattered I/O goes: far from its neighbours, so nothing merges.
fn scattered(i: u64) -> u64 {
    (i * 4096) % (1 << 20)
}

/// Ends everything the driver holds in one batch, through `spare` (room made once).
fn end_held(host: &Host<Null>, queue: &RequestQueue<Null>, spare: &mut Vec<Rq>) {
    std::mem::swap(&mut *host.driver().held.lock().unwrap(), spare);
    queue
        .end_requests(spare.drain(..).map(|rq| (rq, Status::Ok)))
        .unwrap();
}

/// `rounds` rounds of `per_round` scattered bios submitted, then ended in one batch.
fn held_rounds(
    host: &Host<Null>,
    queue: &RequestQueue<Null>,
    spare: &mut Vec<Rq>,
    rounds: u64,
    per_round: u64,
) {
    for round in 0..rounds {
        for i in 0..per_round {
            let op = if i % 2 == 0 { Op::Read } else { Op::Write };
            queue
                .submit(bio(op, scattered(round * per_round + i)))
                .unwrap();
        }
        end_held(host, queue, spare);
    }
}

#[test]
fn direct_issue_without_elevator_allocates_nothing() {
    let (host, queue) = build(true, LIMITS, false);
    let run = |from: u64, n: u64| {
        for i in from..from + n {
            queue.submit(bio(Op::Read, scattered(i))).unwrap();
        }
    };
    run(0, 100);
    let before = ended();
    assert_no_alloc("direct issue", || run(100, IOS));
    assert_eq!(ended() - before, IOS);
    assert_eq!(host.driver().requests(), 100 + IOS);
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

#[test]
fn batched_completions_without_elevator_allocate_nothing() {
    let (host, queue) = build(false, LIMITS, false);
    let mut spare = Vec::with_capacity(64);
    held_rounds(&host, &queue, &mut spare, 10, 8);
    let before = ended();
    assert_no_alloc("batched completions", || {
        held_rounds(&host, &queue, &mut spare, IOS / 8, 8);
    });
    assert_eq!(ended() - before, IOS);
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

#[test]
fn the_fifo_elevator_allocates_nothing() {
    // Inline completion: each request goes through the elevator and out at once.
    let (host, queue) = build(true, LIMITS, true);
    let run = |from: u64, n: u64| {
        for i in from..from + n {
            queue.submit(bio(Op::Write, scattered(i))).unwrap();
        }
    };
    run(0, 100);
    let before = ended();
    assert_no_alloc("fifo elevator, inline completion", || run(100, IOS));
    assert_eq!(ended() - before, IOS);
    assert_eq!(queue.elevator_name(), Some("fifo"));
    assert_eq!(host.driver().requests(), 100 + IOS);

    // Held and ended in batches: requests queue up in the elevator behind the driver.
    let (host, queue) = build(false, LIMITS, true);
    let mut spare = Vec::with_capacity(64);
    held_rounds(&host, &queue, &mut spare, 10, 8);
    let before = ended();
    assert_no_alloc("fifo elevator, batched completions", || {
        held_rounds(&host, &queue, &mut spare, IOS / 8, 8);
    });
    assert_eq!(ended() - before, IOS);
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

#[test]
fn a_reused_plug_allocates_nothing() {
    let (host, queue) = build(true, LIMITS, false);
    let mut plug = Plug::new();
    let mut run = |from: u64, n: u64| {
        for i in from..from + n {
            queue
                .submit_plugged(&mut plug, bio(Op::Read, scattered(i)))
                .unwrap();
            if i % 8 == 7 {
                plug.flush();
            }
        }
        plug.flush();
    };
    run(0, 100);
    let before = ended();
    let requests = host.driver().requests();
    assert_no_alloc("plug", || run(100, IOS));
    assert_eq!(ended() - before, IOS);
    assert_eq!(host.driver().requests() - requests, IOS, "nothing merges");
}

#[test]
fn a_fresh_plug_per_batch_allocates_nothing() {
    // As Linux code starts a plug per batch: each batch of 8 in a plug of its own, flushed
    // when it drops; with inline completion and with the driver holding a batch.
    for inline in [true, false] {
        let (host, queue) = build(inline, LIMITS, false);
        let mut spare = Vec::with_capacity(64);
        let mut run = |from: u64, n: u64| {
            for batch in (from..from + n).step_by(8) {
                let mut plug = Plug::new();
                for i in batch..batch + 8 {
                    queue
                        .submit_plugged(&mut plug, bio(Op::Read, scattered(i)))
                        .unwrap();
                }
                assert_eq!(plug.len(), 8, "nothing merges");
                drop(plug);
                if !inline {
                    end_held(&host, &queue, &mut spare);
                }
            }
        };
        run(0, 100);
        let before = ended();
        let requests = host.driver().requests();
        assert_no_alloc("a plug per batch", || run(104, IOS));
        assert_eq!(ended() - before, IOS);
        assert_eq!(host.driver().requests() - requests, IOS, "nothing merges");
        assert_eq!(
            (host.set().busy(), host.in_driver(), queue.usage()),
            (0, 0, 0)
        );
    }
}

#[test]
fn a_plug_with_a_cache_allocates_nothing() {
    // Requests taken ahead in batches, into the plug's own room; the unused ones given back
    // at each flush. Inline completion, and the driver holding a batch.
    for inline in [true, false] {
        let (host, queue) = build(inline, LIMITS, false);
        let mut spare = Vec::with_capacity(64);
        let mut plug = Plug::with_ios(8);
        let mut run = |from: u64, n: u64| {
            for i in from..from + n {
                queue
                    .submit_plugged(&mut plug, bio(Op::Read, scattered(i)))
                    .unwrap();
                // Flushed one short of the count: a cached request goes back each time.
                if i % 7 == 6 {
                    plug.flush();
                    if !inline {
                        end_held(&host, &queue, &mut spare);
                    }
                }
            }
            plug.flush();
            if !inline {
                end_held(&host, &queue, &mut spare);
            }
        };
        run(0, 98);
        let before = ended();
        let requests = host.driver().requests();
        assert_no_alloc("a plug with a cache", || run(98, IOS));
        assert_eq!(ended() - before, IOS);
        assert_eq!(host.driver().requests() - requests, IOS, "nothing merges");
        assert_eq!(
            (host.set().busy(), host.in_driver(), queue.usage()),
            (0, 0, 0)
        );
    }
}

#[test]
fn starting_a_plug_allocates_nothing() {
    let (_host, queue) = build(true, LIMITS, false);
    assert_no_alloc("Plug::new", || {
        for _ in 0..IOS {
            let plug: Plug<'_, Null> = Plug::new();
            std::hint::black_box(&plug);
        }
    });
    // A plug given a request and dropped hands it over: nothing is left behind.
    let mut plug = Plug::new();
    queue
        .submit_plugged(&mut plug, bio(Op::Read, scattered(0)))
        .unwrap();
    drop(plug);
    assert_eq!(queue.usage(), 0);
}

#[test]
fn accounting_allocates_nothing() {
    // Direct issue, the elevator, and batched completions, with every I/O counted.
    for elevator in [false, true] {
        let (host, queue) = build_accounted(true, elevator);
        let run = |from: u64, n: u64| {
            for i in from..from + n {
                let op = if i % 2 == 0 { Op::Read } else { Op::Write };
                queue.submit(bio(op, scattered(i))).unwrap();
            }
        };
        run(0, 100);
        assert_no_alloc("accounting, direct issue", || {
            run(100, IOS);
            let stats = queue.stats().unwrap();
            let hctx = queue.hctx_stats(0).unwrap();
            assert_eq!(
                (stats.ios(), hctx.ios(), stats.in_flight_total()),
                (100 + IOS, 100 + IOS, 0)
            );
        });
        assert_eq!(host.driver().requests(), 100 + IOS);
    }
    let (host, queue) = build_accounted(false, false);
    let mut spare = Vec::with_capacity(64);
    held_rounds(&host, &queue, &mut spare, 10, 8);
    assert_no_alloc("accounting, batched completions", || {
        held_rounds(&host, &queue, &mut spare, IOS / 8, 8);
    });
    assert_eq!(queue.stats().unwrap().ios(), 80 + IOS);
    // Merges in a plug, counted.
    let (host, queue) = build_accounted(true, false);
    let mut plug = Plug::new();
    let mut run = |from: u64, n: u64| {
        for i in from..from + n {
            queue
                .submit_plugged(
                    &mut plug,
                    bio(Op::Write, (i / 8 % 256) * 4096 + (i % 8) * 8),
                )
                .unwrap();
            if i % 8 == 7 {
                plug.flush();
            }
        }
    };
    run(0, 800);
    assert_no_alloc("accounting, merges", || run(800, IOS));
    let stats = queue.stats().unwrap();
    assert_eq!(
        (stats.ios(), stats.merges()),
        ((800 + IOS) / 8, (800 + IOS) / 8 * 7)
    );
    assert_eq!(host.set().bio_slots_in_use(), 0);
}

#[test]
fn merges_allocate_nothing() {
    // Eight contiguous bios merge into one request in the plug, and the driver ends it.
    let (host, queue) = build(true, LIMITS, false);
    let mut plug = Plug::new();
    let mut run = |from: u64, n: u64| {
        for i in from..from + n {
            queue
                .submit_plugged(
                    &mut plug,
                    bio(Op::Write, (i / 8 % 256) * 4096 + (i % 8) * 8),
                )
                .unwrap();
            if i % 8 == 7 {
                plug.flush();
            }
        }
    };
    run(0, 800);
    let before = ended();
    let requests = host.driver().requests();
    assert_no_alloc("merges", || run(800, IOS));
    assert_eq!(ended() - before, IOS);
    assert_eq!(
        host.driver().requests() - requests,
        IOS / 8,
        "eight bios to a request"
    );
    assert_eq!(host.set().bio_slots_in_use(), 0);
}

#[test]
fn splits_allocate_nothing() {
    // Each bio is four times what a request may hold: four pieces, one parent ending.
    let limits = QueueLimits {
        max_sectors: 64,
        ..LIMITS
    };
    let (host, queue) = build(true, limits, false);
    let run = |from: u64, n: u64| {
        for i in from..from + n {
            queue
                .submit(Bio::new(Op::Read, scattered(i), 256).end_io(done))
                .unwrap();
        }
    };
    run(0, 100);
    let before = ended();
    let requests = host.driver().requests();
    assert_no_alloc("splits", || run(100, IOS));
    assert_eq!(ended() - before, IOS);
    assert_eq!(
        host.driver().requests() - requests,
        4 * IOS,
        "four pieces a bio"
    );
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}

#[test]
fn merges_behind_a_busy_driver_allocate_nothing() {
    // The driver takes one request at a time: the rest wait in the software queue, where
    // contiguous bios merge; each completion restarts the queue for the next.
    let driver = Null {
        cap: 1,
        ..Null::new(false)
    };
    let (host, queue) = build_with(driver, LIMITS, false);
    let mut spare = Vec::with_capacity(64);
    let mut run = |from: u64, n: u64| {
        for i in from..from + n {
            queue
                .submit(bio(Op::Write, (i / 8 % 256) * 4096 + (i % 8) * 8))
                .unwrap();
            if i % 8 == 7 {
                while host.in_driver() > 0 {
                    end_held(&host, &queue, &mut spare);
                }
            }
        }
    };
    run(0, 800);
    let before = ended();
    let requests = host.driver().requests();
    assert_no_alloc("merges behind a busy driver", || run(800, IOS));
    assert_eq!(ended() - before, IOS);
    let taken = host.driver().requests() - requests;
    assert!(
        taken < IOS / 2,
        "{taken} requests for {IOS} bios: too few merges"
    );
    assert_eq!(
        (host.set().busy(), host.in_driver(), queue.usage()),
        (0, 0, 0)
    );
}

/// `N` segments of `len` bytes: the first `joined` physically contiguous, the rest 1 MiB
/// apart.
const fn table<const N: usize>(len: u32, joined: usize) -> [Segment; N] {
    let mut table = [Segment::new(0, 0); N];
    let mut i = 0;
    while i < N {
        let addr = if i < joined {
            0x1000_0000 + i as u64 * len as u64
        } else {
            0x2000_0000 + i as u64 * 0x10_0000
        };
        table[i] = Segment::new(addr, len);
        i += 1;
    }
    table
}

/// One 4 KiB bio in eight 512-byte segments, the first two contiguous.
static EIGHT: [Segment; 8] = table(512, 2);

/// One 128 KiB bio in sixteen 8 KiB segments, the first four contiguous.
static SIXTEEN: [Segment; 16] = table(8192, 4);

#[test]
fn multi_segment_bios_allocate_nothing() {
    // Merges: eight contiguous bios of eight segments each in a plug, one request, walked
    // and mapped by the driver.
    let driver = Null {
        map: true,
        ..Null::new(true)
    };
    let (host, queue) = build_with(driver, LIMITS, false);
    let mut plug = Plug::new();
    let mut run = |from: u64, n: u64| {
        for i in from..from + n {
            let sector = (i / 8 % 256) * 4096 + (i % 8) * 8;
            let bio = bio(Op::Write, sector).segments(&EIGHT);
            queue.submit_plugged(&mut plug, bio).unwrap();
            if i % 8 == 7 {
                plug.flush();
            }
        }
    };
    run(0, 800);
    let before = ended();
    let requests = host.driver().requests();
    let mapped = host.driver().mapped.load(Ordering::Relaxed);
    assert_no_alloc("multi-segment merges", || run(800, IOS));
    assert_eq!(ended() - before, IOS);
    assert_eq!(
        host.driver().requests() - requests,
        IOS / 8,
        "eight bios to a request"
    );
    assert_eq!(
        host.driver().mapped.load(Ordering::Relaxed) - mapped,
        IOS * 4096
    );
    assert_eq!(host.set().bio_slots_in_use(), 0);

    // Splits: each 128 KiB bio of sixteen segments is four requests' worth, its pieces
    // sharing the table from their own positions; through the FIFO elevator too.
    let limits = QueueLimits {
        max_sectors: 64,
        ..LIMITS
    };
    for elevator in [false, true] {
        let driver = Null {
            map: true,
            ..Null::new(true)
        };
        let (host, queue) = build_with(driver, limits, elevator);
        let run = |from: u64, n: u64| {
            for i in from..from + n {
                let bio = Bio::new(Op::Read, scattered(i), 256)
                    .segments(&SIXTEEN)
                    .end_io(done);
                queue.submit(bio).unwrap();
            }
        };
        run(0, 100);
        let before = ended();
        let requests = host.driver().requests();
        let mapped = host.driver().mapped.load(Ordering::Relaxed);
        assert_no_alloc("multi-segment splits", || run(100, IOS));
        assert_eq!(ended() - before, IOS);
        assert_eq!(
            host.driver().requests() - requests,
            4 * IOS,
            "four pieces a bio"
        );
        assert_eq!(
            host.driver().mapped.load(Ordering::Relaxed) - mapped,
            IOS * 256 * 512
        );
        assert_eq!((host.set().busy(), queue.usage()), (0, 0));
    }
}

#[test]
fn a_tracer_allocates_nothing() {
    // Every trace point reached, a ring tracer taking each event and drained as it goes:
    // direct issue, the fifo elevator with batches held, a plug with merges, splits.
    let rings = std::sync::Arc::new(blkmq_core::RingTracer::new(1, 4096));
    let traced = |inline: bool, limits: QueueLimits, elevator: bool| {
        let host = Host::new(TagSet::builder(16), platform(), Null::new(inline)).unwrap();
        let mut config = QueueConfig::new(limits).tracer(rings.clone());
        if elevator {
            config = config.elevator(Box::new(fifo::Fifo::new()));
        }
        let queue = host.add_queue(config).unwrap();
        (host, queue)
    };
    let (direct_host, direct) = traced(true, LIMITS, false);
    let (elv_host, elevated) = traced(false, LIMITS, true);
    let (_split_host, split) = traced(
        true,
        QueueLimits {
            max_sectors: 64,
            ..LIMITS
        },
        false,
    );
    let mut spare = Vec::with_capacity(64);
    let mut plug = Plug::new();
    let mut events = 0u64;
    let mut run = |from: u64, n: u64| {
        for i in from..from + n {
            direct.submit(bio(Op::Read, scattered(i))).unwrap();
            elevated.submit(bio(Op::Write, scattered(i))).unwrap();
            if i % 8 == 7 {
                end_held(&elv_host, &elevated, &mut spare);
            }
            direct
                .submit_plugged(
                    &mut plug,
                    bio(Op::Write, (i / 8 % 256) * 4096 + (i % 8) * 8),
                )
                .unwrap();
            if i % 8 == 7 {
                plug.flush();
            }
            split
                .submit(Bio::new(Op::Read, scattered(i), 256).end_io(done))
                .unwrap();
            events += rings.drain(|e| {
                std::hint::black_box(e);
            }) as u64;
        }
    };
    // Rounds of 8: nothing is left in the plug or the driver between runs.
    run(0, 96);
    let before = ended();
    assert_no_alloc("a tracer", || run(96, IOS));
    assert_eq!(ended() - before, 4 * IOS);
    assert_eq!(rings.dropped(), 0);
    // Each I/O traced from its Q to its C, at least.
    assert!(events >= 4 * 2 * (96 + IOS), "{events} events");
    assert_eq!(
        (
            direct_host.set().busy(),
            elv_host.set().busy(),
            direct.usage()
        ),
        (0, 0, 0)
    );
}
