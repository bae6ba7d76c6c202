//! The device's peak rate, estimated from dispatches (Linux's `bfq_update_peak_rate`).
//!
//! Dispatch times are known exactly; service times inside the device are not. Over an
//! observation interval long enough (at least [`MIN_INTERVAL_NS`], closed at the latest
//! after [`REF_INTERVAL_NS`]), the sectors dispatched divided by the interval converge to the
//! rate the device serves them at, since its queues are bounded. A new sample is smoothed
//! into the estimate with a weight growing with the share of sequential dispatches and the
//! interval's length; an interval with few sequential dispatches only counts when it shows
//! a higher rate than an estimate already made.

use crate::tunables::MS;

/// Dispatches an interval needs before it yields a rate.
const MIN_SAMPLES: u32 = 32;
/// The shortest interval that yields a rate.
pub(crate) const MIN_INTERVAL_NS: u64 = 300 * MS;
/// The interval after which a rate is computed and a new interval starts.
pub(crate) const REF_INTERVAL_NS: u64 = 1_000 * MS;
/// A gap between dispatches with nothing in flight that closes an interval.
const IDLE_GAP_NS: u64 = 100 * MS;
/// A dispatch this soon after a completion, with nothing in flight, still counts as
/// continuing a stream (Linux's `BFQ_MIN_TT`).
const STREAM_GAP_NS: u64 = 2 * MS;
/// A dispatch this close to the previous one's end is sequential (sectors).
pub(crate) const SEEK_THRESHOLD: u64 = 8 * 1024;
/// Rates above this are measurement errors (20 sectors per microsecond).
const MAX_RATE: u64 = 20_000_000;

/// The estimator's state.
#[derive(Clone, Debug, Default)]
pub(crate) struct PeakRate {
    /// Sectors per second; 0 until a first interval yields a rate.
    pub(crate) rate: u64,
    samples: u32,
    sequential: u32,
    sectors: u64,
    first_dispatch: u64,
    last_dispatch: u64,
    pub(crate) last_completion: u64,
    last_position: u64,
    delta: u64,
}

impl PeakRate {
    /// Notes a dispatch of `sectors` at `sector` at `now`, `in_flight` requests being in
    /// the device before it. Returns true when the estimate changed.
    #[inline]
    pub(crate) fn dispatched(
        &mut self,
        sector: u64,
        sectors: u64,
        now: u64,
        in_flight: usize,
    ) -> bool {
        let mut changed = false;
        if self.samples == 0 {
            self.restart(sectors, now);
        } else if now.saturating_sub(self.last_dispatch) > IDLE_GAP_NS && in_flight == 0 {
            changed = self.close(sectors, now);
        } else {
            self.samples += 1;
            let streaming =
                in_flight > 0 || now.saturating_sub(self.last_completion) < STREAM_GAP_NS;
            if streaming && self.last_position.abs_diff(sector) < SEEK_THRESHOLD {
                self.sequential += 1;
            }
            self.sectors += sectors;
            self.delta = now - self.first_dispatch;
            if self.delta >= REF_INTERVAL_NS {
                changed = self.close(sectors, now);
            }
        }
        self.last_position = sector + sectors;
        self.last_dispatch = now;
        changed
    }

    fn restart(&mut self, sectors: u64, now: u64) {
        self.first_dispatch = now;
        self.last_dispatch = now;
        self.samples = 1;
        self.sequential = 0;
        self.sectors = sectors;
        self.delta = 0;
    }

    /// Ends the interval, folding its rate into the estimate when it qualifies, and starts
    /// a new one with the dispatch of `sectors` at `now`. Once an interval, so kept out of
    /// the line of every dispatch.
    #[inline(never)]
    fn close(&mut self, sectors: u64, now: u64) -> bool {
        let mut changed = false;
        if self.samples >= MIN_SAMPLES && self.delta >= MIN_INTERVAL_NS {
            // A completion after the last dispatch extends the interval to it.
            let delta = self
                .delta
                .max(self.last_completion.saturating_sub(self.first_dispatch));
            let rate = (u128::from(self.sectors) * 1_000_000_000 / u128::from(delta)) as u64;
            let few_sequential = self.sequential < (3 * self.samples) / 4;
            // Mostly random I/O shows what the device does for it, not its peak: such an
            // interval only counts when it beats the estimate, and never makes the first.
            if !(few_sequential && (self.rate == 0 || rate <= self.rate)) && rate <= MAX_RATE {
                if self.rate == 0 {
                    self.rate = rate;
                } else {
                    let weight = (9 * self.sequential) / self.samples;
                    let weight = (u64::from(weight) * delta / REF_INTERVAL_NS).min(8);
                    let divisor = 10 - weight;
                    self.rate = self.rate * (divisor - 1) / divisor + rate / divisor;
                }
                self.rate = self.rate.max(1);
                changed = true;
            }
        }
        self.restart(sectors, now);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_stream_yields_its_rate() {
        let mut r = PeakRate::default();
        // 64 sectors every 100 us, back to back: 640_000 sectors/s. An interval of 1 s
        // counts the dispatches at both of its ends: 10_001 x 64 sectors.
        let mut changed = false;
        for i in 0..20_001u64 {
            changed |= r.dispatched(i * 64, 64, i * 100_000, 1);
        }
        assert!(changed);
        assert_eq!(r.rate, 640_064);
    }

    #[test]
    fn short_intervals_yield_nothing() {
        let mut r = PeakRate::default();
        for i in 0..10u64 {
            r.dispatched(i * 64, 64, i * 1_000_000, 1);
        }
        // A long pause with nothing in flight closes a too-short interval.
        assert!(!r.dispatched(0, 64, 500 * MS, 0));
        assert_eq!(r.rate, 0);
    }
}
