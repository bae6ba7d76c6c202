//! Operation-sequence models of blkmq's crates: the test support that the model tests, the
//! corpus replay of the fuzz seeds and the cargo-fuzz targets share.
//!
//! Each module builds the real thing from a [`Config`](tagset::Config)-like description, runs
//! a sequence of ops against it single-threaded, and checks every documented promise against a
//! reference model after every op (and after a final drain). Every field of a config or an op
//! is reduced into a meaningful range rather than rejected, so any input a fuzzer makes up (all
//! of them derive [`arbitrary::Arbitrary`]) is a valid test: a panic or a failure is a bug.
//!
//! * [`sbitmap`]: an `Sbitmap` or `SbitmapQueue` (with waiters) of `blkmq-sbitmap`;
//! * [`tagset`]: a `TagSet` of `blkmq-core` and the request queues' `QueueTags` on it, with
//!   the deterministic [`TestPlatform`](tagset::TestPlatform);
//! * [`queue`]: a `Host` and its `RequestQueue`s over a scripted driver;
//! * [`elv`]: the request queue's side of an elevator, which the schedulers' models drive;
//! * [`deadline`]: mq-deadline (`blkmq-sched-deadline`) over the [`elv`] harness;
//! * [`bfq`]: BFQ (`blkmq-sched-bfq`) over the [`elv`] harness;
//! * [`data`]: the data path byte for byte, through no elevator, mq-deadline and BFQ, to a
//!   RAM disk that moves every byte through the requests' segments.
//!
//! The crate is not published: the library crates carry no test support, and everything here
//! reaches them through their public API only.
//!
//! ```
//! use blkmq_model::sbitmap::{Config, Op, run};
//!
//! let config = Config { depth: 4, shift: None, round_robin: false, queue: None };
//! run(&config, &[Op::Get { hint: 0 }, Op::Put { index: 0, hint: 0 }]).unwrap();
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
// Only `data` lends the queue segment tables it owns (`Bio::segments_raw`).
#![deny(unsafe_code)]

extern crate alloc;

/// Returns `Err(message)` from the enclosing function unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

pub mod bfq;
pub mod data;
pub mod deadline;
pub mod elv;
pub mod queue;
pub mod sbitmap;
pub mod tagset;
