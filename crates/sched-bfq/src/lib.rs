//! BFQ for blkmq: budget fair queueing over B-WF2Q+ (Linux's `block/bfq-iosched.c`).

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod wf2q;
