//! The one place that knows about loom.
//!
//! Everything else in the crate takes its atomics, its lock and its spin hint from here, so the
//! same code runs on real hardware and under `RUSTFLAGS="--cfg loom"`, where loom explores
//! every interleaving of the lock-free protocols.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Tells the processor (or loom's scheduler) that we are busy-waiting.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Orders a preceding sequentially consistent access before a following one, as loom needs.
///
/// The wake-up protocol of `SbitmapQueue` is Dekker's pattern: a freer sets its bit then reads
/// the waiter count, a waiter raises the count then re-reads the bitmap, and every one of
/// those accesses is `SeqCst`, which forbids both sides missing each other. Loom models
/// `SeqCst` accesses as acquire/release only (it would report that impossible outcome), but
/// models `SeqCst` fences exactly; so under loom this is a `SeqCst` fence between the two
/// accesses, and on real hardware it is nothing, because the accesses already are `SeqCst`
/// (an x86 locked RMW is a full barrier; a fence here would cost an `mfence` per free).
#[inline(always)]
pub(crate) fn seqcst_pair() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A mutual-exclusion lock over `T` whose raw lock is chosen by the integrator.
///
/// Outside loom this is `lock_api::Mutex<R, T>`. Under loom, `R` is ignored and loom's own
/// mutex is used, because a `lock_api::RawMutex` needs a `const` initialiser that loom's
/// atomics cannot provide.
pub(crate) struct Lock<R, T> {
    #[cfg(not(loom))]
    inner: lock_api::Mutex<R, T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(loom)]
    _raw: core::marker::PhantomData<R>,
}

#[cfg(not(loom))]
impl<R: lock_api::RawMutex, T> Lock<R, T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            inner: lock_api::Mutex::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> lock_api::MutexGuard<'_, R, T> {
        self.inner.lock()
    }
}

#[cfg(loom)]
impl<R: lock_api::RawMutex, T> Lock<R, T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            inner: loom::sync::Mutex::new(value),
            _raw: core::marker::PhantomData,
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.inner.lock().unwrap()
    }
}
