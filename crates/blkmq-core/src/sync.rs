//! The one place that knows about loom.
//!
//! The tag layer takes its atomics from here, so the same code runs on hardware and under
//! `RUSTFLAGS="--cfg loom"`. The fair-share wait's Dekker pair (a waiter over its share
//! against a freer) is fenced inside the bitmap's wait queue, which this layer waits on; the
//! restart protocol's is fenced here (`seqcst_pair`).

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

/// Orders a preceding sequentially consistent access before a following one, as loom needs.
///
/// The restart protocol is Dekker's pattern (see the `restart` module): every access in it
/// is `SeqCst`, which forbids both sides missing each other. Loom models `SeqCst` accesses
/// as acquire/release only, but `SeqCst` fences exactly, so under loom this is a fence; on
/// hardware it is nothing, the accesses already being `SeqCst`.
#[inline(always)]
pub(crate) fn seqcst_pair() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// The light side of an asymmetric fence, whose heavy side is
/// [`Platform::fence_all`](crate::Platform::fence_all): on hardware only the compiler is
/// kept from moving accesses across it (the heavy side makes every other thread pass a
/// full barrier wherever it stands); under loom, which cannot interrupt a thread with a
/// barrier, a `SeqCst` fence, paired with the one the model platforms' `fence_all` makes.
#[inline(always)]
pub(crate) fn asymmetric_light() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// One turn of a short wait for another thread: a spin hint on hardware, a yield under loom
/// (whose scheduler must see the waiter give way).
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
