//! Every merge rule: which bios and requests may merge, at the back or the front, in a
//! plug, a software queue or through an elevator (Linux's `blk-merge.c`).

use crate::bio::Bio;
use crate::elevator::ElvCx;
use crate::limits::QueueLimits;
use crate::platform::Platform;
use crate::queue_tags::QueueTags;
use crate::request::Rq;

/// Merges `bio` into `rq` if the limits allow; true when it did.
pub(crate) fn merge_into<T, P: Platform>(
    tags: &QueueTags<T, P>,
    limits: &QueueLimits,
    rq: &mut Rq,
    bio: &Bio,
) -> bool {
    // Most attempts fail on position or kind, decided here in a few steps; the elevator's
    // merge, whose back end is a trait object, is the one merge that does it: the same
    // checks, the same segment count.
    if !tags
        .io(rq)
        .is_ok_and(|io| limits.merge_kind(io, bio).is_some())
    {
        return false;
    }
    ElvCx::new(tags, limits, 0).merge_bio(rq, *bio).is_ok()
}
