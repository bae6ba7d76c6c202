//! A counting allocator for the allocation tests: allocations made by the calling thread
//! while it counts, and where the first came from. Not shipped.
//!
//! Set `ALLOC_BACKTRACE=1` to have a failing check print where its first allocation came
//! from.

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::{Cell, RefCell};

struct Counting;

thread_local! {
    /// Allocations made by this thread while counting.
    static COUNT: Cell<usize> = const { Cell::new(0) };
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Where the first counted allocation came from, when asked for.
    static FIRST: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Whether to record it.
    static BACKTRACE: Cell<bool> = const { Cell::new(false) };
}

/// Whether to record a backtrace of the first counted allocation.
fn want_backtrace() -> bool {
    std::env::var_os("ALLOC_BACKTRACE").is_some()
}

// SAFETY: every call is forwarded to the system allocator unchanged; the bookkeeping touches
// `const`-initialised thread-locals, and the optional backtrace is taken with counting off, so
// its own allocations come back here only to be forwarded.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNTING.with(|c| c.set(false));
            let n = COUNT.with(|c| {
                c.set(c.get() + 1);
                c.get()
            });
            if n == 1 && BACKTRACE.with(Cell::get) {
                let trace = format!("{layout:?}\n{}", Backtrace::force_capture());
                FIRST.with(|f| *f.borrow_mut() = Some(trace));
            }
            COUNTING.with(|c| c.set(true));
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

/// Runs `f` and returns the allocations it made on this thread, and where the first came from
/// (with `ALLOC_BACKTRACE` set).
fn counted(f: impl FnOnce()) -> (usize, Option<String>) {
    BACKTRACE.with(|b| b.set(want_backtrace()));
    FIRST.with(|first| first.borrow_mut().take());
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    (
        COUNT.with(Cell::get),
        FIRST.with(|first| first.borrow_mut().take()),
    )
}

/// Checks that `f` allocates nothing on this thread; says where the first allocation came
/// from if it does.
pub(crate) fn assert_no_alloc(what: &str, f: impl FnOnce()) {
    let (count, first) = counted(f);
    assert!(
        count == 0,
        "{what}: {count} allocations{}",
        match first {
            Some(trace) => format!("; the first: {trace}"),
            None => String::from(" (ALLOC_BACKTRACE=1 says where)"),
        }
    );
}
