//! The entropy-coded bits of a scan and one block's DC difference read from
//! them, its AC coefficients stepped over. Besides what a decoder needs, the
//! reader knows where it stands in the file (`at`) and when the file's bits
//! are spent (`exhausted`): what a decode started mid-stream compares to
//! find where it falls in step with the one before it (`jpeg_dc_split.rs`).

use super::{Table, LOOKUP};

/// The entropy-coded bits, most significant first, with `FF 00` unstuffed;
/// at a marker, and past the end, it reads zeros.
pub(super) struct Bits<'a> {
    data: &'a [u8],
    pub pos: usize,
    bits: u64,
    count: u32,
    at_marker: bool,
    /// Where the last `FF 00` ended: the bits loaded since came one for one from the bytes.
    stuff_end: usize,
    /// Zero bits loaded at a marker or past the end (they are the stream's last ones).
    padded: u64,
}

impl<'a> Bits<'a> {
    /// Reading `data` from byte `pos`.
    pub fn new(data: &'a [u8], pos: usize) -> Bits<'a> {
        Bits { data, pos, bits: 0, count: 0, at_marker: false, stuff_end: pos, padded: 0 }
    }

    /// At least 56 bits in the buffer.
    #[inline(always)]
    fn refill(&mut self) {
        if self.count > 56 {
            return;
        }
        if let Some(chunk) = self.data.get(self.pos..self.pos + 8) {
            let x = u64::from_be_bytes(chunk.try_into().unwrap_or_default());
            // No FF byte among the eight: take whole bytes at once. The bits
            // of a partly taken byte land where its next read puts them again.
            let no_ff = ((!x).wrapping_sub(0x0101_0101_0101_0101) & x & 0x8080_8080_8080_8080) == 0;
            if no_ff && !self.at_marker {
                self.bits |= x >> self.count;
                let bytes = (63 - self.count) / 8;
                self.pos += bytes as usize;
                self.count += bytes * 8;
                return;
            }
        }
        self.refill_slow();
    }

    #[cold]
    fn refill_slow(&mut self) {
        while self.count <= 56 {
            let mut byte = 0;
            if !self.at_marker && self.pos < self.data.len() {
                byte = self.data[self.pos];
                if byte == 0xFF {
                    if self.data.get(self.pos + 1) == Some(&0) {
                        self.pos += 2;
                        self.stuff_end = self.pos;
                    } else {
                        self.at_marker = true;
                        byte = 0;
                        self.padded += 8;
                    }
                } else {
                    self.pos += 1;
                }
            } else {
                self.padded += 8;
            }
            self.bits |= u64::from(byte) << (56 - self.count);
            self.count += 8;
        }
    }

    #[inline(always)]
    fn consume(&mut self, n: u32) {
        self.bits <<= n;
        self.count -= n;
    }

    /// The bit of `data` the reader stands at (byte × 8 + bit), where that
    /// is known for certain: never past a marker, nor while the buffer holds
    /// bits from before a stuffed `00` (the buffer's bits then span one byte more).
    pub fn at(&self) -> Option<u64> {
        let plain = (self.pos - self.stuff_end) as u64 * 8;
        (self.padded == 0 && u64::from(self.count) <= plain).then(|| self.pos as u64 * 8 - u64::from(self.count))
    }

    /// Whether the reader has passed byte `byte` (within the bytes a stuffed `00` adds).
    pub fn passed(&self, byte: usize) -> bool {
        self.pos as u64 * 8 >= byte as u64 * 8 + u64::from(self.count)
    }

    /// Every bit before the marker (or the end) read: only zeros follow.
    pub fn exhausted(&self) -> bool {
        u64::from(self.count) <= self.padded
    }

    /// The next code of `table`: (code length, symbol), not yet consumed.
    #[inline(always)]
    fn symbol(&self, table: &Table) -> Option<(u32, u8)> {
        let entry = table.fast[(self.bits >> (64 - LOOKUP)) as usize];
        let len = (entry >> 16) & 0xFF;
        if len != 0 {
            return Some((len, (entry >> 24) as u8));
        }
        (LOOKUP + 1..=16).find_map(|len| {
            let code = (self.bits >> (64 - len)) as i32;
            (code <= table.max_code[len as usize])
                .then(|| table.symbols.get((table.offset[len as usize] + code) as usize).map(|&s| (len, s)))
                .flatten()
        })
    }

    /// A block's DC difference; its AC coefficients are stepped over.
    #[inline(always)]
    pub fn block(&mut self, dc: &Table, ac: &Table) -> Option<i16> {
        self.refill();
        let (len, size) = self.symbol(dc)?;
        let size = u32::from(size);
        if size > 11 {
            return None;
        }
        self.consume(len);
        let diff = if size == 0 {
            0
        } else {
            let v = (self.bits >> (64 - size)) as i32;
            self.consume(size);
            if v < 1 << (size - 1) {
                v - (1 << size) + 1
            } else {
                v
            }
        };
        let mut k = 1;
        while k < 64 {
            // A code (≤ 16 bits) and its value (≤ 10) fit 56 bits twice.
            if self.count < 26 {
                self.refill();
            }
            // One or two codes with their values (`jpeg_dc::pair`): ≤ 22 bits.
            let entry = ac.fast[(self.bits >> (64 - LOOKUP)) as usize];
            if entry != 0 {
                let after_first = k + ((entry >> 5) & 0x7F);
                if after_first < 64 {
                    self.consume((entry >> 12) & 0x1F);
                    k = after_first + ((entry >> 17) & 0x7F);
                } else {
                    self.consume(entry & 0x1F);
                    k = after_first;
                }
                continue;
            }
            let (len, symbol) = self.symbol(ac)?;
            self.consume(len + u32::from(symbol & 15));
            k += match (symbol >> 4, symbol & 15) {
                (15, 0) => 16,
                (_, 0) => 64,
                (run, _) => u32::from(run) + 1,
            };
        }
        // ≤ 11 bits with its sign: an i16 holds it.
        Some(diff as i16)
    }

    /// Past a restart marker (`FF D0`–`FF D7`), with the bit buffer emptied.
    pub fn restart(&mut self) -> Option<()> {
        while self.data.get(self.pos) == Some(&0xFF) && self.data.get(self.pos + 1) == Some(&0xFF) {
            self.pos += 1;
        }
        match self.data.get(self.pos..self.pos + 2)? {
            [0xFF, 0xD0..=0xD7] => {
                *self = Bits::new(self.data, self.pos + 2);
                Some(())
            }
            _ => None,
        }
    }
}
