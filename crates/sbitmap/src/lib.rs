//! A lock-free scalable bitmap and an OS-free waiting queue over it.
//!
//! This is the allocator under a multi-queue block layer's tags: many CPUs allocate and free
//! bits (tags) at once, and callers that find every tag in use wait until one is freed. The
//! semantics follow Linux's `lib/sbitmap.c`:
//!
//! * [`Sbitmap`] spreads its bits over cache-line-sized words, starts each CPU on its own
//!   word through a caller-owned [`AllocHint`], and defers frees so that a free does not
//!   touch the line allocators contend on. It also offers shallow (depth-capped) gets, batch
//!   gets and puts, resizing without reallocation, and iteration over allocated bits.
//! * [`SbitmapQueue`] adds waiting: eight wait queues of [`core::task::Waker`]s woken in
//!   batches by frees, with no lost wake-up under any interleaving (checked with loom).
//!   Waiting works from any `no_std` executor ([`SbitmapQueue::get_async`],
//!   [`Waiter::poll_get`]); with `std`, [`SbitmapQueue::get_blocking`] parks the thread.
//!
//! Misuse — a double put, an out-of-range bit, a zero depth, a shallow depth below the
//! declared minimum — is returned as an [`SbitmapError`] before anything changes, in release
//! builds as in debug ones.
//!
//! ```
//! use blkmq_sbitmap::{AllocHint, SbitmapQueue};
//!
//! let tags: SbitmapQueue = SbitmapQueue::new(128).unwrap();
//! let hint = AllocHint::new(0); // one per CPU in real use
//! let tag = tags.get(&hint).expect("a free tag");
//! // ... the request with this tag is in flight ...
//! tags.put(tag, &hint).unwrap();
//! ```
//!
//! # Features
//! * `std` (default): [`SbitmapQueue::get_blocking`]. Everything else is `no_std` + `alloc`;
//!   memory is allocated when a bitmap is created, never per get or put.

#![no_std]
#![deny(unsafe_code)]

extern crate alloc;

mod error;
mod hint;
mod map;
#[cfg(all(feature = "std", not(loom)))]
mod park;
mod queue;
mod sync;

pub use error::SbitmapError;
pub use hint::AllocHint;
pub use map::{BitBatch, MAX_DEPTH, Sbitmap, SbitmapBuilder, SbitmapDump};
#[cfg(all(feature = "std", not(loom)))]
pub use park::block_on;
pub use queue::{
    DefaultRawMutex, GetFuture, MAX_WAKE_BATCH, QueueDump, SbitmapQueue, WAIT_QUEUES, Waiter,
};
