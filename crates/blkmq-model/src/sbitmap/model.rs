//! The reference model: the bits the caller holds, and what the documentation says a get
//! may return given them.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// How many freed bits the model remembers for double puts.
const FREED_MEMORY: usize = 16;

/// The reference model: which bits the caller holds, and the geometry.
pub(super) struct Model {
    pub(super) capacity: usize,
    pub(super) depth: usize,
    pub(super) shift: u32,
    pub(super) round_robin: bool,
    /// Bits the caller holds.
    pub(super) held: BTreeSet<usize>,
    /// Bits allocated at least once; the others are clear in their word for certain.
    pub(super) ever_held: BTreeSet<usize>,
    /// Recently freed bits, newest last, for double puts.
    pub(super) freed: Vec<usize>,
    /// Bits put since the last resize and not allocated since: their words may still show
    /// them as in use until a deferred clear, which round-robin order may step over.
    pub(super) maybe_pending: BTreeSet<usize>,
}

/// Which bits an allocation may return.
#[derive(Clone, Copy, Debug)]
pub(super) enum Region {
    /// Every bit below the depth.
    Full,
    /// A shallow get's shares of this many bits.
    Shallow(usize),
}

impl Model {
    pub(super) fn bits_per_word(&self) -> usize {
        1 << self.shift
    }

    pub(super) fn words_for(&self, depth: usize) -> usize {
        depth.div_ceil(self.bits_per_word())
    }

    pub(super) fn is_free(&self, bit: usize) -> bool {
        !self.held.contains(&bit)
    }

    /// A shallow cap at or above the depth is no cap.
    pub(super) fn effective(&self, region: Region) -> Region {
        match region {
            Region::Shallow(d) if d >= self.depth => Region::Full,
            r => r,
        }
    }

    /// How many low bits of word `index` a shallow get of `shallow` bits may use, from the
    /// documentation of `Sbitmap::get_shallow` and `shallow_window`: word `i` covering bits
    /// `[b, e)` gets `floor(e * d / depth) - floor(b * d / depth)`.
    pub(super) fn shallow_share(&self, index: usize, shallow: usize) -> usize {
        let b = (index * self.bits_per_word()) as u64;
        let e = (((index + 1) * self.bits_per_word()).min(self.depth)) as u64;
        let (depth, d) = (self.depth as u64, shallow as u64);
        (e * d / depth - b * d / depth) as usize
    }

    pub(super) fn allowed(&self, region: Region, bit: usize) -> bool {
        if bit >= self.depth {
            return false;
        }
        match self.effective(region) {
            Region::Full => true,
            Region::Shallow(d) => {
                let index = bit >> self.shift;
                bit - (index << self.shift) < self.shallow_share(index, d)
            }
        }
    }

    /// Whether any bit of `region` is free.
    pub(super) fn region_has_free(&self, region: Region) -> bool {
        (0..self.depth).any(|bit| self.allowed(region, bit) && self.is_free(bit))
    }

    pub(super) fn take(&mut self, bit: usize) {
        self.held.insert(bit);
        self.ever_held.insert(bit);
        self.maybe_pending.remove(&bit);
    }

    pub(super) fn release(&mut self, bit: usize) {
        self.held.remove(&bit);
        self.maybe_pending.insert(bit);
        self.freed.retain(|&b| b != bit);
        if self.freed.len() == FREED_MEMORY {
            self.freed.remove(0);
        }
        self.freed.push(bit);
    }

    /// The held bits of word `index`, as a mask relative to the word.
    pub(super) fn held_mask(&self, index: usize) -> usize {
        let start = index << self.shift;
        self.held
            .range(start..start + self.bits_per_word())
            .fold(0, |mask, &bit| mask | 1 << (bit - start))
    }

    /// The words (at or above the depth too) in which the caller holds bits.
    pub(super) fn words_with_held(&self) -> Vec<usize> {
        let mut words: Vec<usize> = self.held.iter().map(|&b| b >> self.shift).collect();
        words.dedup();
        words
    }

    /// Checks an allocation of one bit from `region` that started at bit `start` and left the
    /// hint at `hint_after`, and records it.
    pub(super) fn check_alloc(
        &mut self,
        got: Option<usize>,
        region: Region,
        start: usize,
        hint_after: u32,
    ) -> Result<(), String> {
        let region = self.effective(region);
        if let Region::Shallow(d) = region {
            // The model's own formula against the documented total.
            let total: usize = (0..self.words_for(self.depth))
                .map(|i| self.shallow_share(i, d))
                .sum();
            ensure!(total == d, "shallow shares of {d} add up to {total}");
        }
        let Some(bit) = got else {
            ensure!(
                !self.region_has_free(region),
                "allocation from {region:?} failed, but a bit of it is free"
            );
            return Ok(());
        };
        ensure!(
            bit < self.depth,
            "bit {bit} handed out at depth {}",
            self.depth
        );
        ensure!(self.is_free(bit), "bit {bit} handed out twice");
        ensure!(
            self.allowed(region, bit),
            "bit {bit} lies outside {region:?}"
        );
        if let Region::Full = region {
            self.check_order(bit, start)?;
        }
        let hint_after = hint_after as usize;
        if self.round_robin {
            ensure!(
                hint_after % self.depth == (bit + 1) % self.depth,
                "round-robin get of {bit} left the hint at {hint_after}"
            );
        } else {
            ensure!(
                hint_after >> self.shift == bit >> self.shift,
                "get of {bit} left the hint at {hint_after}, on another word"
            );
        }
        self.take(bit);
        Ok(())
    }

    /// Where a full-depth get that started at `start` may find its bit.
    pub(super) fn check_order(&self, bit: usize, start: usize) -> Result<(), String> {
        if self.round_robin {
            // Bits between the hint and the result were held — or freed but maybe still
            // waiting in their word's deferred-clear mask, which the search does not see
            // until the word looks full.
            let mut b = start;
            while b != bit {
                ensure!(
                    !self.is_free(b) || self.maybe_pending.contains(&b),
                    "round-robin get from {start} returned {bit}, skipping free bit {b}"
                );
                b = if b + 1 == self.depth { 0 } else { b + 1 };
            }
            return Ok(());
        }
        // The search starts on the hint's word and moves to the following words, wrapping.
        let nr_words = self.words_for(self.depth);
        let bpw = self.bits_per_word();
        let first = (0..nr_words)
            .map(|i| ((start >> self.shift) + i) % nr_words)
            .find(|&w| ((w * bpw)..((w + 1) * bpw).min(self.depth)).any(|b| self.is_free(b)));
        ensure!(
            first == Some(bit >> self.shift),
            "get from {start} returned {bit}, but word {first:?} is the first with a free bit"
        );
        Ok(())
    }
}

/// The `pick`-th free bit below the capacity that `filter` accepts, or else the `pick`-th
/// free bit; `None` when every bit is held.
pub(super) fn pick_free(model: &Model, pick: u16, filter: impl Fn(usize) -> bool) -> Option<usize> {
    let free = |f: &dyn Fn(usize) -> bool| -> Vec<usize> {
        (0..model.capacity)
            .filter(|&b| model.is_free(b) && f(b))
            .collect()
    };
    let preferred = free(&filter);
    let pool = if preferred.is_empty() {
        free(&|_| true)
    } else {
        preferred
    };
    (!pool.is_empty()).then(|| pool[usize::from(pick) % pool.len()])
}
