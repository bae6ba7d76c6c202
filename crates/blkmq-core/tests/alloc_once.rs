//! Shared host tags allocate one request array per tag set, however many hardware queues it
//! has; per-queue tags allocate one per hardware queue. Measured with a counting allocator.
//! And the steady state allocates nothing: allocating and freeing requests, merging bios and
//! completing them touch no heap.

#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use blkmq_core::{Alloc, Bio, Op, Request, Status, StdPlatform, TagSet, TagSetFlags};

struct Counting;

thread_local! {
    /// Allocations made by this thread while counting: (count, bytes, count of those of
    /// exactly `LARGE` bytes with the requests' alignment — one request array).
    static COUNTS: Cell<(usize, usize, usize)> = const { Cell::new((0, 0, 0)) };
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static LARGE: Cell<usize> = const { Cell::new(usize::MAX) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the bookkeeping only
// touches `const`-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            let large = LARGE.with(Cell::get);
            COUNTS.with(|c| {
                let (n, bytes, big) = c.get();
                c.set((
                    n + 1,
                    bytes + layout.size(),
                    big + usize::from(layout.size() == large && layout.align() == REQUEST_ALIGN),
                ));
            });
        }
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns the allocations it made on this thread.
fn counted<R>(large: usize, f: impl FnOnce() -> R) -> ((usize, usize, usize), R) {
    LARGE.with(|l| l.set(large));
    COUNTS.with(|c| c.set((0, 0, 0)));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (COUNTS.with(Cell::get), out)
}

const DEPTH: usize = 1024;

/// Requests are cache-line aligned; nothing else of that size in a tag set is.
const REQUEST_ALIGN: usize = std::mem::align_of::<Request<u64>>();

fn request_array_bytes() -> usize {
    DEPTH * std::mem::size_of::<Request<u64>>()
}

#[test]
fn shared_host_tags_allocate_the_request_array_once_per_set() {
    let platform = StdPlatform::with_cpus(4);
    let mut shared_bytes = Vec::new();
    for hw in [1, 8, 128] {
        let ((_, bytes, arrays), set) = counted(request_array_bytes(), || {
            TagSet::builder(DEPTH)
                .hw_queues(hw)
                .flags(TagSetFlags::SHARED_HOST_TAGS)
                .build(platform.clone(), |init| init.tag as u64)
                .unwrap()
        });
        assert_eq!(arrays, 1, "{hw} hardware queues: one request array");
        assert_eq!(set.nr_maps(), 1);
        shared_bytes.push(bytes);

        let ((_, per_bytes, per_arrays), _per) = counted(request_array_bytes(), || {
            TagSet::builder(DEPTH)
                .hw_queues(hw)
                .build(platform.clone(), |init| init.tag as u64)
                .unwrap()
        });
        assert_eq!(
            per_arrays, hw,
            "per-queue tags: one array per hardware queue"
        );
        assert!(per_bytes >= hw * request_array_bytes());
    }
    // Memory is O(depth): 128 hardware queues cost what one does.
    assert_eq!(shared_bytes[0], shared_bytes[2], "{shared_bytes:?}");
}

fn ignore(_: Bio, _: Status) {}

#[test]
fn the_steady_state_allocates_nothing() {
    let set = TagSet::builder(64)
        .hw_queues(4)
        .flags(TagSetFlags::SHARED_HOST_TAGS)
        .build(StdPlatform::with_cpus(2), |_| ())
        .unwrap();
    let mut queue = set.attach().unwrap();
    let other = set.attach().unwrap();
    let warm = other.alloc(&Alloc::new(0, 0)).unwrap();
    let ((count, _, _), ()) = counted(usize::MAX, || {
        for round in 0..1000u64 {
            let mut rq = queue.alloc(&Alloc::new((round % 4) as usize, 0)).unwrap();
            let bio = Bio::new(Op::Read, round * 16, 8).end_io(ignore);
            queue.set_bio(&mut rq, bio).unwrap();
            queue
                .append_bio(
                    &mut rq,
                    Bio::new(Op::Read, round * 16 + 8, 8).end_io(ignore),
                )
                .unwrap()
                .unwrap();
            queue.start(&mut rq, round).unwrap();
            queue.complete(rq, Status::Ok).unwrap();
        }
    });
    assert_eq!(count, 0, "allocations in the steady state");
    other.free(warm).unwrap();

    queue.attach_scheduler(None, |_| ()).unwrap();
    let ((count, _, _), ()) = counted(usize::MAX, || {
        for _ in 0..1000 {
            let mut rq = queue.alloc(&Alloc::new(1, 1)).unwrap();
            assert!(queue.get_driver_tag(&mut rq).unwrap());
            queue.free(rq).unwrap();
        }
    });
    assert_eq!(count, 0, "allocations with scheduler tags");
}
