//! Blocking on a future by parking the thread (`std` only).

extern crate std;

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};
use std::sync::Arc;
use std::task::Wake;
use std::thread::{self, Thread};

struct Unparker(Thread);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

std::thread_local! {
    /// One waker per thread, made on its first wait: blocking again allocates nothing.
    static WAKER: Waker = Waker::from(Arc::new(Unparker(thread::current())));
}

/// Runs `future` to completion on the calling thread, parking it between polls (`std` only).
///
/// The waker is made once per thread, so blocking allocates nothing after a thread's first
/// wait. A spurious unpark only costs a poll. The layers above use it for their blocking
/// allocations.
///
/// ```
/// let answer = blkmq_sbitmap::block_on(async { 42 });
/// assert_eq!(answer, 42);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    WAKER.with(|waker| {
        let mut cx = Context::from_waker(waker);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            thread::park();
        }
    })
}
