//! The null driver the request-queue benches share.

use blkmq_core::{Driver, HctxCx, Rejected, RequestInit, Rq, Status, StdPlatform};

/// A driver that ends each request inside `queue_rq`.
pub(crate) struct Inline;

impl Driver for Inline {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        cx.queue().end_request(rq, Status::Ok).unwrap();
        Ok(())
    }
}
