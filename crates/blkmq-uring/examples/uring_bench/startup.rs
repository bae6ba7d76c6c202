//! Responsiveness on the real stack: an application starting up (its first reads, 4 KiB
//! each, one at a time, synchronous, spread over 64 MiB, by a thread new to the queue) on
//! an idle disk and while four writers stream sequential 128 KiB writes, each with 16 in
//! flight, through blkmq over `blkmq-uring` with none, mq-deadline and BFQ. The constants
//! are those of the simulated scenario (`examples/mmc_host/startup.rs`); the device is the
//! one under the bench's file, as it is.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

use blkmq_core::{Bio, Host, IssuerId, Op, QueueConfig, RequestQueue, Status, StdPlatform};
use blkmq_sched_bfq::Bfq;
use blkmq_sched_deadline::Deadline;
use blkmq_uring::UringDisk;

use crate::bench::{BS, Buffers, next_block};

/// The start-up's reads.
pub(crate) const READS: u64 = 128;
/// The span they are spread over, at the start of the file.
pub(crate) const READ_SPAN: u64 = 64 << 20;
/// Background writers.
pub(crate) const WRITERS: usize = 4;
/// Each writer's write size.
pub(crate) const WRITE_BYTES: usize = 128 << 10;
/// Each writer's writes in flight.
pub(crate) const WRITER_DEPTH: u64 = 16;
/// How long the writers stream before the start-up begins: the queue is full by then.
pub(crate) const WARM_UP: Duration = Duration::from_millis(300);
/// The disk's tags (one hardware queue): fewer than the writers keep in flight, so the
/// block layer holds writes back and the elevator chooses what goes next, as on a disk
/// with a command queue of 32.
pub(crate) const DISK_DEPTH: usize = 32;
/// The smallest file the scenario runs on: the start-up's span, then a region of 16 MiB
/// for each writer.
pub(crate) const MIN_FILE: u64 = READ_SPAN + WRITERS as u64 * (16 << 20);
/// The elevators compared.
pub(crate) const ELEVATORS: [&str; 3] = ["none", "mq-deadline", "bfq"];

/// One elevator's figures, medians over the rounds.
pub(crate) struct Row {
    pub(crate) elevator: &'static str,
    pub(crate) idle_ns: u64,
    pub(crate) loaded_ns: u64,
    pub(crate) writers_bytes_per_sec: f64,
}

impl Row {
    /// Loaded over idle (of the medians).
    pub(crate) fn slowdown(&self) -> f64 {
        self.loaded_ns as f64 / self.idle_ns.max(1) as f64
    }
}

/// A queue over the file with `elevator`: one hardware queue of [`DISK_DEPTH`] tags.
fn queue(file: &Path, elevator: &str) -> (Arc<Host<UringDisk>>, Arc<RequestQueue<UringDisk>>) {
    let disk = UringDisk::builder(file)
        .hw_queues(1)
        .depth(DISK_DEPTH)
        .open()
        .expect("open the disk");
    assert!(disk.mode().is_direct(), "the bench file takes O_DIRECT");
    let limits = disk.limits();
    let host = Host::new(disk.tag_set(), StdPlatform::new(), disk).expect("host");
    let mut config = QueueConfig::new(limits);
    match elevator {
        "mq-deadline" => config = config.elevator(Box::new(Deadline::new())),
        "bfq" => config = config.elevator(Box::new(Bfq::new())),
        _ => {}
    }
    let queue = UringDisk::add_queue(&host, config).expect("queue");
    (host, queue)
}

/// The start-up: [`READS`] reads, one at a time, on a thread of its own (new to the
/// queue: a CPU slot and an issuer of its own); how long they took.
fn start_up(queue: &RequestQueue<UringDisk>, seed: u64) -> u64 {
    std::thread::scope(|s| {
        s.spawn(|| {
            let buf = Buffers::new(1);
            let blocks = READ_SPAN / BS as u64;
            let mut rng = seed | 1;
            let t0 = Instant::now();
            for _ in 0..READS {
                let block = next_block(&mut rng, blocks);
                let bio = Bio::new(Op::Read, block * (BS as u64 / 512), (BS / 512) as u32)
                    .buffer(buf.addr(0))
                    .issuer(IssuerId(1));
                assert_eq!(queue.submit_and_wait(bio), Status::Ok, "start-up read");
            }
            t0.elapsed().as_nanos() as u64
        })
        .join()
        .unwrap()
    })
}

/// One writer's state, shared with its writes' completions.
struct Writer {
    thread: Thread,
    in_flight: AtomicU64,
    bytes: AtomicU64,
}

fn written(bio: Bio, status: Status) {
    assert_eq!(status, Status::Ok, "background write");
    // SAFETY: `private` is the address of the `Writer` on its thread's stack, which the
    // thread keeps until every write it submitted has ended.
    let writer = unsafe { &*(bio.private as *const Writer) };
    writer
        .bytes
        .fetch_add(WRITE_BYTES as u64, Ordering::Relaxed);
    writer.in_flight.fetch_sub(1, Ordering::Release);
    writer.thread.unpark();
}

/// A writer: sequential writes over `sectors` from `start` (round and round), with
/// [`WRITER_DEPTH`] in flight, until `stop`; the bytes written.
fn writer(
    queue: &RequestQueue<UringDisk>,
    id: u32,
    start: u64,
    sectors: u64,
    buf: &Buffers,
    stop: &AtomicBool,
) -> u64 {
    let state = Writer {
        thread: std::thread::current(),
        in_flight: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    };
    let step = (WRITE_BYTES / 512) as u64;
    let mut at = 0;
    while !stop.load(Ordering::Acquire) {
        if state.in_flight.load(Ordering::Acquire) >= WRITER_DEPTH {
            std::thread::park();
            continue;
        }
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        let mut bio = Bio::new(Op::Write, start + at, step as u32)
            .buffer(buf.addr(0))
            .issuer(IssuerId(100 + id))
            .end_io(written);
        bio.private = &state as *const Writer as u64;
        // Sleeps while the queue has no request free.
        queue.submit_wait(bio);
        at = (at + step) % sectors;
    }
    while state.in_flight.load(Ordering::Acquire) > 0 {
        std::thread::park();
    }
    state.bytes.load(Ordering::Relaxed)
}

/// The start-up on a fresh queue with `elevator`, with the writers when `loaded`: its
/// time, and the writers' rate over their run (bytes per second).
fn one(file: &Path, size: u64, elevator: &str, loaded: bool, seed: u64) -> (u64, f64) {
    let (host, queue) = queue(file, elevator);
    if !loaded {
        let ns = start_up(&queue, seed);
        drop(queue);
        drop(host);
        return (ns, 0.0);
    }
    // Each writer a region of its own past the start-up's span.
    let region = (size - READ_SPAN) / WRITERS as u64 / WRITE_BYTES as u64 * WRITE_BYTES as u64;
    let buf = Buffers::new(WRITE_BYTES / BS);
    let stop = AtomicBool::new(false);
    let (ns, bytes, span) = std::thread::scope(|s| {
        let t0 = Instant::now();
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (queue, buf, stop) = (&*queue, &buf, &stop);
                let start = (READ_SPAN + i as u64 * region) / 512;
                s.spawn(move || writer(queue, i as u32, start, region / 512, buf, stop))
            })
            .collect();
        std::thread::sleep(WARM_UP);
        let ns = start_up(&queue, seed);
        stop.store(true, Ordering::Release);
        let bytes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        (ns, bytes, t0.elapsed())
    });
    drop(queue);
    drop(host);
    (ns, bytes as f64 / span.as_secs_f64())
}

fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Every elevator, idle and loaded, `rounds` times in an order that turns from round to
/// round (each start-up with reads of its own); the medians.
pub(crate) fn run(file: &Path, size: u64, rounds: usize) -> Vec<Row> {
    let mut idle = vec![Vec::new(); ELEVATORS.len()];
    let mut loaded = vec![Vec::new(); ELEVATORS.len()];
    let mut rates = vec![Vec::new(); ELEVATORS.len()];
    let mut seed = 0x5eed_0000_u64;
    for round in 0..rounds {
        for k in 0..ELEVATORS.len() {
            let e = (k + round) % ELEVATORS.len();
            seed += 1;
            idle[e].push(one(file, size, ELEVATORS[e], false, seed * 0x9e37_79b9).0);
            seed += 1;
            let (ns, rate) = one(file, size, ELEVATORS[e], true, seed * 0x9e37_79b9);
            loaded[e].push(ns);
            rates[e].push(rate);
        }
    }
    ELEVATORS
        .iter()
        .enumerate()
        .map(|(e, &elevator)| Row {
            elevator,
            idle_ns: median(idle[e].clone()),
            loaded_ns: median(loaded[e].clone()),
            writers_bytes_per_sec: median(rates[e].clone()),
        })
        .collect()
}
