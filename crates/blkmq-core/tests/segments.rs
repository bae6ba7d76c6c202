//! A bio's segments as the driver sees them: walked from the bio's position, shared by split
//! pieces without a copy, and tiling the submitted data exactly.

#![cfg(not(loom))]

use blkmq_core::testing::Hold;
use blkmq_core::{
    Bio, DataPos, Host, Op, QueueConfig, QueueLimits, SECTOR_SIZE, Segment, Status, StdPlatform,
    TagSet,
};
use proptest::prelude::*;

/// Byte ranges joined where one ends at the next one's start, empty ones dropped: the data
/// a list of segments names, however it is cut.
fn flatten(segs: impl IntoIterator<Item = Segment>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for seg in segs.into_iter().filter(|s| s.len != 0) {
        match out.last_mut() {
            Some(last) if last.1 == seg.addr => last.1 = seg.end(),
            _ => out.push((seg.addr, seg.end())),
        }
    }
    out
}

/// A segment table of `lens` (in sectors), each segment at its own address, some of them
/// right after the one before (`contiguous[i]`).
fn table(lens: &[u32], contiguous: &[bool]) -> Vec<Segment> {
    let mut at = 0x10_0000u64;
    lens.iter()
        .zip(contiguous)
        .map(|(&len, &next_to)| {
            if !next_to {
                at += 0x10_0000;
            }
            let seg = Segment::new(at, len * SECTOR_SIZE as u32);
            at = seg.end();
            seg
        })
        .collect()
}

#[test]
fn a_bio_walks_its_table_from_its_position() {
    static TABLE: [Segment; 3] = [
        Segment::new(0x1000, 1024),
        Segment::new(0x9000, 512),
        Segment::new(0x2000, 2560),
    ];
    let bio = Bio::new(Op::Write, 0, 8).segments(&TABLE);
    assert_eq!(bio.data.pos(), DataPos::default());
    assert_eq!(bio.segs().collect::<Vec<_>>(), TABLE);
    // A bio shorter than its table stops at its length.
    let short = Bio::new(Op::Write, 0, 3).segments(&TABLE);
    assert_eq!(
        short.segs().collect::<Vec<_>>(),
        [Segment::new(0x1000, 1024), Segment::new(0x9000, 512)]
    );
    // Operations without data walk nothing.
    assert_eq!(Bio::new(Op::Discard, 0, 8).segs().count(), 0);
    assert_eq!(Bio::new(Op::Flush, 0, 0).segs().count(), 0);
}

#[test]
fn a_table_that_does_not_cover_the_bio_is_refused() {
    static TABLE: [Segment; 2] = [Segment::new(0x1000, 2048), Segment::new(0x8000, 2048)];
    let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1 << 20)))
        .unwrap();
    fn expect_invalid(_: Bio, status: Status) {
        assert_eq!(status, Status::Invalid);
    }
    for sectors in [4, 16] {
        let bio = Bio::new(Op::Write, 0, sectors)
            .segments(&TABLE)
            .end_io(expect_invalid);
        queue.submit(bio).unwrap();
    }
    // Data on an operation that has none is refused too.
    let flush = Bio::new(Op::Flush, 0, 0)
        .segments(&TABLE)
        .end_io(expect_invalid);
    queue.submit(flush).unwrap();
    assert!(host.driver().is_empty());
    assert_eq!(queue.usage(), 0);
}

proptest! {
    /// A bio split to `max_sectors` reaches the driver as pieces whose segments, in sector
    /// order, name exactly the bytes of the table it was submitted with, each piece as long
    /// as its sectors.
    #[test]
    fn split_pieces_tile_the_table(
        layout in proptest::collection::vec((1u32..24, any::<bool>()), 1..12),
        max_kib in 4u32..32,
        sector in 0u64..4096,
    ) {
        let (lens, contiguous): (Vec<u32>, Vec<bool>) = layout.into_iter().unzip();
        let segs = table(&lens, &contiguous);
        let sectors: u32 = lens.iter().sum();
        let limits = QueueLimits {
            max_sectors: max_kib * 2,
            ..QueueLimits::new(1 << 20)
        };
        let host = Host::new(TagSet::builder(64), StdPlatform::new(), Hold::new()).unwrap();
        let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
        let status = submit_held(&host, &queue, Bio::new(Op::Write, sector, sectors), &segs);
        prop_assert_eq!(status, Status::Ok);
    }
}

type Queue = blkmq_core::RequestQueue<Hold<StdPlatform>>;

/// Submits `bio` with the borrowed table `segs` and waits for its end, while this thread plays
/// the driver: it checks every piece the driver got (as long as its sectors, within
/// `max_sectors`), ends it, and at the end checks that the pieces tile the bio and their
/// segments name exactly the table's bytes.
fn submit_held(
    host: &Host<Hold<StdPlatform>>,
    queue: &Queue,
    bio: Bio,
    segs: &[Segment],
) -> Status {
    std::thread::scope(|s| {
        let waiter = s.spawn(|| queue.submit_and_wait_with(bio, segs));
        let mut seen: Vec<(u64, u64, Vec<Segment>)> = Vec::new();
        let mut covered = 0u64;
        let mut views = Vec::new();
        while covered < u64::from(bio.sectors) {
            for rq in host.driver().take() {
                let io = queue.io(&rq).unwrap();
                let (at, len) = (io.sector(), io.sectors());
                let piece: Vec<Segment> = queue.segments(&rq).unwrap().collect();
                // The one-segment view is the bytes the walk names, where they are one run
                // within the segment size (checked once the bio has ended: a panic here
                // would leave its waiter waiting).
                let max = u64::from(queue.limits().max_segment_size);
                let one = match flatten(piece.iter().copied()).as_slice() {
                    [(start, end)] if end - start <= max => {
                        Some(Segment::new(*start, (end - start) as u32))
                    }
                    _ => None,
                };
                views.push((at, io.single_segment(), one));
                let bytes: u64 = piece.iter().map(|s| u64::from(s.len)).sum();
                assert_eq!(bytes, len * SECTOR_SIZE, "piece at {at} of {len} sectors");
                assert!(len <= u64::from(queue.limits().max_sectors));
                covered += len;
                seen.push((at, len, piece));
                queue.end_request(rq, Status::Ok).unwrap();
            }
            std::thread::yield_now();
        }
        let status = waiter.join().unwrap();
        for (at, view, walked) in views {
            assert_eq!(view, walked, "the one segment of the piece at {at}");
        }
        seen.sort_by_key(|p| p.0);
        let mut next = bio.sector;
        for (at, len, _) in &seen {
            assert_eq!(*at, next, "pieces tile the bio");
            next += len;
        }
        let walked = flatten(seen.into_iter().flat_map(|p| p.2));
        assert_eq!(walked, flatten(segs.iter().copied()));
        status
    })
}

/// `RqIo::single_segment`: the request's data where the queue counted it one segment in a
/// named buffer, following partial completions; nothing for anything else.
#[test]
fn a_request_of_one_segment_shows_it() {
    let limits = QueueLimits {
        max_segment_size: 8192,
        ..QueueLimits::new(1 << 20)
    };
    let host = Host::new(TagSet::builder(16), StdPlatform::new(), Hold::new()).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    // Two bios whose buffers follow each other merge into one request of one segment.
    let mut plug = blkmq_core::Plug::new();
    queue
        .submit_plugged(&mut plug, Bio::new(Op::Write, 0, 8).buffer(0x10_0000))
        .unwrap();
    queue
        .submit_plugged(&mut plug, Bio::new(Op::Write, 8, 8).buffer(0x10_1000))
        .unwrap();
    drop(plug);
    let mut held = host.driver().take();
    assert_eq!(held.len(), 1);
    let io = queue.io(&held[0]).unwrap();
    assert_eq!((io.nr_bios(), io.segments()), (2, 1));
    assert_eq!(io.single_segment(), Some(Segment::new(0x10_0000, 8192)));
    // Partly done, into the second bio: the rest, from where it starts now.
    assert!(
        queue
            .update_request(&mut held[0], 5120, Status::Ok)
            .unwrap()
    );
    let io = queue.io(&held[0]).unwrap();
    assert_eq!(io.single_segment(), Some(Segment::new(0x10_1400, 3072)));
    queue.end_request(held.pop().unwrap(), Status::Ok).unwrap();

    // Not one segment in a named buffer: no buffer, two runs, past the segment size.
    static TWO: [Segment; 2] = [Segment::new(0x20_0000, 2048), Segment::new(0x30_0000, 2048)];
    queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    queue
        .submit(Bio::new(Op::Read, 128, 8).segments(&TWO))
        .unwrap();
    queue
        .submit(Bio::new(Op::Read, 256, 32).buffer(0x40_0000))
        .unwrap();
    let held = host.driver().take();
    assert_eq!(held.len(), 3);
    for rq in &held {
        assert_eq!(queue.io(rq).unwrap().single_segment(), None);
    }
    // One segment of a table: shown as well.
    static ONE: [Segment; 1] = [Segment::new(0x50_0000, 4096)];
    queue
        .submit(Bio::new(Op::Read, 1024, 8).segments(&ONE))
        .unwrap();
    let rq = host.driver().take().pop().unwrap();
    assert_eq!(queue.io(&rq).unwrap().single_segment(), Some(ONE[0]));
    queue.end_request(rq, Status::Ok).unwrap();
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
}
