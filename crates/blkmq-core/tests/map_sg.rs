//! A request's data mapped into a driver's scatter-gather table
//! ([`RequestQueue::map_sg`], [`QueueLimits::map_segments`], Linux's `blk_rq_map_sg`):
//! contiguous segments join, within and across the bios of a merged request, up to
//! `max_segment_size` and never across a `seg_boundary_mask` boundary; a table too small
//! says how many entries it needs and leaves the request as it was; requests without data
//! map to nothing.

#![cfg(not(loom))]

use std::sync::Arc;

use blkmq_core::testing::Hold;
use blkmq_core::*;
use proptest::prelude::*;

type Queue = RequestQueue<Hold<StdPlatform>>;

fn host_with(limits: QueueLimits) -> (Arc<Host<Hold<StdPlatform>>>, Arc<Queue>) {
    let platform = StdPlatform::manual_with_cpus(1);
    platform.pin_current_thread(0);
    let host = Host::new(TagSet::builder(16), platform, Hold::new()).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    (host, queue)
}

fn limits() -> QueueLimits {
    QueueLimits::new(1 << 21)
}

/// Submits `bios` behind a quiesced queue, so that neighbours merge, and returns what the
/// driver got, in sector order.
fn submit(
    host: &Host<Hold<StdPlatform>>,
    queue: &Queue,
    bios: impl IntoIterator<Item = Bio>,
) -> Vec<Rq> {
    queue.quiesce();
    for bio in bios {
        queue.submit(bio).unwrap();
    }
    queue.unquiesce();
    let mut got = host.driver().take();
    got.sort_by_key(|rq| queue.io(rq).unwrap().sector());
    got
}

/// The one request the driver got for `bios`.
fn one(host: &Host<Hold<StdPlatform>>, queue: &Queue, bios: impl IntoIterator<Item = Bio>) -> Rq {
    let mut got = submit(host, queue, bios);
    assert_eq!(got.len(), 1, "the bios merged into one request");
    got.pop().unwrap()
}

/// What `map_sg` makes of `rq`, with room to spare.
fn map(queue: &Queue, rq: &Rq) -> Vec<Segment> {
    let mut table = [Segment::default(); 256];
    let used = queue.map_sg(rq, &mut table).unwrap();
    table[..used].to_vec()
}

fn end(queue: &Queue, rq: Rq) {
    queue.end_request(rq, Status::Ok).unwrap();
}

fn idle(host: &Host<Hold<StdPlatform>>, queue: &Queue) {
    assert_eq!(
        (host.in_driver(), queue.usage(), host.set().busy()),
        (0, 0, 0)
    );
}

// ----- coalescing -----

/// Contiguous segments of one bio's table join into one entry; others stay apart.
#[test]
fn contiguous_segments_of_a_bio_join() {
    static TABLE: [Segment; 4] = [
        Segment::new(0x1000, 2048),
        Segment::new(0x1800, 2048),
        Segment::new(0x2000, 4096),
        Segment::new(0x9000, 4096),
    ];
    let (host, queue) = host_with(limits());
    let rq = one(&host, &queue, [Bio::new(Op::Write, 0, 24).segments(&TABLE)]);
    assert_eq!(
        map(&queue, &rq),
        [Segment::new(0x1000, 8192), Segment::new(0x9000, 4096)]
    );
    end(&queue, rq);
    idle(&host, &queue);
}

/// Bios of a merged request whose buffers are contiguous join into one entry too.
#[test]
fn contiguous_bios_of_a_merged_request_join() {
    let (host, queue) = host_with(limits());
    let bios = [
        Bio::new(Op::Read, 0, 8).buffer(0x10000),
        Bio::new(Op::Read, 8, 8).buffer(0x11000),
        Bio::new(Op::Read, 16, 4).buffer(0x12000),
        Bio::new(Op::Read, 20, 4).buffer(0x30000),
        Bio::new(Op::Read, 24, 8).buffer(0x30800),
    ];
    let rq = one(&host, &queue, bios);
    assert_eq!(queue.io(&rq).unwrap().nr_bios(), 5);
    assert_eq!(
        map(&queue, &rq),
        [Segment::new(0x10000, 10240), Segment::new(0x30000, 6144)]
    );
    end(&queue, rq);
    idle(&host, &queue);
}

/// A bio with no data named maps as one buffer laid out like its place on the device.
#[test]
fn a_bio_without_data_named_maps_like_its_place_on_the_device() {
    let (host, queue) = host_with(limits());
    let rq = one(&host, &queue, [Bio::new(Op::Write, 16, 8)]);
    assert_eq!(map(&queue, &rq), [Segment::new(16 * 512, 4096)]);
    end(&queue, rq);
    idle(&host, &queue);
}

// ----- cuts -----

/// One buffer longer than `max_segment_size` is cut into entries of that size, and
/// contiguous bios join only up to it.
#[test]
fn entries_are_cut_at_max_segment_size() {
    let limits = QueueLimits {
        max_segment_size: 4096,
        ..limits()
    };
    let (host, queue) = host_with(limits);
    let rq = one(&host, &queue, [Bio::new(Op::Write, 0, 28).buffer(0x40000)]);
    assert_eq!(
        map(&queue, &rq),
        [
            Segment::new(0x40000, 4096),
            Segment::new(0x41000, 4096),
            Segment::new(0x42000, 4096),
            Segment::new(0x43000, 2048),
        ]
    );
    end(&queue, rq);

    let bios = [
        Bio::new(Op::Write, 100, 4).buffer(0x50000),
        Bio::new(Op::Write, 104, 4).buffer(0x50800),
        Bio::new(Op::Write, 108, 4).buffer(0x51000),
    ];
    let rq = one(&host, &queue, bios);
    assert_eq!(
        map(&queue, &rq),
        [Segment::new(0x50000, 4096), Segment::new(0x51000, 2048)]
    );
    end(&queue, rq);
    idle(&host, &queue);
}

/// A buffer crossing a `seg_boundary_mask` boundary is cut there.
#[test]
fn entries_are_cut_at_the_segment_boundary() {
    let limits = QueueLimits {
        seg_boundary_mask: 0xffff,
        ..limits()
    };
    let (host, queue) = host_with(limits);
    let rq = one(&host, &queue, [Bio::new(Op::Read, 0, 24).buffer(0xf000)]);
    assert_eq!(
        map(&queue, &rq),
        [Segment::new(0xf000, 4096), Segment::new(0x10000, 8192)]
    );
    end(&queue, rq);
    idle(&host, &queue);
}

/// Contiguous segments, or contiguous bios, on either side of a boundary stay apart.
#[test]
fn nothing_joins_across_a_boundary() {
    static TABLE: [Segment; 3] = [
        Segment::new(0x1e000, 4096),
        Segment::new(0x1f000, 4096),
        Segment::new(0x20000, 4096),
    ];
    let limits = QueueLimits {
        seg_boundary_mask: 0xffff,
        ..limits()
    };
    let (host, queue) = host_with(limits);
    let rq = one(&host, &queue, [Bio::new(Op::Write, 0, 24).segments(&TABLE)]);
    assert_eq!(
        map(&queue, &rq),
        [Segment::new(0x1e000, 8192), Segment::new(0x20000, 4096)]
    );
    end(&queue, rq);

    let bios = [
        Bio::new(Op::Write, 64, 8).buffer(0x2f000),
        Bio::new(Op::Write, 72, 8).buffer(0x30000),
    ];
    let rq = one(&host, &queue, bios);
    assert_eq!(
        map(&queue, &rq),
        [Segment::new(0x2f000, 4096), Segment::new(0x30000, 4096)]
    );
    end(&queue, rq);
    idle(&host, &queue);
}

// ----- a table too small -----

/// A table too small gets an `SgTooSmall` with the entries needed; the request is as it
/// was, maps into a table large enough, and ends as usual.
#[test]
fn a_table_too_small_says_what_it_needs_and_changes_nothing() {
    static TABLE: [Segment; 3] = [
        Segment::new(0x1000, 4096),
        Segment::new(0x8000, 4096),
        Segment::new(0x10000, 4096),
    ];
    let (host, queue) = host_with(limits());
    let bios = [
        Bio::new(Op::Write, 0, 24).segments(&TABLE),
        Bio::new(Op::Write, 24, 8).buffer(0x11000), // joins the last segment
        Bio::new(Op::Write, 32, 8).buffer(0x40000),
    ];
    let rq = one(&host, &queue, bios);
    let before = {
        let io = queue.io(&rq).unwrap();
        let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
        (io.sector(), io.sectors(), io.nr_bios(), io.segments(), segs)
    };
    for len in 0..4 {
        let mut table = vec![Segment::default(); len];
        assert_eq!(
            queue.map_sg(&rq, &mut table),
            Err(SgTooSmall { needed: 4 }),
            "a table of {len}"
        );
    }
    let after = {
        let io = queue.io(&rq).unwrap();
        let segs: Vec<Segment> = queue.segments(&rq).unwrap().collect();
        (io.sector(), io.sectors(), io.nr_bios(), io.segments(), segs)
    };
    assert_eq!(before, after);
    let mut table = [Segment::default(); 4];
    assert_eq!(queue.map_sg(&rq, &mut table), Ok(4));
    assert_eq!(
        table,
        [
            Segment::new(0x1000, 4096),
            Segment::new(0x8000, 4096),
            Segment::new(0x10000, 8192),
            Segment::new(0x40000, 4096),
        ]
    );
    assert_eq!(host.in_driver(), 1);
    end(&queue, rq);
    idle(&host, &queue);
}

// ----- requests without data -----

/// Discards, flushes and write-zeroes carry no data: they map to no entry, even into an
/// empty table.
#[test]
fn requests_without_data_map_to_nothing() {
    let limits = QueueLimits {
        max_discard_sectors: 1024,
        ..limits()
    };
    let (host, queue) = host_with(limits);
    let rq = one(&host, &queue, [Bio::new(Op::Discard, 0, 64)]);
    assert_eq!(queue.map_sg(&rq, &mut []), Ok(0));
    assert_eq!(queue.segments(&rq).unwrap().count(), 0);
    end(&queue, rq);
    idle(&host, &queue);

    // Built straight on the queue's tags, whatever a flush goes through on submission.
    let tags = queue.queue_tags();
    for bio in [
        Bio::new(Op::Flush, 0, 0),
        Bio::new(Op::Discard, 8, 8),
        Bio::new(Op::WriteZeroes, 16, 8),
    ] {
        let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
        tags.set_bio(&mut rq, bio).unwrap();
        assert_eq!(queue.map_sg(&rq, &mut []), Ok(0), "{:?}", bio.op);
        assert_eq!(queue.segments(&rq).unwrap().count(), 0);
        tags.free(rq).unwrap();
    }
}

// ----- the properties -----

/// One segment of a generated bio: whether it starts where the one before it (in the
/// request) ended, how far on it starts if not (in 512-byte units), and its length in
/// sectors.
#[derive(Clone, Debug)]
struct GenSeg {
    contiguous: bool,
    gap: u64,
    sectors: u32,
}

fn gen_seg() -> impl Strategy<Value = GenSeg> {
    (any::<bool>(), 1u64..96, 1u32..17).prop_map(|(contiguous, gap, sectors)| GenSeg {
        contiguous,
        gap,
        sectors,
    })
}

fn gen_limits() -> impl Strategy<Value = QueueLimits> {
    (
        prop::sample::select(vec![4096u32, 8192, 12288, 65536]),
        prop::sample::select(vec![0xfffu64, 0x1fff, 0xffff, 0xffff_ffff]),
    )
        .prop_map(|(max_segment_size, seg_boundary_mask)| QueueLimits {
            max_segment_size,
            seg_boundary_mask,
            ..limits()
        })
}

/// One address per 512 bytes of `segs`, front to back.
fn units(segs: impl IntoIterator<Item = Segment>) -> Vec<u64> {
    let mut out = Vec::new();
    for seg in segs {
        assert_eq!(seg.len % 512, 0, "{seg:?}");
        out.extend((0..u64::from(seg.len) / 512).map(|i| seg.addr + i * 512));
    }
    out
}

/// Whether `limits` would let `a` and `b` be one entry.
fn joinable(limits: &QueueLimits, a: &Segment, b: &Segment) -> bool {
    let mask = limits.seg_boundary_mask;
    a.end() == b.addr
        && u64::from(a.len) + u64::from(b.len) <= u64::from(limits.max_segment_size)
        && (a.addr | mask) == ((b.end() - 1) | mask)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random bios of random segments merged into requests, under random segment limits:
    /// the entries cover exactly each request's bytes in order, each within the limits,
    /// no two neighbours joinable; a table one entry short is refused with the count.
    #[test]
    fn entries_cover_the_bytes_within_the_limits_and_join_all_they_can(
        limits in gen_limits(),
        bios in prop::collection::vec(prop::collection::vec(gen_seg(), 1..5), 1..5),
    ) {
        let (host, queue) = host_with(limits);
        let mut cursor = 0xe000u64;
        let mut sector = 0u64;
        let mut expected = Vec::new();
        let mut submitted = Vec::new();
        for segs in &bios {
            let table: Vec<Segment> = segs
                .iter()
                .map(|g| {
                    if !g.contiguous {
                        cursor += g.gap * 512;
                    }
                    let seg = Segment::new(cursor, g.sectors * 512);
                    cursor = seg.end();
                    seg
                })
                .collect();
            let sectors: u32 = segs.iter().map(|g| g.sectors).sum();
            let bio = Bio::new(Op::Write, sector, sectors);
            let bio = if table.len() == 1 {
                bio.buffer(table[0].addr)
            } else {
                // Leaked: `'static` for the test's run.
                bio.segments(Box::leak(table.clone().into_boxed_slice()))
            };
            expected.extend(units(table));
            submitted.push(bio);
            sector += u64::from(sectors);
        }
        let got = submit(&host, &queue, submitted);
        prop_assert!(!got.is_empty());

        let mut covered = Vec::new();
        for rq in &got {
            let entries = map(&queue, rq);
            let raw: Vec<Segment> = queue.segments(rq).unwrap().collect();
            prop_assert_eq!(units(entries.iter().copied()), units(raw));
            let bytes: u64 = entries.iter().map(|e| u64::from(e.len)).sum();
            prop_assert_eq!(bytes, queue.io(rq).unwrap().data_bytes());
            for e in &entries {
                prop_assert!(e.len > 0 && e.len <= limits.max_segment_size, "{:?}", e);
                let mask = limits.seg_boundary_mask;
                prop_assert_eq!(e.addr | mask, (e.end() - 1) | mask, "{:?} crosses", e);
            }
            for pair in entries.windows(2) {
                prop_assert!(!joinable(&limits, &pair[0], &pair[1]), "{:?} could join", pair);
            }
            let n = entries.len();
            let mut short = vec![Segment::default(); n - 1];
            prop_assert_eq!(queue.map_sg(rq, &mut short), Err(SgTooSmall { needed: n }));
            let segs = queue.segments(rq).unwrap();
            prop_assert_eq!(limits.map_segments(segs, &mut short), Err(SgTooSmall { needed: n }));
            covered.extend(units(entries));
        }
        prop_assert_eq!(covered, expected);
        for rq in got {
            end(&queue, rq);
        }
        idle(&host, &queue);
    }
}
