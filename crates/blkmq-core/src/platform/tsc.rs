//! The time-stamp counter as [`StdPlatform`](super::StdPlatform)'s trace clock, on x86-64
//! Linux.
//!
//! A precise `CLOCK_MONOTONIC` read goes through the vDSO (a sequence lock, a fenced
//! counter read, a conversion): 20 to 50 ns on a virtual machine, several times per I/O
//! when tracing. A bare `rdtsc` reads the same counter the kernel keeps time with for a
//! fraction of that. It is used only when it is a clock: the processor says the counter
//! is invariant (it runs at one rate in every power state, CPUID leaf `0x8000_0007`) and
//! the kernel's clock source is `tsc` (it found the counters in step across CPUs, or it
//! would have chosen another). Otherwise the trace clock is the precise clock.
//!
//! Its rate is measured once per process, against `CLOCK_MONOTONIC` over
//! [`CALIBRATION_NS`], each end of the interval the tightest of a few bracketed reads: an
//! error of a few parts in 10^5 against the monotonic clock, nothing next to the
//! latencies a trace measures, and the scale never changes afterwards, so the clock never
//! goes back on one CPU.
//!
//! No fence is paid: `rdtsc` does not wait for the instructions before it, so a reading may
//! be taken a few dozen cycles early. The trace readings of one thread are hundreds of
//! instructions apart (a submission, a completion), with locked operations between them,
//! far more than that.

extern crate std;

use std::sync::OnceLock;

/// How long the one calibration of the counter's rate spins: 2 ms.
const CALIBRATION_NS: u64 = 2_000_000;

/// Nanoseconds per counter tick, fixed point with 32 fractional bits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scale(u64);

impl Scale {
    /// `ticks` in nanoseconds.
    #[inline]
    pub(super) fn ns(self, ticks: u64) -> u64 {
        // A product of two 64-bit numbers fits 128 bits; shifted back it fits 64 for 2^32
        // times the counter's period (a century at 1 GHz and more).
        ((u128::from(ticks) * u128::from(self.0)) >> 32) as u64
    }
}

/// The counter now.
#[inline]
pub(super) fn ticks() -> u64 {
    // SAFETY: `rdtsc` reads a register; every x86-64 processor has it, and Linux lets user
    // space run it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The counter's scale, measured on the first call (`mono` reads `CLOCK_MONOTONIC`), or
/// `None` when the counter is not to be trusted as a clock.
#[inline]
pub(super) fn scale(mono: impl Fn() -> Option<u64>) -> Option<Scale> {
    static SCALE: OnceLock<Option<Scale>> = OnceLock::new();
    *SCALE.get_or_init(|| calibrate(mono))
}

/// Whether the counter is invariant and the kernel keeps time with it.
fn trusted() -> bool {
    // SAFETY: `cpuid` only reads; leaf 0x8000_0000, defined on every x86-64 processor,
    // says how far the extended leaves go. (A safe function from Rust 1.87 on.)
    #[allow(unused_unsafe)]
    let top = unsafe { core::arch::x86_64::__cpuid(0x8000_0000) }.eax;
    if top < 0x8000_0007 {
        return false;
    }
    // SAFETY: as above, for a leaf the processor said it has.
    #[allow(unused_unsafe)]
    let invariant = unsafe { core::arch::x86_64::__cpuid(0x8000_0007) }.edx & (1 << 8) != 0;
    invariant
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

/// A reading of the counter and of `mono` at about one instant: the tightest bracket of a
/// few tries, the counter at its middle.
fn pair(mono: &impl Fn() -> Option<u64>) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64, u64)> = None;
    for _ in 0..8 {
        let before = ticks();
        let ns = mono()?;
        let width = ticks().wrapping_sub(before);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, ns));
        }
    }
    best.map(|(_, ticks, ns)| (ticks, ns))
}

/// Measures the counter's rate against `mono`.
fn calibrate(mono: impl Fn() -> Option<u64>) -> Option<Scale> {
    if !trusted() {
        return None;
    }
    let (t0, n0) = pair(&mono)?;
    while mono()?.saturating_sub(n0) < CALIBRATION_NS {
        core::hint::spin_loop();
    }
    let (t1, n1) = pair(&mono)?;
    let (ticks, ns) = (t1.checked_sub(t0)?, n1.checked_sub(n0)?);
    if ticks == 0 {
        return None;
    }
    let scale = (u128::from(ns) << 32) / u128::from(ticks);
    u64::try_from(scale).ok().filter(|&s| s > 0).map(Scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_converts_in_fixed_point() {
        assert_eq!(Scale(1 << 32).ns(12_345), 12_345);
        assert_eq!(Scale(1 << 31).ns(1_000), 500);
        assert_eq!(
            Scale(3 << 32).ns(u64::from(u32::MAX)),
            3 * u64::from(u32::MAX)
        );
    }
}
