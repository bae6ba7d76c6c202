//! blkmq: a `no_std` multi-queue block layer core.
//!
//! This facade re-exports the workspace's crates:
//!
//! * [`sbitmap`] — the lock-free scalable bitmap and its waiting queue, the allocator under
//!   every tag set.
//! * everything of `blkmq-core` at the top level — the [`Platform`], [`Bio`]s, [`Request`]s
//!   and [`TagSet`]s (per hardware queue or shared host tags), the request queue, the
//!   [`Driver`] and [`Elevator`] traits.
//! * [`sched_index`] — the sector trees, FIFO lists, end hash and merge sequence the
//!   schedulers share, for writing another.
//! * `deadline` (feature `deadline`, on by default) — mq-deadline.
//! * `bfq` (feature `bfq`, on by default) — BFQ.
//!
//! ```
//! use blkmq::sbitmap::{AllocHint, Sbitmap};
//!
//! let map = Sbitmap::new(64).unwrap();
//! let bit = map.get(&AllocHint::new(0)).unwrap();
//! assert!(bit < 64);
//! ```
//!
//! ```
//! # #[cfg(all(feature = "deadline", feature = "bfq"))] {
//! use blkmq::Elevator;
//! let schedulers: [Box<dyn Elevator>; 2] =
//!     [Box::new(blkmq::deadline::Deadline::new()), Box::new(blkmq::bfq::Bfq::new())];
//! assert_eq!(schedulers.map(|e| e.name()), ["mq-deadline", "bfq"]);
//! # }
//! ```

#![no_std]

pub use blkmq_core::*;
pub use blkmq_sbitmap as sbitmap;
#[cfg(feature = "bfq")]
pub use blkmq_sched_bfq as bfq;
#[cfg(feature = "deadline")]
pub use blkmq_sched_deadline as deadline;
pub use blkmq_sched_index as sched_index;
