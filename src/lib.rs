//! blkmq: a `no_std` multi-queue block layer core.
//!
//! This facade re-exports the workspace's crates:
//!
//! * [`sbitmap`] — the lock-free scalable bitmap and its waiting queue, the allocator under
//!   every tag set.
//! * everything of `blkmq-core` at the top level — the [`Platform`], [`Bio`]s, [`Request`]s
//!   and [`TagSet`]s (per hardware queue or shared host tags).
//!
//! ```
//! use blkmq::sbitmap::{AllocHint, Sbitmap};
//!
//! let map = Sbitmap::new(64).unwrap();
//! let bit = map.get(&AllocHint::new(0)).unwrap();
//! assert!(bit < 64);
//! ```

#![no_std]

pub use blkmq_core::*;
pub use blkmq_sbitmap as sbitmap;
