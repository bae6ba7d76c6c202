//! The segment limits on real segments: `max_segments`, `max_segment_size`,
//! `seg_boundary_mask`, `dma_alignment` and `virt_boundary_mask`, alone and together. Where
//! a bio is split, which merges are refused and what a merge counts, each case written out
//! from the rules of Linux's `block/blk-merge.c` (named in a comment on each).

#![cfg(not(loom))]

use std::cell::RefCell;
use std::sync::Arc;

use blkmq_core::testing::Hold;
use blkmq_core::{
    Bio, Host, Op, Plug, QueueConfig, QueueLimits, RequestQueue, Segment, Status, StdPlatform,
    TagSet,
};
use proptest::prelude::*;

type Queue = Arc<RequestQueue<Hold<StdPlatform>>>;

thread_local! {
    /// `(private, status)` of every bio ended on this thread.
    static ENDED: RefCell<Vec<(u64, Status)>> = const { RefCell::new(Vec::new()) };
}

fn done(bio: Bio, status: Status) {
    ENDED.with(|e| e.borrow_mut().push((bio.private, status)));
}

fn ended() -> Vec<(u64, Status)> {
    ENDED.with(|e| core::mem::take(&mut *e.borrow_mut()))
}

/// A table that outlives every bio.
fn table(segs: &[(u64, u32)]) -> &'static [Segment] {
    let segs: Vec<Segment> = segs.iter().map(|&(a, l)| Segment::new(a, l)).collect();
    Box::leak(segs.into_boxed_slice())
}

/// `n` segments of `len` bytes, `stride` bytes apart from `base`.
fn spread(base: u64, n: u64, len: u32, stride: u64) -> &'static [Segment] {
    let segs: Vec<(u64, u32)> = (0..n).map(|i| (base + i * stride, len)).collect();
    table(&segs)
}

/// Linux's defaults, its DMA alignment (511) included.
fn base() -> QueueLimits {
    QueueLimits {
        dma_alignment: 511,
        ..QueueLimits::new(1 << 20)
    }
}

/// A request as the driver got it.
#[derive(Debug, PartialEq, Eq)]
struct Served {
    sector: u64,
    sectors: u64,
    segments: u32,
    bios: u32,
}

fn queue(limits: QueueLimits) -> (Arc<Host<Hold<StdPlatform>>>, Queue) {
    let host = Host::new(TagSet::builder(64), StdPlatform::new(), Hold::new()).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits)).unwrap();
    (host, queue)
}

/// Submits `bios` (in one plug when `plugged`, so that they may merge), then serves every
/// request the driver got, checking that its segments map into a table of `max_segments`
/// entries, no more than it counted.
fn serve(limits: QueueLimits, bios: &[Bio], plugged: bool) -> Vec<Served> {
    let (host, queue) = queue(limits);
    ended();
    {
        let mut plug = Plug::new();
        for (i, bio) in bios.iter().enumerate() {
            let bio = bio.private(i as u64).end_io(done);
            if plugged {
                queue.submit_plugged(&mut plug, bio).unwrap();
            } else {
                queue.submit(bio).unwrap();
            }
        }
    }
    let mut served = Vec::new();
    for rq in host.driver().take() {
        let io = queue.io(&rq).unwrap();
        let mut sg = vec![Segment::default(); limits.max_segments as usize];
        let used = queue.map_sg(&rq, &mut sg).unwrap();
        assert!(
            used as u32 <= io.segments(),
            "{used} entries, {} counted",
            io.segments()
        );
        assert!(io.segments() <= limits.max_segments);
        served.push(Served {
            sector: io.sector(),
            sectors: io.sectors(),
            segments: io.segments(),
            bios: io.nr_bios(),
        });
        queue.end_request(rq, Status::Ok).unwrap();
    }
    served
}

fn served(sector: u64, sectors: u64, segments: u32, bios: u32) -> Served {
    Served {
        sector,
        sectors,
        segments,
        bios,
    }
}

/// The pieces `limits` splits `bio` into, by their sector lengths, as the queue does.
fn pieces(limits: &QueueLimits, bio: Bio) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = bio;
    loop {
        let len = limits.split_len(&rest);
        assert!(len > 0, "no progress on {rest:?}");
        out.push(len);
        if len >= rest.sectors {
            return out;
        }
        // The rest starts `len` sectors in: as a fresh bio over the rest of the table.
        rest = advance(rest, len);
    }
}

/// `bio` less its first `sectors`, over the same table (rebuilt from the segments).
fn advance(bio: Bio, sectors: u32) -> Bio {
    let mut skip = u64::from(sectors) * 512;
    let mut rest = Vec::new();
    for seg in bio.segs() {
        if skip >= u64::from(seg.len) {
            skip -= u64::from(seg.len);
            continue;
        }
        rest.push((seg.addr + skip, seg.len - skip as u32));
        skip = 0;
    }
    Bio::new(
        bio.op,
        bio.sector + u64::from(sectors),
        bio.sectors - sectors,
    )
    .segments(table(&rest))
}

// ----- max_segments -----

#[test]
fn max_segments_splits_where_the_count_is_reached() {
    // bio_split_rw_at: a bvec is taken while nsegs < max_segments; the split comes before
    // the first that would pass it.
    let limits = QueueLimits {
        max_segments: 4,
        ..base()
    };
    let bio = Bio::new(Op::Write, 0, 8).segments(spread(0x10_0000, 8, 512, 0x1000));
    assert_eq!(limits.bio_segments(&bio), 8);
    assert_eq!(pieces(&limits, bio), [4, 4]);
    assert_eq!(
        serve(limits, &[bio], false),
        [served(0, 4, 4, 1), served(4, 4, 4, 1)]
    );
    assert_eq!(ended(), [(0, Status::Ok)]);
}

#[test]
fn contiguous_segments_of_one_bio_count_once() {
    // A multi-page bvec (what bio_add_page makes of contiguous pages) is one segment:
    // contiguous table entries join as the device would take them.
    let limits = QueueLimits {
        max_segments: 1,
        ..base()
    };
    let bio = Bio::new(Op::Write, 0, 8).segments(spread(0x10_0000, 8, 512, 512));
    assert_eq!(limits.bio_segments(&bio), 1);
    assert_eq!(pieces(&limits, bio), [8]);
    assert_eq!(serve(limits, &[bio], false), [served(0, 8, 1, 1)]);
    ended();
}

#[test]
fn merges_count_the_combined_segments() {
    // ll_back_merge_fn / ll_new_hw_segment: refused when the request's segments and the
    // bio's together pass max_segments.
    let limits = QueueLimits {
        max_segments: 4,
        ..base()
    };
    let a = Bio::new(Op::Write, 0, 3).segments(spread(0x10_0000, 3, 512, 0x1000));
    let b = Bio::new(Op::Write, 3, 1).segments(spread(0x20_0000, 1, 512, 0x1000));
    let c = Bio::new(Op::Write, 4, 1).segments(spread(0x30_0000, 1, 512, 0x1000));
    assert_eq!(
        serve(limits, &[a, b, c], true),
        [served(0, 4, 4, 2), served(4, 1, 1, 1)]
    );
    ended();
}

#[test]
fn front_merges_count_the_combined_segments() {
    // ll_front_merge_fn: the same count for a bio in front.
    let limits = QueueLimits {
        max_segments: 2,
        ..base()
    };
    let back = Bio::new(Op::Write, 8, 1).buffer(0x10_0000);
    let front = Bio::new(Op::Write, 7, 1).buffer(0x20_0000);
    let further = Bio::new(Op::Write, 6, 1).buffer(0x30_0000);
    let rqs = serve(limits, &[back, front, further], true);
    assert_eq!(rqs, [served(7, 2, 2, 2), served(6, 1, 1, 1)]);
    ended();
}

#[test]
fn physically_contiguous_bios_count_as_one_segment() {
    // ll_merge_requests_fn of old (blk_phys_contig_segment): the last segment of the front
    // and the first of the back join, counting once.
    let limits = QueueLimits {
        max_segments: 1,
        ..base()
    };
    let a = Bio::new(Op::Write, 0, 8).buffer(0x10_0000);
    let b = Bio::new(Op::Write, 8, 8).buffer(0x10_1000);
    let front = Bio::new(Op::Write, 0, 8).buffer(0x10_0000);
    let behind = Bio::new(Op::Write, 8, 8).buffer(0x10_1000);
    assert_eq!(serve(limits, &[a, b], true), [served(0, 16, 1, 2)]);
    // In front, too.
    assert_eq!(serve(limits, &[behind, front], true), [served(0, 16, 1, 2)]);
    ended();
}

#[test]
fn unmapped_bios_never_join() {
    // A bio with no data named is never physically contiguous with another: the counts
    // of before.
    let limits = QueueLimits {
        max_segments: 1,
        ..base()
    };
    let rqs = serve(
        limits,
        &[Bio::new(Op::Write, 0, 8), Bio::new(Op::Write, 8, 8)],
        true,
    );
    assert_eq!(rqs, [served(0, 8, 1, 1), served(8, 8, 1, 1)]);
    ended();
}

// ----- max_segment_size -----

#[test]
fn max_segment_size_cuts_segments() {
    // get_max_segment_size / bvec_split_segs: a bvec longer than max_segment_size counts
    // as several segments.
    let limits = QueueLimits {
        max_segment_size: 4096,
        max_segments: 2,
        ..base()
    };
    let bio = Bio::new(Op::Read, 0, 24).buffer(0x10_0000);
    assert_eq!(limits.bio_segments(&bio), 3);
    assert_eq!(pieces(&limits, bio), [16, 8]);
    assert_eq!(
        serve(limits, &[bio], false),
        [served(0, 16, 2, 1), served(16, 8, 1, 1)]
    );
    ended();
}

#[test]
fn a_join_past_max_segment_size_is_not_made() {
    // blk_phys_contig_segment of old: contiguous, but the joined segment would pass
    // max_segment_size, so the two count apart.
    let limits = QueueLimits {
        max_segment_size: 4096,
        max_segments: 2,
        ..base()
    };
    let a = Bio::new(Op::Write, 0, 6).buffer(0x10_0000);
    let b = Bio::new(Op::Write, 6, 4).buffer(0x10_0c00);
    let c = Bio::new(Op::Write, 10, 4).buffer(0x10_1400);
    // a + b: 3 KiB and 2 KiB, contiguous, but 5 KiB > 4 KiB: two segments. c starts where
    // b ends, and b's 2 KiB and c's 2 KiB make 4 KiB: c joins b's segment.
    assert_eq!(serve(limits, &[a, b, c], true), [served(0, 14, 2, 3)]);
    // The joined back segment is 4 KiB now: a fourth contiguous bio cannot join it, and a
    // third segment is one too many.
    let d = Bio::new(Op::Write, 14, 1).buffer(0x10_1c00);
    assert_eq!(
        serve(limits, &[a, b, c, d], true),
        [served(0, 14, 2, 3), served(14, 1, 1, 1)]
    );
    ended();
}

// ----- seg_boundary_mask -----

#[test]
fn seg_boundary_mask_cuts_segments_at_the_address() {
    // get_max_segment_size: a segment never crosses a seg_boundary_mask + 1 boundary of
    // its address (not of its place on the device).
    let limits = QueueLimits {
        seg_boundary_mask: 0xfff,
        max_segments: 1,
        ..base()
    };
    // 4 KiB at sector 0, but 2 KiB into a page: two segments, so the first piece is 4
    // sectors.
    let bio = Bio::new(Op::Read, 0, 8).buffer(0x10_0800);
    assert_eq!(limits.bio_segments(&bio), 2);
    assert_eq!(pieces(&limits, bio), [4, 4]);
    // Page aligned: one segment.
    let aligned = Bio::new(Op::Read, 0, 8).buffer(0x10_0000);
    assert_eq!(pieces(&limits, aligned), [8]);
    assert_eq!(
        serve(limits, &[bio], false),
        [served(0, 4, 1, 1), served(4, 4, 1, 1)]
    );
    ended();
}

#[test]
fn a_join_across_a_seg_boundary_is_not_made() {
    // biovec_phys_mergeable: contiguous segments on two sides of a boundary stay two.
    let limits = QueueLimits {
        seg_boundary_mask: 0xfff,
        max_segments: 1,
        ..base()
    };
    let a = Bio::new(Op::Write, 0, 8).buffer(0x10_0000);
    let b = Bio::new(Op::Write, 8, 8).buffer(0x10_1000);
    assert_eq!(
        serve(limits, &[a, b], true),
        [served(0, 8, 1, 1), served(8, 8, 1, 1)]
    );
    ended();
}

// ----- dma_alignment -----

#[test]
fn misaligned_segments_fail() {
    // bio_split_io_at: a bvec whose offset or length is off dma_alignment is -EINVAL.
    let limits = QueueLimits {
        dma_alignment: 4095,
        ..base()
    };
    let odd_addr = Bio::new(Op::Write, 0, 8).buffer(0x10_0200);
    let odd_len = Bio::new(Op::Write, 0, 16)
        .segments(table(&[(0x10_0000, 4096 + 512), (0x20_0000, 4096 - 512)]));
    let fine = Bio::new(Op::Write, 0, 8).buffer(0x10_0000);
    assert_eq!(limits.check(&odd_addr), Some(Status::Invalid));
    assert_eq!(limits.check(&odd_len), Some(Status::Invalid));
    assert_eq!(limits.check(&fine), None);
    // Unmapped data is not checked.
    assert_eq!(limits.check(&Bio::new(Op::Write, 1, 1)), None);
    assert_eq!(serve(limits, &[odd_addr, odd_len, fine], false).len(), 1);
    assert_eq!(
        ended(),
        [(0, Status::Invalid), (1, Status::Invalid), (2, Status::Ok)]
    );
    // Linux's 511: sector-aligned buffers pass, byte-aligned ones do not.
    assert_eq!(
        base().check(&Bio::new(Op::Read, 0, 1).buffer(0x10_0001)),
        Some(Status::Invalid)
    );
    assert_eq!(base().check(&Bio::new(Op::Read, 0, 1).buffer(0x200)), None);
    // No alignment asked (the default): anything goes.
    let any = QueueLimits {
        dma_alignment: 0,
        ..base()
    };
    assert_eq!(any.check(&Bio::new(Op::Read, 0, 1).buffer(0x10_0001)), None);
    let default = QueueLimits::new(1 << 20);
    assert_eq!(
        default.check(&Bio::new(Op::Read, 0, 1).buffer(0x10_0001)),
        None
    );
}

// ----- virt_boundary_mask -----

fn nvme() -> QueueLimits {
    QueueLimits {
        virt_boundary_mask: 4095,
        ..base()
    }
}

#[test]
fn a_gap_inside_a_bio_splits_before_the_segment() {
    // bio_split_rw_at / bvec_gap_to_prev: split before a bvec that starts off a boundary,
    // or whose predecessor ends off one.
    let limits = nvme();
    // The first ends off a boundary: split after it.
    let bio = Bio::new(Op::Write, 0, 16).segments(table(&[(0x10_0000, 1024), (0x20_0000, 7168)]));
    assert_eq!(pieces(&limits, bio), [2, 14]);
    // The second starts off one.
    let bio = Bio::new(Op::Write, 0, 16).segments(table(&[(0x10_0000, 4096), (0x20_0400, 4096)]));
    assert_eq!(pieces(&limits, bio), [8, 8]);
    // Page-aligned middles: the PRP rule holds, no split; only the first may start and the
    // last end off a boundary.
    let bio = Bio::new(Op::Write, 0, 24).segments(table(&[
        (0x10_0c00, 1024),
        (0x20_0000, 8192),
        (0x30_0000, 3072),
    ]));
    assert_eq!(pieces(&limits, bio), [24]);
    // Contiguous segments leave no gap.
    let bio = Bio::new(Op::Write, 0, 4).segments(table(&[(0x10_0000, 1024), (0x10_0400, 1024)]));
    assert_eq!(pieces(&limits, bio), [4]);
    assert_eq!(
        serve(
            limits,
            &[Bio::new(Op::Write, 0, 16).segments(table(&[(0x10_0000, 1024), (0x20_0000, 7168)]))],
            false
        ),
        [served(0, 2, 1, 1), served(2, 14, 1, 1)]
    );
    ended();
}

#[test]
fn a_merge_that_leaves_a_gap_is_refused() {
    // req_gap_back_merge / bio_will_gap: the request's last segment ends off a boundary and
    // the bio's first does not continue it.
    let limits = nvme();
    let a = Bio::new(Op::Write, 0, 2).buffer(0x10_0000); // ends at 0x10_0400
    let b = Bio::new(Op::Write, 2, 8).buffer(0x20_0000);
    assert_eq!(
        serve(limits, &[a, b], true),
        [served(0, 2, 1, 1), served(2, 8, 1, 1)]
    );
    // Ends on a boundary, the next starts on one: merged, two segments.
    let a = Bio::new(Op::Write, 0, 8).buffer(0x10_0000);
    let b = Bio::new(Op::Write, 8, 2).buffer(0x20_0000);
    assert_eq!(serve(limits, &[a, b], true), [served(0, 10, 2, 2)]);
    // The bio starts off a boundary: refused.
    let a = Bio::new(Op::Write, 0, 8).buffer(0x10_0000);
    let b = Bio::new(Op::Write, 8, 2).buffer(0x20_0200);
    assert_eq!(
        serve(limits, &[a, b], true),
        [served(0, 8, 1, 1), served(8, 2, 1, 1)]
    );
    // Physically contiguous: no gap, one segment (biovec_phys_mergeable).
    let a = Bio::new(Op::Write, 0, 2).buffer(0x10_0000);
    let b = Bio::new(Op::Write, 2, 2).buffer(0x10_0400);
    assert_eq!(serve(limits, &[a, b], true), [served(0, 4, 1, 2)]);
    ended();
}

#[test]
fn no_merge_behind_a_request_that_starts_off_a_boundary() {
    // bio_will_gap: "Don't merge if the 1st bio starts with non-zero offset", even where
    // the two would meet on boundaries.
    let limits = nvme();
    let a = Bio::new(Op::Write, 0, 6).buffer(0x10_0400); // ends at 0x10_1000
    let b = Bio::new(Op::Write, 6, 8).buffer(0x20_0000);
    assert_eq!(
        serve(limits, &[a, b], true),
        [served(0, 6, 1, 1), served(6, 8, 1, 1)]
    );
    // As a front merge: the bio in front starts off a boundary.
    let a = Bio::new(Op::Write, 0, 6).buffer(0x10_0400);
    let b = Bio::new(Op::Write, 6, 8).buffer(0x20_0000);
    assert_eq!(
        serve(limits, &[b, a], true),
        [served(6, 8, 1, 1), served(0, 6, 1, 1)]
    );
    ended();
}

// ----- together -----

#[test]
fn all_five_limits_together() {
    // Each rule of bio_split_rw_at in one walk: the gap first, then the segment count
    // with each bvec cut by get_max_segment_size, then the byte limit, rounded to the block.
    let limits = QueueLimits {
        max_segments: 3,
        max_segment_size: 8192,
        seg_boundary_mask: 0x3fff,
        dma_alignment: 1023,
        virt_boundary_mask: 4095,
        logical_block_size: 4096,
        max_sectors: 64,
        ..base()
    };
    assert_eq!(limits.validate(), Ok(()));
    // 16 KiB at 0x2000: the 16 KiB window boundary at 0x4000 cuts it into 8 KiB and 8 KiB;
    // then 12 KiB at 0x10_0000 (page aligned), cut into 8 KiB and 4 KiB.
    let bio = Bio::new(Op::Write, 0, 56).segments(table(&[(0x2000, 16384), (0x10_0000, 12288)]));
    assert_eq!(limits.bio_segments(&bio), 4);
    // Three segments: 8 + 8 + 8 KiB.
    assert_eq!(pieces(&limits, bio), [48, 8]);
    // A 1 KiB-aligned but not page-aligned second segment: a gap, split before it.
    let bio = Bio::new(Op::Write, 0, 16).segments(table(&[(0x0, 4096), (0x10_0400, 4096)]));
    assert_eq!(pieces(&limits, bio), [8, 8]);
    // Misaligned for the DMA: refused whole.
    let bio = Bio::new(Op::Write, 0, 8).buffer(0x200);
    assert_eq!(limits.check(&bio), Some(Status::Invalid));
    assert_eq!(
        serve(
            limits,
            &[Bio::new(Op::Write, 0, 56).segments(table(&[(0x2000, 16384), (0x10_0000, 12288)]))],
            false
        ),
        [served(0, 48, 3, 1), served(48, 8, 1, 1)]
    );
    ended();
}

#[test]
fn merges_under_all_limits_together() {
    // ll_back_merge_fn with every rule at once: the gap check (req_gap_back_merge), then
    // the combined count (ll_new_hw_segment) with the physical join of old.
    let limits = QueueLimits {
        max_segments: 2,
        max_segment_size: 8192,
        seg_boundary_mask: 0x3fff,
        virt_boundary_mask: 4095,
        ..base()
    };
    let bios = [
        // One segment of 4 KiB at 0x10_0000.
        Bio::new(Op::Write, 0, 8).buffer(0x10_0000),
        // Contiguous, 4 + 4 KiB within 8 KiB and one 16 KiB window: joins, still one.
        Bio::new(Op::Write, 8, 8).buffer(0x10_1000),
        // Contiguous but the joined segment would pass 8 KiB: a second segment, on a
        // page boundary, so no gap.
        Bio::new(Op::Write, 16, 2).buffer(0x10_2000),
        // Ends the request's last segment off a page (0x10_2400): a bio that does not
        // continue it would leave a gap, so it starts a request of its own.
        Bio::new(Op::Write, 18, 8).buffer(0x20_0000),
        // Page-aligned on both sides: the new request's second segment.
        Bio::new(Op::Write, 26, 8).buffer(0x30_0000),
        // No gap either, but a third segment is one too many.
        Bio::new(Op::Write, 34, 8).buffer(0x40_0000),
    ];
    assert_eq!(
        serve(limits, &bios, true),
        [
            served(0, 18, 2, 3),
            served(18, 16, 2, 2),
            served(34, 8, 1, 1)
        ]
    );
    ended();
}

#[test]
fn two_requests_merge_by_the_same_rules() {
    // ll_merge_requests_fn: the gap between the two (req_gap_back_merge on the second's
    // first bio) and their combined count, the touching ends joined when contiguous.
    let limits = QueueLimits {
        max_segments: 2,
        virt_boundary_mask: 4095,
        ..base()
    };
    let (host, queue) = queue(limits);
    let mut rqs = Vec::new();
    for bio in [
        Bio::new(Op::Write, 0, 8).buffer(0x10_0000),
        Bio::new(Op::Write, 8, 8).buffer(0x10_1000), // contiguous with the first
        Bio::new(Op::Write, 16, 2).buffer(0x20_0000),
        Bio::new(Op::Write, 18, 8).buffer(0x30_0000), // after one that ends off a page
    ] {
        queue.submit(bio).unwrap();
        rqs.extend(host.driver().take());
    }
    let io = |i: usize| queue.io(&rqs[i]).unwrap();
    assert!(limits.can_append(io(0), io(1))); // joined: one segment
    assert!(limits.can_append(io(1), io(2))); // two segments, page-aligned
    assert!(!limits.can_append(io(2), io(3))); // a gap
    let tight = QueueLimits {
        max_segments: 1,
        ..limits
    };
    assert!(tight.can_append(io(0), io(1)));
    assert!(!tight.can_append(io(1), io(2)));
    for rq in rqs {
        queue.end_request(rq, Status::Ok).unwrap();
    }
}

#[test]
fn a_table_too_fine_for_one_block_fails() {
    // bio_split_rw_at rounds the split down to the logical block; a table whose segments
    // cannot make one block within the limits cannot be served at all.
    let limits = QueueLimits {
        logical_block_size: 4096,
        max_segments: 4,
        ..base()
    };
    let bio = Bio::new(Op::Write, 0, 8).segments(spread(0x10_0000, 8, 512, 0x1000));
    assert_eq!(limits.split_len(&bio), 0);
    assert!(serve(limits, &[bio], false).is_empty());
    assert_eq!(ended(), [(0, Status::Invalid)]);
    // The same after a first piece went in: the parent ends with the error.
    let bio = Bio::new(Op::Write, 0, 16).segments(table(&[
        (0x10_0000, 4096),
        (0x20_0000, 512),
        (0x21_0000, 512),
        (0x22_0000, 512),
        (0x23_0000, 512),
        (0x24_0000, 512),
        (0x25_0000, 512),
        (0x26_0000, 512),
        (0x27_0000, 512),
    ]));
    assert_eq!(serve(limits, &[bio], false), [served(0, 8, 1, 1)]);
    assert_eq!(ended(), [(0, Status::Invalid)]);
}

#[test]
fn discard_segments_are_validated() {
    // max_discard_segments: at least one range per request.
    let bad = QueueLimits {
        max_discard_segments: 0,
        ..base()
    };
    assert_eq!(
        bad.validate(),
        Err(blkmq_core::ConfigError::BadLimits {
            what: "max_discard_segments"
        })
    );
    for (what, bad) in [
        (
            "dma_alignment",
            QueueLimits {
                dma_alignment: 1000,
                ..base()
            },
        ),
        (
            "dma_alignment",
            QueueLimits {
                dma_alignment: 8191,
                ..base()
            },
        ),
        (
            "virt_boundary_mask",
            QueueLimits {
                virt_boundary_mask: 255,
                ..base()
            },
        ),
        (
            "virt_boundary_mask",
            QueueLimits {
                virt_boundary_mask: (1 << 33) - 1,
                ..base()
            },
        ),
    ] {
        assert_eq!(
            bad.validate(),
            Err(blkmq_core::ConfigError::BadLimits { what })
        );
    }
    // Adjacent discards still merge into one range.
    let limits = QueueLimits {
        max_discard_sectors: 1024,
        max_discard_segments: 4,
        ..base()
    };
    let rqs = serve(
        limits,
        &[Bio::new(Op::Discard, 0, 8), Bio::new(Op::Discard, 8, 8)],
        true,
    );
    assert_eq!(rqs, [served(0, 16, 0, 2)]);
    ended();
}

// ----- the model -----

/// Every device segment of `segs` (a piece's segments), cut as the limits cut them.
fn device_segments(limits: &QueueLimits, segs: &[Segment]) -> usize {
    let mut sg = vec![Segment::default(); 4096];
    limits.map_segments(segs.iter().copied(), &mut sg).unwrap()
}

fn arb_table() -> impl Strategy<Value = Vec<(u64, u32)>> {
    // Segments of 512-byte multiples (some contiguous with the one before), at
    // 512-aligned addresses; the whole a multiple of 4 KiB.
    prop::collection::vec((0u64..64, 1u32..24, any::<bool>()), 1..24).prop_map(|raw| {
        let mut out: Vec<(u64, u32)> = Vec::new();
        let mut next = 0x100_0000u64;
        for (page, sectors, contiguous) in raw {
            let addr = if contiguous {
                next
            } else {
                0x100_0000 + page * 0x1_0000 + u64::from(sectors % 8) * 512
            };
            out.push((addr, sectors * 512));
            next = addr + u64::from(sectors) * 512;
        }
        let total: u64 = out.iter().map(|&(_, l)| u64::from(l)).sum();
        let pad = (4096 - total % 4096) % 4096;
        if pad != 0 {
            out.push((0x900_0000, pad as u32));
        }
        out
    })
}

proptest! {
    /// For random tables and limits, every piece of a split obeys every limit, the pieces
    /// tile the bio's bytes exactly, and none is empty.
    #[test]
    fn split_pieces_obey_every_limit(
        segs in arb_table(),
        max_segments in 1u32..8,
        segment_kib in 4u32..20,
        boundary_shift in 12u32..17,
        virt in any::<bool>(),
        block_shift in 0u32..4,
        max_sectors_blocks in 1u32..64,
    ) {
        let block = 512u32 << block_shift;
        let limits = QueueLimits {
            max_segments,
            max_segment_size: segment_kib * 1024,
            seg_boundary_mask: (1u64 << boundary_shift) - 1,
            virt_boundary_mask: if virt { 4095 } else { 0 },
            logical_block_size: block,
            max_sectors: (max_sectors_blocks * (block / 512)).max(8),
            ..base()
        };
        prop_assume!(limits.validate().is_ok());
        let table = table(&segs);
        let bytes: u64 = table.iter().map(|s| u64::from(s.len)).sum();
        let bio = Bio::new(Op::Write, 0, (bytes / 512) as u32).segments(table);
        prop_assert_eq!(limits.check(&bio), None);
        let mut rest = bio;
        let mut tiled = Vec::new();
        loop {
            let len = limits.split_len(&rest);
            if len == 0 {
                // Not one block fits: the rest must indeed need more than the limits give
                // for one block.
                let one = Bio::new(rest.op, rest.sector, block / 512)
                    .segments(advance_table(rest, block / 512));
                let segs: Vec<Segment> = one.segs().collect();
                let gap = segs.windows(2).any(|w| {
                    limits.virt_boundary_mask != 0
                        && w[0].end() != w[1].addr
                        && (w[0].end() | w[1].addr) & 4095 != 0
                });
                prop_assert!(
                    gap || device_segments(&limits, &segs) > max_segments as usize,
                    "stuck on {:?}", segs
                );
                break;
            }
            prop_assert!(len <= rest.sectors);
            prop_assert_eq!(len % (block / 512), 0);
            prop_assert!(len <= limits.max_sectors);
            let piece = Bio::new(rest.op, rest.sector, len).segments(advance_table(rest, len));
            let segs: Vec<Segment> = piece.segs().collect();
            prop_assert!(limits.bio_segments(&piece) <= max_segments);
            prop_assert!(device_segments(&limits, &segs) <= max_segments as usize);
            prop_assert!(segs.iter().all(|s| (s.addr | u64::from(s.len)) & 511 == 0));
            if limits.virt_boundary_mask != 0 {
                for w in segs.windows(2) {
                    prop_assert!(
                        w[0].end() == w[1].addr || (w[0].end() | w[1].addr) & 4095 == 0,
                        "gap between {:?}", w
                    );
                }
            }
            tiled.extend(segs);
            if len == rest.sectors {
                break;
            }
            rest = advance(rest, len);
        }
        // Tiled exactly: the pieces' bytes, in order, are the bio's (up to where it stuck).
        let whole: Vec<Segment> = bio.segs().collect();
        let flat = |s: &[Segment]| -> Vec<u64> {
            s.iter().flat_map(|s| (0..u64::from(s.len) / 512).map(move |i| s.addr + i * 512)).collect()
        };
        let (got, want) = (flat(&tiled), flat(&whole));
        prop_assert!(got.len() <= want.len());
        prop_assert_eq!(&want[..got.len()], &got[..]);
        if limits.split_len(&rest) != 0 {
            prop_assert_eq!(got.len(), want.len());
        }
    }

    /// The count of a bio's segments is what mapping them takes.
    #[test]
    fn bio_segments_is_the_mapping(
        segs in arb_table(),
        segment_kib in 4u32..20,
        boundary_shift in 12u32..17,
    ) {
        let limits = QueueLimits {
            max_segment_size: segment_kib * 1024,
            seg_boundary_mask: (1u64 << boundary_shift) - 1,
            ..base()
        };
        let table = table(&segs);
        let bytes: u64 = table.iter().map(|s| u64::from(s.len)).sum();
        let bio = Bio::new(Op::Write, 0, (bytes / 512) as u32).segments(table);
        prop_assert_eq!(limits.bio_segments(&bio) as usize, device_segments(&limits, table));
    }

    /// Merged requests count no fewer segments than their mapping takes, and no more than
    /// max_segments; each bio ends once.
    #[test]
    fn merged_requests_map_within_their_count(
        bios in prop::collection::vec((1u32..9, 0u64..4, 0u32..8, any::<bool>()), 1..12),
        max_segments in 1u32..6,
        virt in any::<bool>(),
    ) {
        let limits = QueueLimits {
            max_segments,
            max_segment_size: 8192,
            seg_boundary_mask: 0x3fff,
            virt_boundary_mask: if virt { 4095 } else { 0 },
            ..base()
        };
        let mut sector = 0;
        let mut next_addr = 0x100_0000u64;
        let mut list = Vec::new();
        for (sectors, kind, offset, contiguous) in bios {
            let addr = if contiguous { next_addr } else { 0x200_0000 + u64::from(offset) * 0x1200 };
            let bio = Bio::new(Op::Write, sector, sectors);
            let bio = match kind {
                0 => bio,
                1 => bio.buffer(addr),
                _ => bio.segments(table(&[(addr, 512), (addr + 0x1_0000, (sectors - 1) * 512)][..if sectors > 1 { 2 } else { 1 }])),
            };
            next_addr = if kind == 1 { addr + u64::from(sectors) * 512 } else { next_addr };
            sector += u64::from(sectors);
            list.push(bio);
        }
        // serve() checks the mapping and the count for every request.
        let rqs = serve(limits, &list, true);
        let total: u64 = rqs.iter().map(|r| r.sectors).sum();
        prop_assert_eq!(total, sector);
        let mut ends = ended();
        ends.sort_by_key(|&(i, _)| i);
        prop_assert_eq!(ends, (0..list.len() as u64).map(|i| (i, Status::Ok)).collect::<Vec<_>>());
    }
}

/// The table of `bio` from its start, cut to `sectors`.
fn advance_table(bio: Bio, sectors: u32) -> &'static [Segment] {
    let mut left = u64::from(sectors) * 512;
    let mut out = Vec::new();
    for seg in bio.segs() {
        if left == 0 {
            break;
        }
        let len = u64::from(seg.len).min(left);
        out.push((seg.addr, len as u32));
        left -= len;
    }
    table(&out)
}
