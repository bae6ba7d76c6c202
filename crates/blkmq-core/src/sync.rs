//! The one place that knows about loom.
//!
//! The tag layer takes its atomics from here, so the same code runs on hardware and under
//! `RUSTFLAGS="--cfg loom"`. Its one Dekker pair (a waiter over its fair share against a
//! freer) is fenced inside the bitmap's wait queue, which this layer waits on.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
