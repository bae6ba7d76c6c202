//! Allocation-free orders over request keys, and the merge sequence, shared by the I/O
//! schedulers of blkmq (what Linux's `elv_rb_*` and `elv_rqhash_*` helpers and
//! `blk_mq_sched_try_merge` give every elevator).
//!
//! An elevator holds its requests in an array indexed by [key](blkmq_core::ElvCx::key).
//! These structures order those keys without allocating per request: each is a set of
//! arrays made once for all keys, linking keys by index.
//!
//! * [`SectorForest`]: sector-sorted search trees (treaps), one per queue of the scheduler
//!   (a class and direction for mq-deadline, a process queue for BFQ);
//! * [`KeyLists`]: doubly linked lists (FIFOs, dispatch lists);
//! * [`EndHash`]: keys by the sector their request ends at, to find back merges;
//! * [`SortedRequests`]: the requests themselves, by key, in a [`SectorForest`] and an
//!   [`EndHash`], with the merge operations over them;
//! * [`bio_merge`]: Linux's merge of a bio into a held request, then of that request with
//!   its neighbour, run over an elevator's [`HeldRequests`] and its merge hooks.
//!
//! A key is in at most one tree and one list at a time, so all trees share one set of node
//! arrays, and all lists another. Trees and lists may be added later ([`SectorForest::add_tree`],
//! [`KeyLists::add_list`]): that allocates, so it belongs where a scheduler creates a queue,
//! not where it handles a request.
//!
//! ```
//! use blkmq_sched_index::{EndHash, KeyLists, SectorForest};
//!
//! // Two queues over 8 request keys.
//! let mut sorted = SectorForest::new(2, 8);
//! let mut fifo = KeyLists::new(2, 8);
//! let mut ends = EndHash::new(8);
//! for (key, sector) in [(3, 800), (5, 0), (6, 64)] {
//!     sorted.insert(0, key, sector);
//!     fifo.push_back(0, key);
//!     ends.insert(key, sector + 8);
//! }
//! assert_eq!(sorted.lower_bound(0, 1), Some(6)); // the first at or after sector 1
//! assert_eq!(fifo.front(0), Some(3)); // the oldest
//! assert_eq!(ends.find(8, |_| true), Some(5)); // a bio at sector 8 merges behind key 5
//! ```

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

mod end_hash;
mod forest;
mod lists;
mod merge;
mod sorted;
#[cfg(test)]
mod tests;

pub use end_hash::EndHash;
pub use forest::SectorForest;
pub use lists::KeyLists;
pub use merge::{HeldRequests, bio_merge};
pub use sorted::SortedRequests;

/// No node: the link value meaning "none" in the arrays.
const NIL: u32 = u32::MAX;
