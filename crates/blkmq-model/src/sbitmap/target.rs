//! The operations [`Sbitmap`] and [`SbitmapQueue`] share, so one runner drives both.

use alloc::format;
use alloc::string::String;

use blkmq_sbitmap::{AllocHint, BitBatch, Sbitmap, SbitmapError, SbitmapQueue};

/// The operations shared by [`Sbitmap`] and [`SbitmapQueue`], so one runner drives both.
pub(super) trait Target {
    fn depth(&self) -> usize;
    fn bits_per_word(&self) -> usize;
    fn get(&self, hint: &AllocHint) -> Option<usize>;
    fn get_shallow(&self, hint: &AllocHint, depth: usize) -> Result<Option<usize>, SbitmapError>;
    fn get_batch(&self, hint: &AllocHint, nr: usize) -> Option<BitBatch>;
    fn put(&self, bit: usize, hint: &AllocHint) -> Result<(), SbitmapError>;
    fn put_batch(&self, batch: BitBatch, hint: &AllocHint) -> Result<(), SbitmapError>;
    fn resize(&self, depth: usize) -> Result<(), SbitmapError>;
    fn weight(&self) -> usize;
    fn any_bit_set(&self) -> bool;
    fn test_bit(&self, bit: usize) -> Result<bool, SbitmapError>;
    fn for_each_set(&self, start: usize, f: &mut dyn FnMut(usize) -> bool);
    fn dump(&self) -> String;
}

impl Target for Sbitmap {
    fn depth(&self) -> usize {
        Sbitmap::depth(self)
    }
    fn bits_per_word(&self) -> usize {
        Sbitmap::bits_per_word(self)
    }
    fn get(&self, hint: &AllocHint) -> Option<usize> {
        Sbitmap::get(self, hint)
    }
    fn get_shallow(&self, hint: &AllocHint, depth: usize) -> Result<Option<usize>, SbitmapError> {
        Ok(Sbitmap::get_shallow(self, hint, depth))
    }
    fn get_batch(&self, hint: &AllocHint, nr: usize) -> Option<BitBatch> {
        Sbitmap::get_batch(self, hint, nr)
    }
    fn put(&self, bit: usize, hint: &AllocHint) -> Result<(), SbitmapError> {
        Sbitmap::put(self, bit, hint)
    }
    fn put_batch(&self, batch: BitBatch, hint: &AllocHint) -> Result<(), SbitmapError> {
        Sbitmap::put_batch(self, batch, hint)
    }
    fn resize(&self, depth: usize) -> Result<(), SbitmapError> {
        Sbitmap::resize(self, depth)
    }
    fn weight(&self) -> usize {
        Sbitmap::weight(self)
    }
    fn any_bit_set(&self) -> bool {
        Sbitmap::any_bit_set(self)
    }
    fn test_bit(&self, bit: usize) -> Result<bool, SbitmapError> {
        Sbitmap::test_bit(self, bit)
    }
    fn for_each_set(&self, start: usize, f: &mut dyn FnMut(usize) -> bool) {
        Sbitmap::for_each_set(self, start, f)
    }
    fn dump(&self) -> String {
        format!("{}", Sbitmap::dump(self))
    }
}

impl Target for SbitmapQueue {
    fn depth(&self) -> usize {
        SbitmapQueue::depth(self)
    }
    fn bits_per_word(&self) -> usize {
        SbitmapQueue::bits_per_word(self)
    }
    fn get(&self, hint: &AllocHint) -> Option<usize> {
        SbitmapQueue::get(self, hint)
    }
    fn get_shallow(&self, hint: &AllocHint, depth: usize) -> Result<Option<usize>, SbitmapError> {
        SbitmapQueue::get_shallow(self, hint, depth)
    }
    fn get_batch(&self, hint: &AllocHint, nr: usize) -> Option<BitBatch> {
        SbitmapQueue::get_batch(self, hint, nr)
    }
    fn put(&self, bit: usize, hint: &AllocHint) -> Result<(), SbitmapError> {
        SbitmapQueue::put(self, bit, hint)
    }
    fn put_batch(&self, batch: BitBatch, hint: &AllocHint) -> Result<(), SbitmapError> {
        SbitmapQueue::put_batch(self, batch, hint)
    }
    fn resize(&self, depth: usize) -> Result<(), SbitmapError> {
        SbitmapQueue::resize(self, depth)
    }
    fn weight(&self) -> usize {
        SbitmapQueue::weight(self)
    }
    fn any_bit_set(&self) -> bool {
        SbitmapQueue::any_bit_set(self)
    }
    fn test_bit(&self, bit: usize) -> Result<bool, SbitmapError> {
        SbitmapQueue::test_bit(self, bit)
    }
    fn for_each_set(&self, start: usize, f: &mut dyn FnMut(usize) -> bool) {
        SbitmapQueue::for_each_set(self, start, f)
    }
    fn dump(&self) -> String {
        format!("{}", SbitmapQueue::dump(self))
    }
}
