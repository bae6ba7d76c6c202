//! A `#![no_std]` static library that uses every crate with default features off.
//!
//! It defines its own panic handler and global allocator; if anything in the dependency graph
//! links `std`, std's `panic_impl` lang item collides with ours and the build fails.

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::panic::PanicInfo;
use core::ptr;

use blkmq_sbitmap::{AllocHint, Sbitmap, SbitmapQueue};

/// An allocator that never has memory: enough to link, and this library never runs.
struct NoMemory;

// SAFETY: returning null is always a valid answer to an allocation request, and `dealloc` is
// only ever called with pointers this allocator returned, of which there are none.
unsafe impl GlobalAlloc for NoMemory {
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        ptr::null_mut()
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOCATOR: NoMemory = NoMemory;

#[panic_handler]
fn panic(_info: &PanicInfo<'_>) -> ! {
    loop {}
}

/// Allocates and frees one bit of a fresh bitmap; returns the bit, or -1.
#[unsafe(no_mangle)]
pub extern "C" fn blkmq_no_std_sbitmap(depth: usize) -> isize {
    let Ok(map) = Sbitmap::new(depth) else {
        return -1;
    };
    let hint = AllocHint::new(0);
    match map.get(&hint) {
        Some(bit) if map.put(bit, &hint).is_ok() => bit as isize,
        _ => -1,
    }
}

/// The same through the waiting queue, polled once with a no-op waker.
#[unsafe(no_mangle)]
pub extern "C" fn blkmq_no_std_sbitmap_queue(depth: usize) -> isize {
    let Ok(queue): Result<SbitmapQueue, _> = SbitmapQueue::new(depth) else {
        return -1;
    };
    let hint = AllocHint::new(0);
    let mut waiter = queue.waiter(&hint);
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    match waiter.poll_get(&mut cx) {
        core::task::Poll::Ready(bit) => bit as isize,
        core::task::Poll::Pending => -1,
    }
}

/// The facade crate links too.
#[unsafe(no_mangle)]
pub extern "C" fn blkmq_no_std_facade() -> usize {
    blkmq::sbitmap::WAIT_QUEUES
}

/// So do both schedulers: each made, told its depth, and asked for work.
#[unsafe(no_mangle)]
pub extern "C" fn blkmq_no_std_schedulers(nr_requests: usize) -> usize {
    use blkmq::Elevator;
    let mut deadline = blkmq::deadline::Deadline::new();
    deadline.depth_updated(nr_requests, nr_requests);
    let mut bfq = blkmq::bfq::Bfq::new();
    bfq.depth_updated(nr_requests, nr_requests);
    usize::from(deadline.has_work(0)) + usize::from(bfq.has_work(0)) + bfq.queued()
}

/// A platform with one CPU and no clock, as a bare-metal integrator might start.
struct OneCpu;

impl blkmq_core::Platform for OneCpu {
    type RawMutex = spin::mutex::SpinMutex<()>;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        0
    }

    fn kick(&self, _hctx: usize) {}
}

/// Builds a shared-host-tags set, allocates and completes one request; returns its tag, or -1.
#[unsafe(no_mangle)]
pub extern "C" fn blkmq_no_std_tag_set(depth: usize, hw_queues: usize) -> isize {
    use blkmq_core::{Alloc, Bio, Op, Status, TagSet, TagSetFlags};

    let Ok(set) = TagSet::builder(depth)
        .hw_queues(hw_queues)
        .flags(TagSetFlags::SHARED_HOST_TAGS)
        .build(OneCpu, |init| init.tag)
    else {
        return -1;
    };
    let Ok(queue) = set.attach() else {
        return -1;
    };
    let Ok(mut rq) = queue.alloc(&Alloc::new(0, 0)) else {
        return -1;
    };
    let tag = rq.tag() as isize;
    if queue.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).is_err() {
        return -1;
    }
    match queue.complete(rq, Status::Ok) {
        Ok(()) => tag,
        Err(_) => -1,
    }
}
