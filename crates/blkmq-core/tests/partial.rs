//! Partial completion ([`RequestQueue::update_request`], Linux's `blk_update_request`): every
//! byte of a request ends exactly once, with the status it was ended with, across merged
//! bios, split pieces, requeues and the final [`RequestQueue::end_request`]; and none of it
//! allocates.
//!
//! Bio ends go to one table keyed by a per-test [`Log`] id, carried in the upper half of each
//! bio's `private`, so tests running in parallel never see each other's ends.

#![cfg(not(loom))]

#[path = "common/counting.rs"]
mod counting;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use blkmq_core::testing::Hold;
use blkmq_core::*;
use proptest::prelude::*;

// ----- completions -----

/// One end of a bio: its number, the sector after its last (which an advance keeps), and
/// its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct End {
    n: u32,
    end_sector: u64,
    status: Status,
}

static ENDS: Mutex<BTreeMap<u32, Vec<End>>> = Mutex::new(BTreeMap::new());
static NEXT_LOG: AtomicU32 = AtomicU32::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn record(bio: Bio, status: Status) {
    let log = (bio.private >> 32) as u32;
    lock(&ENDS).entry(log).or_default().push(End {
        n: bio.private as u32,
        end_sector: bio.end_sector(),
        status,
    });
}

/// One test's (or one proptest case's) bio ends.
struct Log(u32);

impl Log {
    fn new() -> Self {
        Self(NEXT_LOG.fetch_add(1, Ordering::Relaxed))
    }

    /// `bio` as bio number `n` of this log.
    fn tag(&self, n: u32, bio: Bio) -> Bio {
        bio.private((u64::from(self.0) << 32) | u64::from(n))
            .end_io(record)
    }

    /// Bio number `n`: `sectors` sectors of `op` from `sector`, with no data named.
    fn bio(&self, n: u32, op: Op, sector: u64, sectors: u32) -> Bio {
        self.tag(n, Bio::new(op, sector, sectors))
    }

    /// `(bio number, status)` of the ends so far, in the order they came.
    fn ends(&self) -> Vec<(u32, Status)> {
        self.raw().iter().map(|e| (e.n, e.status)).collect()
    }

    fn raw(&self) -> Vec<End> {
        lock(&ENDS).get(&self.0).cloned().unwrap_or_default()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        lock(&ENDS).remove(&self.0);
    }
}

// ----- the host -----

type Queue = RequestQueue<Hold<StdPlatform>>;

fn host_with(limits: QueueLimits) -> (Arc<Host<Hold<StdPlatform>>>, Arc<Queue>) {
    host_of(16, limits)
}

/// A host of `depth` tags and one queue of `limits`.
fn host_of(depth: usize, limits: QueueLimits) -> (Arc<Host<Hold<StdPlatform>>>, Arc<Queue>) {
    let platform = StdPlatform::manual_with_cpus(1);
    platform.pin_current_thread(0);
    let host = Host::new(TagSet::builder(depth), platform, Hold::new()).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    (host, queue)
}

fn host() -> (Arc<Host<Hold<StdPlatform>>>, Arc<Queue>) {
    host_with(QueueLimits::new(1 << 21))
}

/// Submits `bios` behind a quiesced queue, so that neighbours merge, and returns what the
/// driver got.
fn merged(
    host: &Host<Hold<StdPlatform>>,
    queue: &Queue,
    bios: impl IntoIterator<Item = Bio>,
) -> Vec<Rq> {
    queue.quiesce();
    for bio in bios {
        queue.submit(bio).unwrap();
    }
    queue.unquiesce();
    host.driver().take()
}

/// The one request the driver got for `bios`.
fn one(host: &Host<Hold<StdPlatform>>, queue: &Queue, bios: impl IntoIterator<Item = Bio>) -> Rq {
    let mut got = merged(host, queue, bios);
    assert_eq!(got.len(), 1, "the bios merged into one request");
    got.pop().unwrap()
}

/// `(sector, sectors, nr_bios)` of a request.
fn shape(queue: &Queue, rq: &Rq) -> (u64, u64, u32) {
    let io = queue.io(rq).unwrap();
    (io.sector(), io.sectors(), io.nr_bios())
}

fn idle(host: &Host<Hold<StdPlatform>>, queue: &Queue) {
    assert_eq!(
        (host.in_driver(), queue.usage(), host.set().busy()),
        (0, 0, 0)
    );
    assert_eq!(host.set().bio_slots_in_use(), 0);
}

// ----- merged requests -----

/// Bytes that end whole bios end them, front to back, each with the status of its call;
/// the request then starts at the first bio left.
#[test]
fn whole_bios_end_with_the_status_of_their_call() {
    let log = Log::new();
    let (host, queue) = host();
    let bios = (0..4).map(|n| log.bio(n, Op::Write, u64::from(n) * 8, 8));
    let mut rq = one(&host, &queue, bios);
    assert_eq!(shape(&queue, &rq), (0, 32, 4));

    assert_eq!(
        queue.update_request(&mut rq, 4096, Status::Medium),
        Ok(true)
    );
    assert_eq!(log.ends(), [(0, Status::Medium)]);
    assert_eq!(shape(&queue, &rq), (8, 24, 3));

    assert_eq!(queue.update_request(&mut rq, 8192, Status::Ok), Ok(true));
    assert_eq!(
        log.ends(),
        [(0, Status::Medium), (1, Status::Ok), (2, Status::Ok)]
    );
    assert_eq!(shape(&queue, &rq), (24, 8, 1));

    queue.end_request(rq, Status::IoErr).unwrap();
    let ends = [
        (0, Status::Medium),
        (1, Status::Ok),
        (2, Status::Ok),
        (3, Status::IoErr),
    ];
    assert_eq!(log.ends(), ends);
    idle(&host, &queue);
}

/// Errors stay per bio: 4 KiB ended with `Medium`, then the rest with `Ok`.
#[test]
fn an_error_stays_with_the_bios_it_ended() {
    let log = Log::new();
    let (host, queue) = host();
    let bios = [
        log.bio(0, Op::Read, 0, 4),
        log.bio(1, Op::Read, 4, 4),
        log.bio(2, Op::Read, 8, 8),
    ];
    let mut rq = one(&host, &queue, bios);
    assert_eq!(
        queue.update_request(&mut rq, 4096, Status::Medium),
        Ok(true)
    );
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(
        log.ends(),
        [(0, Status::Medium), (1, Status::Medium), (2, Status::Ok)]
    );
    idle(&host, &queue);
}

/// A bio ended in part advances: its sector, length and data, and the request's segments
/// walk from there; it ends once, when the rest of it does.
#[test]
fn a_bio_ended_in_part_advances_and_ends_once() {
    static TABLE: [Segment; 3] = [
        Segment::new(0x10000, 2048),
        Segment::new(0x40000, 4096),
        Segment::new(0x80000, 2048),
    ];
    let log = Log::new();
    let (host, queue) = host();
    let bios = [
        log.tag(0, Bio::new(Op::Write, 0, 16).segments(&TABLE)),
        log.tag(1, Bio::new(Op::Write, 16, 8).buffer(0x100000)),
    ];
    let mut rq = one(&host, &queue, bios);

    assert_eq!(queue.update_request(&mut rq, 3072, Status::Ok), Ok(true));
    assert!(log.ends().is_empty());
    assert_eq!(shape(&queue, &rq), (6, 18, 2));
    let first = *queue.io(&rq).unwrap().first_bio().unwrap();
    assert_eq!((first.sector, first.sectors), (6, 10));
    assert_eq!(first.data.pos(), DataPos { seg: 1, skip: 1024 });
    let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
    assert_eq!(
        segs,
        [
            Segment::new(0x40400, 3072),
            Segment::new(0x80000, 2048),
            Segment::new(0x100000, 4096),
        ]
    );

    // Another part of the same bio, then past its end into the next.
    assert_eq!(queue.update_request(&mut rq, 1024, Status::Ok), Ok(true));
    assert!(log.ends().is_empty());
    assert_eq!(
        queue.update_request(&mut rq, 4096 + 1024, Status::Ok),
        Ok(true)
    );
    assert_eq!(log.ends(), [(0, Status::Ok)]);
    assert_eq!(shape(&queue, &rq), (18, 6, 1));
    let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
    assert_eq!(segs, [Segment::new(0x100400, 3072)]);

    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(0, Status::Ok), (1, Status::Ok)]);
    // Each bio reached its end_io with its end where it was.
    let ends: Vec<u64> = log.raw().iter().map(|e| e.end_sector).collect();
    assert_eq!(ends, [16, 24]);
    idle(&host, &queue);
}

/// A bio ended in part with an error ends with that error, even when its rest ends well;
/// its later errors do not replace the first.
#[test]
fn a_bio_ended_in_part_with_an_error_keeps_the_first_error() {
    let log = Log::new();
    let (host, queue) = host();
    let bios = [log.bio(0, Op::Read, 0, 16), log.bio(1, Op::Read, 16, 16)];
    let mut rq = one(&host, &queue, bios);
    assert_eq!(
        queue.update_request(&mut rq, 2048, Status::Medium),
        Ok(true)
    );
    assert_eq!(queue.update_request(&mut rq, 2048, Status::IoErr), Ok(true));
    assert_eq!(
        queue.update_request(&mut rq, 4096 + 512, Status::Ok),
        Ok(true)
    );
    assert_eq!(log.ends(), [(0, Status::Medium)]);
    assert_eq!(shape(&queue, &rq), (17, 15, 1));
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(0, Status::Medium), (1, Status::Ok)]);
    // The bio comes back whole: it was kept as it stood when the error came.
    assert_eq!(log.raw()[0].end_sector, 16);
    idle(&host, &queue);
}

/// Bytes are ended in whole logical blocks: a partial block is not ended.
#[test]
fn a_partial_block_is_not_ended() {
    let log = Log::new();
    let limits = QueueLimits {
        logical_block_size: 4096,
        ..QueueLimits::new(1 << 21)
    };
    let (host, queue) = host_with(limits);
    let bios = [log.bio(0, Op::Write, 0, 8), log.bio(1, Op::Write, 8, 16)];
    let mut rq = one(&host, &queue, bios);
    assert_eq!(queue.update_request(&mut rq, 4095, Status::Ok), Ok(true));
    assert_eq!(shape(&queue, &rq), (0, 24, 2));
    assert!(log.ends().is_empty());
    assert_eq!(queue.update_request(&mut rq, 8191, Status::Ok), Ok(true));
    assert_eq!(shape(&queue, &rq), (8, 16, 1));
    assert_eq!(log.ends(), [(0, Status::Ok)]);
    assert_eq!(queue.update_request(&mut rq, 8192, Status::Ok), Ok(false));
    assert_eq!(log.ends(), [(0, Status::Ok), (1, Status::Ok)]);
    queue.end_request(rq, Status::IoErr).unwrap();
    assert_eq!(log.ends().len(), 2, "nothing more ended");
    idle(&host, &queue);
}

/// Ending every byte leaves a request with no bio: `Ok(false)`, and `end_request` frees it,
/// ending nothing more. Bytes past the end are clamped.
#[test]
fn ending_every_byte_leaves_nothing_for_end_request() {
    let log = Log::new();
    let (host, queue) = host();
    let bios = [log.bio(0, Op::Read, 64, 8), log.bio(1, Op::Read, 72, 8)];
    let mut rq = one(&host, &queue, bios);
    assert_eq!(
        queue.update_request(&mut rq, 1 << 40, Status::Timeout),
        Ok(false)
    );
    assert_eq!(log.ends(), [(0, Status::Timeout), (1, Status::Timeout)]);
    let io = queue.io(&rq).unwrap();
    assert_eq!((io.sector(), io.sectors(), io.nr_bios()), (80, 0, 0));
    assert_eq!((io.data_bytes(), io.segments()), (0, 0));
    assert_eq!(queue.segments(&rq).unwrap().count(), 0);
    // Nothing left to end: the call changes nothing.
    assert_eq!(queue.update_request(&mut rq, 4096, Status::Ok), Ok(false));
    assert_eq!(host.in_driver(), 1);
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends().len(), 2);
    idle(&host, &queue);
}

/// Ending zero bytes ends nothing.
#[test]
fn ending_zero_bytes_changes_nothing() {
    let log = Log::new();
    let (host, queue) = host();
    let mut rq = one(&host, &queue, [log.bio(0, Op::Write, 0, 8)]);
    assert_eq!(queue.update_request(&mut rq, 0, Status::IoErr), Ok(true));
    assert_eq!(queue.update_request(&mut rq, 511, Status::IoErr), Ok(true));
    assert_eq!(shape(&queue, &rq), (0, 8, 1));
    assert!(log.ends().is_empty());
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(0, Status::Ok)]);
    idle(&host, &queue);
}

/// An operation without data ends by its sectors too (a discard, 512 bytes a sector).
#[test]
fn a_discard_ends_by_its_sectors() {
    let log = Log::new();
    let limits = QueueLimits {
        max_discard_sectors: 1024,
        ..QueueLimits::new(1 << 21)
    };
    let (host, queue) = host_with(limits);
    let mut rq = one(&host, &queue, [log.bio(0, Op::Discard, 0, 64)]);
    assert_eq!(queue.io(&rq).unwrap().data_bytes(), 0);
    assert_eq!(queue.update_request(&mut rq, 8192, Status::Ok), Ok(true));
    assert_eq!(shape(&queue, &rq), (16, 48, 1));
    assert_eq!(
        queue.update_request(&mut rq, 48 * 512, Status::NotSupported),
        Ok(false)
    );
    assert_eq!(log.ends(), [(0, Status::NotSupported)]);
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends().len(), 1);
    idle(&host, &queue);
}

// ----- split pieces -----

/// Pieces of a split bio ended in part and whole count towards their parent, which ends
/// once, after its last piece, with the first error.
#[test]
fn split_pieces_end_their_parent_once_with_the_first_error() {
    let log = Log::new();
    let limits = QueueLimits {
        max_sectors: 16,
        ..QueueLimits::new(1 << 21)
    };
    let (host, queue) = host_with(limits);
    queue
        .submit(log.tag(0, Bio::new(Op::Write, 0, 48).buffer(0x100000)))
        .unwrap();
    let mut pieces = host.driver().take();
    assert_eq!(pieces.len(), 3);
    let sectors: Vec<u64> = pieces
        .iter()
        .map(|rq| queue.io(rq).unwrap().sector())
        .collect();
    assert_eq!(sectors, [0, 16, 32]);
    let mut last = pieces.pop().unwrap();
    let mut middle = pieces.pop().unwrap();
    let first = pieces.pop().unwrap();

    // The middle piece: part of it well, part with an error, part well again.
    assert_eq!(
        queue.update_request(&mut middle, 2048, Status::Ok),
        Ok(true)
    );
    assert_eq!(
        queue.update_request(&mut middle, 2048, Status::Protection),
        Ok(true)
    );
    assert_eq!(shape(&queue, &middle), (24, 8, 1));
    let segs: Vec<Segment> = queue.segments(&middle).unwrap().collect();
    assert_eq!(segs, [Segment::new(0x100000 + 24 * 512, 4096)]);
    queue.end_request(middle, Status::Ok).unwrap();
    // The last piece, all of it in a partial end, with a later error.
    assert_eq!(
        queue.update_request(&mut last, 8192, Status::IoErr),
        Ok(false)
    );
    queue.end_request(last, Status::IoErr).unwrap();
    assert!(
        log.ends().is_empty(),
        "the parent waits for its first piece"
    );
    queue.end_request(first, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(0, Status::Protection)]);
    assert_eq!(
        log.raw()[0].end_sector,
        48,
        "the parent as it was submitted"
    );
    idle(&host, &queue);
}

/// With every split slot taken, a bio that an error ends in part cannot keep that error:
/// the ending stops at its first sector, the bio whole. Once a slot is free, it can.
#[test]
fn without_a_free_split_slot_an_error_stops_at_the_bio() {
    let log = Log::new();
    let limits = QueueLimits {
        max_sectors: 8,
        ..QueueLimits::new(1 << 21)
    };
    // Two tags, so four split slots.
    let (host, queue) = host_of(2, limits);
    // Each parent gets two pieces in, then runs out of tags: the rest comes back, a live
    // piece holding its parent's slot.
    let mut rests = Vec::new();
    for n in 0..4u32 {
        let sector = u64::from(n) * 100;
        let rest = queue.submit(log.bio(n, Op::Write, sector, 24)).unwrap_err();
        assert!(rest.flags.contains(BioFlags::SPLIT));
        assert_eq!((rest.sector, rest.sectors), (sector + 16, 8));
        for rq in host.driver().take() {
            queue.end_request(rq, Status::Ok).unwrap();
        }
        rests.push(rest);
    }
    assert!(log.ends().is_empty());

    let bios = [
        log.bio(10, Op::Write, 1000, 4),
        log.bio(11, Op::Write, 1004, 4),
    ];
    let mut rq = one(&host, &queue, bios);
    // In part of the first bio, with an error: nothing can end.
    assert_eq!(
        queue.update_request(&mut rq, 1024, Status::Medium),
        Ok(true)
    );
    assert_eq!(shape(&queue, &rq), (1000, 8, 2));
    // The first bio whole, and part of the second: the first ends, the second stays whole.
    assert_eq!(
        queue.update_request(&mut rq, 3072, Status::Medium),
        Ok(true)
    );
    assert_eq!(shape(&queue, &rq), (1004, 4, 1));
    assert_eq!(log.ends(), [(10, Status::Medium)]);
    // An error-free part needs no slot.
    assert_eq!(queue.update_request(&mut rq, 512, Status::Ok), Ok(true));
    assert_eq!(shape(&queue, &rq), (1005, 3, 1));

    // A parent ends, its slot is free: the error is kept now.
    queue.submit(rests.pop().unwrap()).unwrap();
    let piece = host.driver().take().pop().unwrap();
    queue.end_request(piece, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(10, Status::Medium), (3, Status::Ok)]);
    assert_eq!(queue.update_request(&mut rq, 512, Status::IoErr), Ok(true));
    assert_eq!(shape(&queue, &rq), (1006, 2, 1));
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends()[2], (11, Status::IoErr));

    for rest in rests {
        queue.submit(rest).unwrap();
        for rq in host.driver().take() {
            queue.end_request(rq, Status::Ok).unwrap();
        }
    }
    let mut ends = log.ends();
    ends.sort_by_key(|e| e.0);
    let all = [
        (0, Status::Ok),
        (1, Status::Ok),
        (2, Status::Ok),
        (3, Status::Ok),
        (10, Status::Medium),
        (11, Status::IoErr),
    ];
    assert_eq!(ends, all);
    idle(&host, &queue);
}

// ----- requeue -----

/// A request requeued after a partial end is dispatched again as the rest only; ending
/// it ends the rest.
#[test]
fn a_requeue_after_a_partial_end_sends_only_the_rest() {
    let log = Log::new();
    let (host, queue) = host();
    let bios = [
        log.tag(0, Bio::new(Op::Read, 0, 8).buffer(0x10000)),
        log.tag(1, Bio::new(Op::Read, 8, 16).buffer(0x20000)),
    ];
    let mut rq = one(&host, &queue, bios);
    assert_eq!(
        queue.update_request(&mut rq, 4096 + 2048, Status::Ok),
        Ok(true)
    );
    assert_eq!(log.ends(), [(0, Status::Ok)]);
    queue.requeue_request(rq, true).unwrap();

    let mut again = host.driver().take();
    assert_eq!(again.len(), 1);
    let mut rq = again.pop().unwrap();
    assert_eq!(queue.request(&rq).unwrap().state(), RqState::InFlight);
    assert_eq!(shape(&queue, &rq), (12, 12, 1));
    let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
    assert_eq!(segs, [Segment::new(0x20800, 6144)]);
    let mut sg = [Segment::default(); 2];
    assert_eq!(queue.map_sg(&rq, &mut sg), Ok(1));
    assert_eq!(sg[0], Segment::new(0x20800, 6144));

    // Part of the rest again, then the end.
    assert_eq!(
        queue.update_request(&mut rq, 1024, Status::Medium),
        Ok(true)
    );
    queue.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(0, Status::Ok), (1, Status::Medium)]);
    idle(&host, &queue);
}

// ----- refusals -----

/// Another queue's request is refused, and nothing changes.
#[test]
fn another_queues_request_is_refused() {
    let log = Log::new();
    let platform = StdPlatform::manual_with_cpus(1);
    platform.pin_current_thread(0);
    let host = Host::new(TagSet::builder(16), platform, Hold::new()).unwrap();
    let limits = QueueLimits::new(1 << 21);
    let a = host.add_queue(QueueConfig::new(limits)).unwrap();
    let b = host.add_queue(QueueConfig::new(limits)).unwrap();
    a.submit(log.bio(0, Op::Write, 0, 16)).unwrap();
    let mut rq = host.driver().take().pop().unwrap();
    assert_eq!(
        b.update_request(&mut rq, 4096, Status::Ok),
        Err(TagError::ForeignRequest)
    );
    assert_eq!(shape(&a, &rq), (0, 16, 1));
    assert!(log.ends().is_empty());
    a.end_request(rq, Status::Ok).unwrap();
    assert_eq!(log.ends(), [(0, Status::Ok)]);
}

/// A request a racing completion took out of flight is refused, and nothing changes.
#[test]
fn a_request_no_longer_in_flight_is_refused() {
    let log = Log::new();
    let (host, queue) = host();
    let mut rq = one(&host, &queue, [log.bio(0, Op::Write, 0, 16)]);
    let request = queue.request(&rq).unwrap();
    assert!(request.try_complete(request.generation()));
    assert_eq!(
        queue.update_request(&mut rq, 4096, Status::Ok),
        Err(TagError::WrongState {
            state: RqState::Complete
        })
    );
    assert_eq!(shape(&queue, &rq), (0, 16, 1));
    assert!(log.ends().is_empty());
    queue.end_request(rq, Status::Timeout).unwrap();
    assert_eq!(log.ends(), [(0, Status::Timeout)]);
    idle(&host, &queue);
}

// ----- no allocation -----

/// Partial ends, kept errors and the end of the rest allocate nothing.
#[test]
fn partial_ends_allocate_nothing() {
    static ENDED: AtomicU64 = AtomicU64::new(0);
    fn count(_: Bio, _: Status) {
        ENDED.fetch_add(1, Ordering::Relaxed);
    }
    let (host, queue) = host();
    let before = ENDED.load(Ordering::Relaxed);
    for round in 0..100u64 {
        let at = round * 64;
        let bios = (0..4).map(|n| {
            Bio::new(Op::Write, at + n * 8, 8)
                .buffer(0x10000 * n)
                .end_io(count)
        });
        let mut rq = one(&host, &queue, bios);
        counting::assert_no_alloc("partial ends", || {
            // In part with an error (the bio parks as a split parent), whole bios, in part
            // well, then the rest.
            assert_eq!(
                queue.update_request(&mut rq, 2048, Status::Medium),
                Ok(true)
            );
            assert_eq!(queue.update_request(&mut rq, 6144, Status::Ok), Ok(true));
            assert_eq!(queue.update_request(&mut rq, 1024, Status::Ok), Ok(true));
            queue.end_request(rq, Status::Ok).unwrap();
        });
    }
    assert_eq!(ENDED.load(Ordering::Relaxed) - before, 400);
    idle(&host, &queue);
}

// ----- the model -----

/// How a generated bio names its data.
#[derive(Clone, Debug)]
enum Data {
    None,
    Buffer(u64),
    /// Segment lengths in sectors, each at its own address.
    Table(Vec<u32>),
}

#[derive(Clone, Debug)]
struct Gen {
    sectors: u32,
    data: Data,
}

/// What the driver does next.
#[derive(Clone, Debug)]
enum Step {
    Update(u64, Status),
    Requeue,
}

fn status() -> impl Strategy<Value = Status> {
    prop_oneof![
        3 => Just(Status::Ok),
        1 => prop::sample::select(Status::ALL[1..].to_vec()),
    ]
}

fn gen_bio() -> impl Strategy<Value = Gen> {
    let data = prop_oneof![
        Just(Data::None),
        (0u64..64).prop_map(|page| Data::Buffer(0x100_0000 + page * 0x1_0000)),
        prop::collection::vec(1u32..6, 1..4).prop_map(Data::Table),
    ];
    (1u32..24, data).prop_map(|(sectors, data)| {
        let sectors = match &data {
            Data::Table(lens) => lens.iter().sum(),
            _ => sectors,
        };
        Gen { sectors, data }
    })
}

fn step(total_bytes: u64) -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..total_bytes + 1024, status()).prop_map(|(b, s)| Step::Update(b, s)),
        1 => Just(Step::Requeue),
    ]
}

/// The bytes of the generated bios, one address per sector, front to back.
fn sector_addrs(gens: &[Gen], tables: &[&'static [Segment]]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut sector = 0u64;
    for (g, table) in gens.iter().zip(tables) {
        match &g.data {
            Data::None => out.extend((0..u64::from(g.sectors)).map(|s| (sector + s) * 512)),
            Data::Buffer(addr) => out.extend((0..u64::from(g.sectors)).map(|s| addr + s * 512)),
            Data::Table(_) => {
                for seg in table.iter() {
                    out.extend((0..u64::from(seg.len) / 512).map(|s| seg.addr + s * 512));
                }
            }
        }
        sector += u64::from(g.sectors);
    }
    out
}

/// The request's segments, one address per sector.
fn rq_addrs(queue: &Queue, rq: &Rq) -> Vec<u64> {
    let mut out = Vec::new();
    for seg in queue.segments(rq).unwrap() {
        assert_eq!(seg.len % 512, 0);
        out.extend((0..u64::from(seg.len) / 512).map(|s| seg.addr + s * 512));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random bios merged into a request, a random sequence of partial ends with random
    /// statuses and requeues, then `end_request`: each bio ends once, when its last sector
    /// is ended, with the first error any of its sectors was ended with; the request
    /// always describes (and walks) exactly the sectors not yet ended.
    #[test]
    fn every_byte_ends_once_with_its_status(
        (gens, steps, last) in prop::collection::vec(gen_bio(), 1..6).prop_flat_map(|gens| {
            let total: u64 = gens.iter().map(|g| u64::from(g.sectors) * 512).sum();
            (Just(gens), prop::collection::vec(step(total), 0..10), status())
        })
    ) {
        let log = Log::new();
        let (host, queue) = host();
        // The tables live for the test's run: leaked, they are `'static`.
        let mut tables: Vec<&'static [Segment]> = Vec::new();
        let mut bios = Vec::new();
        let mut sector = 0u64;
        for (n, g) in gens.iter().enumerate() {
            let mut bio = Bio::new(Op::Write, sector, g.sectors);
            let mut table: &'static [Segment] = &[];
            match &g.data {
                Data::None => {}
                Data::Buffer(addr) => bio = bio.buffer(*addr),
                Data::Table(lens) => {
                    let segs: Vec<Segment> = lens
                        .iter()
                        .enumerate()
                        .map(|(i, len)| {
                            let addr = 0x1000_0000 + (n as u64) * 0x10_0000 + i as u64 * 0x1_0000;
                            Segment::new(addr, len * 512)
                        })
                        .collect();
                    table = Box::leak(segs.into_boxed_slice());
                    bio = bio.segments(table);
                }
            }
            tables.push(table);
            bios.push(log.tag(n as u32, bio));
            sector += u64::from(g.sectors);
        }
        let total = sector;
        let addrs = sector_addrs(&gens, &tables);
        let mut rq = one(&host, &queue, bios);
        prop_assert_eq!(shape(&queue, &rq), (0, total, gens.len() as u32));
        prop_assert_eq!(rq_addrs(&queue, &rq), addrs.clone());

        // The model: the status each sector was ended with, and how far the ends reached.
        let mut ended: Vec<Option<Status>> = vec![None; total as usize];
        let mut done = 0u64;
        // Each bio's first and after-last sector.
        let mut starts = Vec::new();
        let mut at = 0u64;
        for g in &gens {
            starts.push((at, at + u64::from(g.sectors)));
            at += u64::from(g.sectors);
        }
        let expect = |ended: &[Option<Status>]| -> Vec<(u32, Status)> {
            // Bios whose every sector ended, in order, with their first error.
            let mut out = Vec::new();
            for (n, &(a, b)) in starts.iter().enumerate() {
                let sectors = &ended[a as usize..b as usize];
                if sectors.iter().all(Option::is_some) {
                    let first_error = sectors
                        .iter()
                        .flatten()
                        .copied()
                        .find(|s| !s.is_ok())
                        .unwrap_or(Status::Ok);
                    out.push((n as u32, first_error));
                }
            }
            out
        };

        let mut remains = true;
        for step in steps {
            match step {
                Step::Update(bytes, status) => {
                    let sectors = (bytes / 512).min(total - done);
                    let got = queue.update_request(&mut rq, bytes, status);
                    for s in done..done + sectors {
                        ended[s as usize] = Some(status);
                    }
                    done += sectors;
                    remains = done < total;
                    prop_assert_eq!(got, Ok(remains));
                }
                Step::Requeue => {
                    queue.requeue_request(rq, true).unwrap();
                    let mut again = host.driver().take();
                    prop_assert_eq!(again.len(), 1);
                    rq = again.pop().unwrap();
                }
            }
            let mut ends = log.ends();
            ends.sort_by_key(|e| e.0);
            prop_assert_eq!(ends, expect(&ended));
            let io = queue.io(&rq).unwrap();
            prop_assert_eq!((io.sector(), io.sectors()), (done, total - done));
            let left = starts.iter().filter(|&&(_, b)| b > done).count();
            prop_assert_eq!(io.nr_bios() as usize, left);
            prop_assert_eq!(rq_addrs(&queue, &rq), addrs[done as usize..].to_vec());
            if !remains {
                break;
            }
        }
        queue.end_request(rq, last).unwrap();
        for s in ended.iter_mut().filter(|s| s.is_none()) {
            *s = Some(last);
        }
        let raw = log.raw();
        let mut ends: Vec<(u32, Status)> = raw.iter().map(|e| (e.n, e.status)).collect();
        ends.sort_by_key(|e| e.0);
        prop_assert_eq!(ends, expect(&ended));
        prop_assert_eq!(raw.len(), gens.len(), "each bio's end_io ran once");
        for e in &raw {
            prop_assert_eq!(e.end_sector, starts[e.n as usize].1);
        }
        idle(&host, &queue);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// One bio split into pieces, each piece's request ended in random parts with random
    /// statuses, in a random order of pieces, then each ended: the parent ends once, when
    /// its last sector does, with the first error any call ended part of it with.
    #[test]
    fn a_split_parent_ends_once_with_the_first_error_of_any_part(
        sectors in 17u32..80,
        table in any::<bool>(),
        steps in prop::collection::vec((0usize..8, 0u64..10_000, status()), 0..16),
        ends in prop::collection::vec(status(), 8),
    ) {
        let log = Log::new();
        let limits = QueueLimits {
            max_sectors: 16,
            ..QueueLimits::new(1 << 21)
        };
        let (host, queue) = host_with(limits);
        let bio = Bio::new(Op::Read, 64, sectors);
        let bio = if table {
            // One segment per 3 sectors (and what is left), apart from each other.
            let segs: Vec<Segment> = (0..sectors.div_ceil(3))
                .map(|i| {
                    let len = (sectors - 3 * i).min(3) * 512;
                    Segment::new(0x100_0000 + u64::from(i) * 0x1_0000, len)
                })
                .collect();
            bio.segments(Box::leak(segs.into_boxed_slice()))
        } else {
            bio.buffer(0x200_0000)
        };
        let addrs: Vec<u64> = bio
            .segs()
            .flat_map(|s| (0..u64::from(s.len) / 512).map(move |i| s.addr + i * 512))
            .collect();
        queue.submit(log.tag(0, bio)).unwrap();
        let mut pieces: Vec<Rq> = host.driver().take();
        let k = pieces.len();
        prop_assert_eq!(k, sectors.div_ceil(16) as usize);
        // Each piece's first sector (from the bio's) and sectors left.
        let mut at: Vec<u64> = (0..k as u64).map(|i| i * 16).collect();
        let mut left: Vec<u64> = (0..k as u64)
            .map(|i| (u64::from(sectors) - i * 16).min(16))
            .collect();
        let mut first_error: Option<Status> = None;
        let mut note = |status: Status, ended: u64| {
            if ended > 0 && !status.is_ok() && first_error.is_none() {
                first_error = Some(status);
            }
        };

        for (i, bytes, status) in steps {
            let i = i % k;
            let rq = &mut pieces[i];
            let ended = (bytes / 512).min(left[i]);
            let got = queue.update_request(rq, bytes, status);
            at[i] += ended;
            left[i] -= ended;
            note(status, ended);
            prop_assert_eq!(got, Ok(left[i] > 0));
            let io = queue.io(rq).unwrap();
            prop_assert_eq!(io.sectors(), left[i]);
            if left[i] > 0 {
                prop_assert_eq!(io.sector(), 64 + at[i]);
                let walked = rq_addrs(&queue, rq);
                let from = at[i] as usize;
                prop_assert_eq!(walked, addrs[from..from + left[i] as usize].to_vec());
            }
            let all_done = left.iter().all(|&l| l == 0);
            prop_assert!(log.raw().is_empty() || all_done, "the parent waits for every sector");
        }
        for (i, (rq, status)) in pieces.into_iter().zip(ends).enumerate() {
            note(status, left[i]);
            left[i] = 0;
            queue.end_request(rq, status).unwrap();
        }
        let raw = log.raw();
        prop_assert_eq!(raw.len(), 1, "the parent ends once");
        prop_assert_eq!(raw[0].status, first_error.unwrap_or(Status::Ok));
        prop_assert_eq!(raw[0].end_sector, 64 + u64::from(sectors));
        idle(&host, &queue);
    }
}
