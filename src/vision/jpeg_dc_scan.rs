//! A scan's DC differences, block by block in the file's order, decoded in
//! parts at once where the file is large enough.
//!
//! Every Huffman code of the scan must be read in order: where a code
//! starts is known only once the one before it is read. But Huffman codes
//! fall back in step by themselves: a decode started at an arbitrary byte
//! reads garbage for a while, then its codes start where the file's do,
//! and from there on it reads what a decode from the start reads. So the
//! scan is cut into as many parts as there are threads; each part is
//! decoded from its first byte as if an MCU started there, noting where
//! each of its MCUs started (`Run::starts`). Then each part's decode
//! (which is right, the first from the file's start and each next one from
//! where it fell in step) goes on past its end until one of its MCUs
//! starts at a bit where one of the next part's did: same bit, same place
//! in the MCU, so the same decode from there on, and the next part's
//! blocks count from that MCU. Parts that never fall in step, or damage,
//! leave the whole scan to one decode from the start: the result is always
//! what that decode gives.
//!
//! A file with restart markers needs none of this: each interval starts
//! after a marker, with its predictors at zero. The markers are found by a
//! search; runs of whole intervals are decoded at once, each checking that
//! the marker after its last interval is where the next run starts, as
//! one decode would find it (`by_intervals`).

use super::bits::Bits;
use super::Table;

/// Bytes of entropy-coded data below which a part is not worth a thread.
const PART_BYTES: usize = 256 << 10;
/// Threads one decode takes at most: the board's big cores (RK3588: 4 + 4).
const MAX_THREADS: usize = 4;

/// How the scan codes one component: its tables and its blocks per MCU.
pub(super) struct Coding<'t> {
    pub dc: &'t Table,
    pub ac: &'t Table,
    pub blocks: usize,
}

/// Why a run stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// It passed the byte it was to reach.
    Passed,
    /// Its MCUs fell in step with the next part's (its MCU, the next part's).
    InStep(usize, usize),
    /// The file's bits are spent: only zeros follow.
    Exhausted,
    /// It has as many MCUs as the image.
    Full,
    /// A code no table has, or an impossible value.
    Broken,
}

/// One decode of consecutive MCUs: each block's DC difference, in order.
struct Run<'a> {
    bits: Bits<'a>,
    diffs: Vec<i16>,
    /// Per MCU of the first `STARTS` (in a part after the first), the bit
    /// where it started, or `UNKNOWN` (`Bits::at`).
    starts: Vec<u32>,
    mcus: usize,
}

/// MCUs of a part whose starts are noted: a part falls in step within a
/// few (measured: docs/performance.md, "Images"), and the notes are memory.
const STARTS: usize = 4096;
const UNKNOWN: u32 = u32::MAX;

impl<'a> Run<'a> {
    fn new(data: &'a [u8], from: usize, capacity: usize) -> Run<'a> {
        Run { bits: Bits::new(data, from), diffs: Vec::with_capacity(capacity), starts: Vec::new(), mcus: 0 }
    }

    /// Decodes MCUs until `stop` says so after one (given the MCUs so far),
    /// the image is full or the data broken. `noting`: the starts are noted.
    fn decode(
        &mut self,
        coding: &[Coding],
        total: usize,
        (restart_interval, noting): (usize, bool),
        // Not generic: one copy of the decoding loop in the binary.
        stop: &mut dyn FnMut(&Bits, usize) -> Option<Stop>,
    ) -> Stop {
        loop {
            if self.mcus == total {
                return Stop::Full;
            }
            if restart_interval > 0
                && self.mcus > 0
                && self.mcus.is_multiple_of(restart_interval)
                && self.bits.restart().is_none()
            {
                return Stop::Broken;
            }
            if noting && self.starts.len() < STARTS {
                self.starts.push(self.bits.at().and_then(|at| u32::try_from(at).ok()).unwrap_or(UNKNOWN));
            }
            for c in coding {
                for _ in 0..c.blocks {
                    match self.bits.block(c.dc, c.ac) {
                        Some(diff) => self.diffs.push(diff),
                        None => return Stop::Broken,
                    }
                }
            }
            self.mcus += 1;
            if let Some(why) = stop(&self.bits, self.mcus) {
                return why;
            }
        }
    }

    /// Goes on past its part until an MCU starts where one of `next`'s did.
    fn fall_in_step(&mut self, next: &Run, coding: &[Coding], total: usize) -> Stop {
        // The next part's known starts, in order; past its last, no match can come.
        let mut known = next.starts.iter().enumerate().filter(|(_, &s)| s != UNKNOWN).peekable();
        let Some(&last) = next.starts.iter().rev().find(|&&s| s != UNKNOWN) else { return Stop::Passed };
        let mut check = |bits: &Bits, mcus: usize| {
            if bits.exhausted() {
                return Some(Stop::Exhausted);
            }
            let here = bits.at()?;
            while known.next_if(|&(_, &s)| u64::from(s) < here).is_some() {}
            match known.peek() {
                Some(&(theirs, &s)) if u64::from(s) == here => Some(Stop::InStep(mcus, theirs)),
                _ if here > u64::from(last) => Some(Stop::Passed),
                _ => None,
            }
        };
        match check(&self.bits, self.mcus) {
            Some(why) => why,
            None => self.decode(coding, total, (0, false), &mut check),
        }
    }
}

/// In how many parts a scan of `bytes` is decoded: `asked`, or as many as
/// the machine and the data's size make worth it.
pub(super) fn parts(bytes: usize, asked: Option<usize>) -> usize {
    asked.unwrap_or_else(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS);
        threads.min(bytes / PART_BYTES).max(1)
    })
}

/// The scan's DC differences (per MCU, each component's blocks in turn) in
/// pieces, as one decode from the start gives them, or `None` where it fails.
/// `parts`: how many at once ([`parts`]).
pub(super) fn diffs(
    data: &[u8],
    coding: &[Coding],
    total: usize,
    restart_interval: usize,
    parts: usize,
) -> Option<Vec<Vec<i16>>> {
    let per_mcu: usize = coding.iter().map(|c| c.blocks).sum();
    // Bit places are noted in 32 bits.
    if parts > 1 && data.len() < 1 << 28 {
        let pieces = match restart_interval {
            0 => in_parts(data, coding, total, parts),
            _ => by_intervals(data, coding, total, restart_interval, parts),
        };
        if let Some(pieces) = pieces {
            #[cfg(test)]
            IN_PARTS.with(|n| n.set(n.get() + 1));
            return Some(pieces);
        }
    }
    let mut run = Run::new(data, 0, total * per_mcu);
    (run.decode(coding, total, (restart_interval, false), &mut |_, _| None) == Stop::Full).then(|| vec![run.diffs])
}

#[cfg(test)]
thread_local! {
    /// Scans this thread decoded in parts: the tests check that the parts
    /// fell in step, not that one decode stood in for them.
    pub(super) static IN_PARTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The scan decoded in `parts` parts at once; `None` where they do not all
/// fall in step (the caller then decodes it in one).
fn in_parts(data: &[u8], coding: &[Coding], total: usize, parts: usize) -> Option<Vec<Vec<i16>>> {
    if data.len() < 2 * parts {
        return None;
    }
    let per_mcu: usize = coding.iter().map(|c| c.blocks).sum();
    // A part's share of the blocks, and some: its vector seldom grows.
    let capacity = total * per_mcu / parts * 9 / 8 + 1024;
    // Part starts, none on the `00` of an `FF 00`.
    let mut starts: Vec<usize> = (0..parts).map(|i| data.len() * i / parts).collect();
    for s in starts.iter_mut().skip(1) {
        while *s < data.len() && data[*s - 1] == 0xFF {
            *s += 1;
        }
    }
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain([data.len()]).collect();
    let (starts, ends) = (&starts, &ends);
    let mut runs = at_once(
        (0..parts)
            .map(|i| {
                move || {
                    if i > 0 {
                        return part(data, (starts[i], ends[i]), coding, total, capacity);
                    }
                    let mut first = Run::new(data, 0, capacity);
                    let why = first.decode(coding, total, (0, false), &mut |bits, _| until(bits, ends[0]));
                    (first, why)
                }
            })
            .collect(),
    )?;
    // Each part (right from where it fell in step) decodes on into the next one.
    for i in 0..parts - 1 {
        let (head, tail) = runs.split_at_mut(i + 1);
        let (run, why) = &mut head[i];
        if *why == Stop::Passed {
            *why = run.fall_in_step(&tail[0].0, coding, total);
        }
    }
    // The parts' blocks, each from where it fell in step to where the next did.
    let (mut pieces, mut mcus, mut from) = (Vec::with_capacity(parts), 0, 0);
    for (mut run, why) in runs {
        let to = match why {
            Stop::InStep(mine, _) => mine,
            _ => run.mcus,
        };
        let take = to.checked_sub(from)?.min(total - mcus);
        run.diffs.truncate((from + take) * per_mcu);
        run.diffs.drain(..from * per_mcu);
        mcus += take;
        match why {
            _ if mcus == total => {
                pieces.push(run.diffs);
                return Some(pieces);
            }
            Stop::InStep(_, theirs) => {
                pieces.push(std::mem::take(&mut run.diffs));
                from = theirs;
            }
            // The file's bits are spent: the rest of the image reads zeros,
            // as the decode from the start goes on to read them.
            Stop::Exhausted => {
                run.mcus = mcus;
                let rest = run.decode(coding, total, (0, false), &mut |_, _| None);
                pieces.push(run.diffs);
                return (rest == Stop::Full).then_some(pieces);
            }
            _ => return None,
        }
    }
    None
}

/// Each piece of `work` at once, the first on this thread; `None` where
/// the system refuses a thread (the caller then does the work in one).
pub(super) fn at_once<T: Send, W: FnOnce() -> T + Send>(work: Vec<W>) -> Option<Vec<T>> {
    let mut work = work.into_iter();
    let first = work.next()?;
    std::thread::scope(|scope| {
        let threads: Vec<_> = work.map(|w| std::thread::Builder::new().spawn_scoped(scope, w)).collect();
        let mut all = vec![Some(first())];
        all.extend(threads.into_iter().map(|t| t.ok()?.join().ok()));
        all.into_iter().collect()
    })
}

/// A scan with restart markers in `parts` runs of whole intervals at once,
/// each run of about as many bytes; `None` where a marker is not where one
/// decode finds it (the caller then decodes in one).
fn by_intervals(
    data: &[u8],
    coding: &[Coding],
    total: usize,
    restart_interval: usize,
    parts: usize,
) -> Option<Vec<Vec<i16>>> {
    let intervals = total.div_ceil(restart_interval);
    // Where each interval starts: the scan's first byte, then after each marker.
    let mut starts = Vec::with_capacity(intervals);
    starts.push(0);
    for at in memchr::memchr_iter(0xFF, data) {
        if starts.len() == intervals {
            break;
        }
        match data.get(at + 1) {
            Some(0xD0..=0xD7) => starts.push(at + 2),
            // A stuffed FF, or fill before a marker.
            Some(0x00 | 0xFF) => {}
            // The scan ends before all its intervals.
            _ => return None,
        }
    }
    if starts.len() < intervals {
        return None;
    }
    // Each run's first interval: the first to start at or after its share of the bytes.
    let mut firsts: Vec<usize> = (0..parts)
        .map(|i| starts.partition_point(|&s| s < data.len() * i / parts))
        .filter(|&first| first < intervals)
        .collect();
    firsts.dedup();
    let per_mcu: usize = coding.iter().map(|c| c.blocks).sum();
    let (starts, ends) = (&starts, firsts.iter().skip(1).copied().chain([intervals]));
    let runs = at_once(
        firsts
            .iter()
            .zip(ends)
            .map(|(&first, end)| {
                move || {
                    let mcus = (end * restart_interval).min(total) - first * restart_interval;
                    let mut run = Run::new(data, starts[first], mcus * per_mcu);
                    let whole = run.decode(coding, mcus, (restart_interval, false), &mut |_, _| None) == Stop::Full;
                    // The next run starts where this one's next restart takes one decode.
                    let joins = end == intervals || (run.bits.restart().is_some() && run.bits.pos == starts[end]);
                    (whole && joins).then_some(run.diffs)
                }
            })
            .collect(),
    )?;
    runs.into_iter().collect()
}

/// Where a part's decode stops before it is checked against the next one.
fn until(bits: &Bits, end: usize) -> Option<Stop> {
    if bits.exhausted() {
        Some(Stop::Exhausted)
    } else {
        bits.passed(end).then_some(Stop::Passed)
    }
}

/// One part decoded from `from` until it passes `to`: started again a few
/// bytes on where it reads a code no table has (it had not fallen in step
/// yet, or the file is broken there, which the part before it then finds).
fn part<'a>(
    data: &'a [u8],
    (mut from, to): (usize, usize),
    coding: &[Coding],
    total: usize,
    capacity: usize,
) -> (Run<'a>, Stop) {
    let mut run = Run::new(data, from, capacity);
    loop {
        let why = run.decode(coding, total, (0, true), &mut |bits, _| until(bits, to));
        let next = run.bits.pos.max(from + 1);
        if why != Stop::Broken || run.bits.passed(to) || next >= to {
            return (run, why);
        }
        from = next;
        while from < to && data[from - 1] == 0xFF {
            from += 1;
        }
        // The same vectors again: a part of garbage may start over many times.
        (run.bits, run.mcus) = (Bits::new(data, from), 0);
        run.diffs.clear();
        run.starts.clear();
    }
}
