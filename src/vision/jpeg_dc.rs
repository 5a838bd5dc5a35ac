//! A baseline JPEG at 1/8 scale from its DC coefficients alone: each 8×8
//! block becomes one pixel, its average, which is what a scaled IDCT gives
//! at 1/8 (libjpeg's `scale_denom = 8`, jpeg-decoder's `scale`). At that
//! scale nothing but the entropy decoding is left, and the AC coefficients
//! need only be stepped over: one table lookup gives the bits of a code and
//! of its value together, and the run it skips — of two codes where both
//! fit the lookup. A large scan is decoded in parts at once
//! (`jpeg_dc_scan.rs`). One decode of a 12-megapixel photo for a 392-pixel
//! encoder costs 0.5–0.8× of libjpeg-turbo's (Pillow's `draft`) CPU time,
//! and in parts 0.3–0.45× of its wall time with two idle cores —
//! docs/performance.md, "Images".
//!
//! Only the common layout is taken: baseline Huffman, 8-bit, one
//! interleaved scan of grey or YCbCr. Anything else — progressive,
//! arithmetic, CMYK, Adobe RGB, a corrupt stream — returns `None` and the
//! caller decodes it the general way.

#[path = "jpeg_dc_bits.rs"]
mod bits;
#[path = "jpeg_dc_scan.rs"]
mod scan;

/// Bits a table lookup reads at once; longer codes take the slow path.
const LOOKUP: u32 = 11;

/// A JPEG decoded at 1/8 scale: RGB (or grey) pixels, and the EXIF chunk.
pub(super) struct Dc {
    pub width: u32,
    pub height: u32,
    /// `width × height × 3` RGB bytes, or `width × height` for grey.
    pub pixels: Vec<u8>,
    pub grey: bool,
    pub exif: Option<Vec<u8>>,
}

struct Component {
    id: u8,
    h: usize,
    v: usize,
    quant: usize,
    dc: usize,
    ac: usize,
}

/// A Huffman table as a header defines it: the count of codes per length, and the symbols.
type Spec<'a> = (&'a [u8; 16], &'a [u8]);

/// One Huffman table: a lookup on the next `LOOKUP` bits, and the canonical
/// code ranges per length for longer codes.
struct Table {
    /// DC: `code length + value bits | code length << 16 | symbol << 24`.
    /// AC: two steps over coefficients at once (`pair`). 0 where the code
    /// is longer than the lookup.
    fast: Vec<u32>,
    /// Per code length 1..=16: the largest code (−1: none) and the index of
    /// its first symbol less its first code.
    max_code: [i32; 17],
    offset: [i32; 17],
    symbols: Vec<u8>,
}

impl Table {
    fn new(counts: &[u8; 16], symbols: &[u8], ac: bool) -> Option<Table> {
        let mut fast = vec![0u32; 1 << LOOKUP];
        let (mut max_code, mut offset) = ([-1i32; 17], [0i32; 17]);
        let (mut code, mut k) = (0u32, 0usize);
        for len in 1..=16u32 {
            let n = usize::from(counts[len as usize - 1]);
            // The codes of a length must fit in it (a damaged table's may not).
            if code as usize + n > 1 << len {
                return None;
            }
            if n > 0 {
                offset[len as usize] = k as i32 - code as i32;
                for &symbol in symbols.get(k..k + n)? {
                    // Baseline values: a DC difference of ≤ 11 bits, an AC
                    // coefficient of ≤ 10 (the bit reader counts on both).
                    if if ac { symbol & 15 > 10 } else { symbol > 11 } {
                        return None;
                    }
                    if len <= LOOKUP {
                        let size = u32::from(if ac { symbol & 15 } else { symbol });
                        let advance = match (ac, symbol >> 4, symbol & 15) {
                            (false, ..) => 0,
                            (true, 15, 0) => 16,
                            (true, _, 0) => 64, // end of block
                            (true, run, _) => u32::from(run) + 1,
                        };
                        let entry = (len + size) | advance << 8 | len << 16 | u32::from(symbol) << 24;
                        let first = (code << (LOOKUP - len)) as usize;
                        fast[first..first + (1 << (LOOKUP - len))].fill(entry);
                    }
                    code += 1;
                }
                k += n;
                max_code[len as usize] = code as i32 - 1;
            }
            code <<= 1;
        }
        if ac {
            fast = (0..fast.len()).map(|i| pair(&fast, i)).collect();
        }
        Some(Table { fast, max_code, offset, symbols: symbols.to_vec() })
    }
}

/// An AC lookup entry: the code at the top of `i`'s bits and, where the
/// rest of them hold the whole next code too, that one as well, as
/// `bits | advance << 5 | both's bits << 12 | the second's advance << 17`.
/// A block that ends with the first (its end code, or its last
/// coefficient) takes the first alone (`Bits::block`). `single`: one code
/// per entry, as `Table::new` makes them.
fn pair(single: &[u32], i: usize) -> u32 {
    let first = single[i];
    if first == 0 {
        return 0;
    }
    let (bits, advance) = (first & 0xFF, (first >> 8) & 0xFF);
    let mut both = (bits, 0);
    if advance < 64 && bits < LOOKUP {
        let second = single[(i << bits) & ((1 << LOOKUP) - 1)];
        // Its code must lie within the bits looked up; its value may not.
        if second != 0 && (second >> 16) & 0xFF <= LOOKUP - bits {
            both = (bits + (second & 0xFF), (second >> 8) & 0xFF);
        }
    }
    bits | advance << 5 | both.0 << 12 | both.1 << 17
}

/// Decodes `bytes` at 1/8 scale, or `None` where this path does not apply.
pub(super) fn decode(bytes: &[u8]) -> Option<Dc> {
    decode_in(bytes, None)
}

/// [`decode`] with the scan in `parts` parts at once (`None`: as many as
/// the machine and the file's size make worth it).
pub(super) fn decode_in(bytes: &[u8], parts: Option<usize>) -> Option<Dc> {
    let mut quant = [None; 4];
    // Huffman tables as the header gives them (counts, symbols); each is
    // built (a 16 KiB lookup) only if the scan uses it: a header may define
    // any number it never uses.
    let (mut dc_specs, mut ac_specs): ([Option<Spec>; 4], [Option<Spec>; 4]) = Default::default();
    let (mut frame, mut components) = (None, Vec::new());
    let (mut restart_interval, mut exif, mut adobe_rgb) = (0usize, None, false);
    if bytes.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut pos = 2;
    loop {
        while bytes.get(pos) == Some(&0xFF) && bytes.get(pos + 1) == Some(&0xFF) {
            pos += 1;
        }
        let [0xFF, marker] = *bytes.get(pos..pos + 2)? else { return None };
        let length = usize::from(u16::from_be_bytes(bytes.get(pos + 2..pos + 4)?.try_into().ok()?));
        let segment = bytes.get(pos + 4..(pos + 2 + length).max(pos + 4))?;
        pos += 2 + length;
        match marker {
            0xC0 | 0xC1 => {
                let [8, hi, hl, wi, wl, n, ref rest @ ..] = *segment else { return None };
                // One frame, whole: a second one could name another size
                // than the one the pixel limit was checked against.
                if frame.is_some() || (n != 1 && n != 3) || rest.len() < 3 * usize::from(n) {
                    return None;
                }
                frame = Some((u32::from(u16::from_be_bytes([wi, wl])), u32::from(u16::from_be_bytes([hi, hl]))));
                for c in rest.chunks_exact(3).take(usize::from(n)) {
                    let (h, v) = (usize::from(c[1] >> 4), usize::from(c[1] & 15));
                    if !(1..=4).contains(&h) || !(1..=4).contains(&v) || c[2] > 3 {
                        return None;
                    }
                    components.push(Component { id: c[0], h, v, quant: usize::from(c[2]), dc: 0, ac: 0 });
                }
            }
            0xC2..=0xCF if marker != 0xC4 && marker != 0xC8 && marker != 0xCC => return None,
            0xC4 => {
                let mut rest = segment;
                while let [class_id, ref tail @ ..] = *rest {
                    let counts: &[u8; 16] = tail.get(..16)?.try_into().ok()?;
                    let n = counts.iter().map(|&c| usize::from(c)).sum::<usize>();
                    let spec = Some((counts, tail.get(16..16 + n)?));
                    let slot = usize::from(class_id & 15).min(3);
                    match class_id >> 4 {
                        0 => dc_specs[slot] = spec,
                        1 => ac_specs[slot] = spec,
                        _ => return None,
                    }
                    rest = &tail[16 + n..];
                }
            }
            0xDB => {
                let mut rest = segment;
                while let [pq_id, ref tail @ ..] = *rest {
                    let (wide, id) = (pq_id >> 4 == 1, usize::from(pq_id & 15));
                    let size = if wide { 128 } else { 64 };
                    let values = tail.get(..size)?;
                    // Only the DC entry (the first) is used.
                    *quant.get_mut(id)? =
                        Some(if wide { u16::from_be_bytes([values[0], values[1]]) } else { values[0].into() });
                    rest = &tail[size..];
                }
            }
            0xDD => restart_interval = usize::from(u16::from_be_bytes(segment.get(..2)?.try_into().ok()?)),
            0xE1 if segment.starts_with(b"Exif\0\0") => exif = Some(segment[6..].to_vec()),
            0xEE if segment.starts_with(b"Adobe") => adobe_rgb = segment.get(11) == Some(&0),
            0xDA => {
                let (width, height) = frame?;
                let [n, ref rest @ ..] = *segment else { return None };
                if usize::from(n) != components.len() || rest.get(2 * usize::from(n)..)? != [0, 63, 0] {
                    return None; // a scan of some components, or a progressive one
                }
                for (c, s) in components.iter_mut().zip(rest.chunks_exact(2)) {
                    if c.id != s[0] {
                        return None;
                    }
                    (c.dc, c.ac) = (usize::from(s[1] >> 4).min(3), usize::from(s[1] & 15).min(3));
                }
                let (mut dc_tables, mut ac_tables): ([Option<Table>; 4], [Option<Table>; 4]) = Default::default();
                for c in &components {
                    if dc_tables[c.dc].is_none() {
                        let (counts, symbols) = dc_specs[c.dc]?;
                        dc_tables[c.dc] = Some(Table::new(counts, symbols, false)?);
                    }
                    if ac_tables[c.ac].is_none() {
                        let (counts, symbols) = ac_specs[c.ac]?;
                        ac_tables[c.ac] = Some(Table::new(counts, symbols, true)?);
                    }
                }
                let rgb_ids = components.iter().map(|c| c.id).eq(*b"RGB");
                if adobe_rgb || rgb_ids || width == 0 || height == 0 {
                    return None;
                }
                let data = bytes.get(pos..)?;
                let parts = scan::parts(data.len(), parts);
                let planes = planes(
                    data,
                    (width, height),
                    &components,
                    &quant,
                    &dc_tables,
                    &ac_tables,
                    (restart_interval, parts),
                )?;
                return Some(assemble(&planes, &components, (width, height), exif, parts));
            }
            0xD9 => return None,
            _ => {}
        }
    }
}

/// A component's DC pixels, one per block, rows of `stride`.
struct Plane {
    pixels: Vec<u8>,
    stride: usize,
}

/// The scan's blocks, each component's DC pixels in a plane of its own.
fn planes(
    data: &[u8],
    (width, height): (u32, u32),
    components: &[Component],
    quant: &[Option<u16>; 4],
    dc_tables: &[Option<Table>; 4],
    ac_tables: &[Option<Table>; 4],
    (restart_interval, parts): (usize, usize),
) -> Option<Vec<Plane>> {
    let (w, h) = (width as usize, height as usize);
    let h_max = components.iter().map(|c| c.h).max()?;
    let v_max = components.iter().map(|c| c.v).max()?;
    // One component: not interleaved, an MCU is one block whatever its sampling.
    let one = components.len() == 1;
    let (mcu_w, mcu_h) = if one { (8, 8) } else { (8 * h_max, 8 * v_max) };
    let (mcus_x, mcus_y) = (w.div_ceil(mcu_w), h.div_ceil(mcu_h));
    let layout = |c: &Component| if one { (1, 1) } else { (c.h, c.v) };
    let mut planes: Vec<Plane> = components
        .iter()
        .map(|c| {
            let (bh, bv) = layout(c);
            Plane { pixels: vec![0; mcus_x * bh * mcus_y * bv], stride: mcus_x * bh }
        })
        .collect();
    let mut coding = Vec::with_capacity(components.len());
    for c in components {
        let (bh, bv) = layout(c);
        coding.push(scan::Coding { dc: dc_tables[c.dc].as_ref()?, ac: ac_tables[c.ac].as_ref()?, blocks: bh * bv });
    }
    let quant: Vec<i64> = components.iter().map(|c| quant[c.quant].map(i64::from)).collect::<Option<_>>()?;
    let per_mcu: usize = coding.iter().map(|c| c.blocks).sum();
    let pieces = scan::diffs(data, &coding, mcus_x * mcus_y, restart_interval, parts)?;
    let mut predictors = [0i32; 3];
    for (mcu, diffs) in pieces.iter().flat_map(|p| p.chunks_exact(per_mcu)).enumerate() {
        if restart_interval > 0 && mcu.is_multiple_of(restart_interval) {
            predictors = [0; 3];
        }
        let (mx, my) = (mcu % mcus_x, mcu / mcus_x);
        let mut diffs = diffs.iter();
        for (i, c) in components.iter().enumerate() {
            let ((bh, bv), plane) = (layout(c), &mut planes[i]);
            for by in 0..bv {
                for bx in 0..bh {
                    predictors[i] = predictors[i].wrapping_add(i32::from(*diffs.next()?));
                    // The 1×1 IDCT: the block's mean, level-shifted.
                    let value = ((i64::from(predictors[i]) * quant[i] + 1024) >> 3).clamp(0, 255) as u8;
                    plane.pixels[(my * bv + by) * plane.stride + mx * bh + bx] = value;
                }
            }
        }
    }
    Some(planes)
}

/// The planes as one image of `⌈width/8⌉ × ⌈height/8⌉`, YCbCr to RGB by
/// JFIF's equations. Chroma at half the luma's resolution is interpolated
/// as libjpeg's "fancy" upsampling does (weights 3/4 and 1/4 from the
/// nearer and the farther sample); other ratios repeat it.
/// Colour rows are converted in `parts` bands at once.
fn assemble(
    planes: &[Plane],
    components: &[Component],
    (width, height): (u32, u32),
    exif: Option<Vec<u8>>,
    parts: usize,
) -> Dc {
    let (w, h) = (width.div_ceil(8) as usize, height.div_ceil(8) as usize);
    let h_max = components.iter().map(|c| c.h).max().unwrap_or(1);
    let v_max = components.iter().map(|c| c.v).max().unwrap_or(1);
    let grey = components.len() == 1;
    let mut pixels = Vec::with_capacity(w * h * if grey { 1 } else { 3 });
    if grey {
        for row in planes[0].pixels.chunks_exact(planes[0].stride).take(h) {
            pixels.extend_from_slice(&row[..w]);
        }
        return Dc { width: w as u32, height: h as u32, pixels, grey, exif };
    }
    // Per component and luma column (row): the nearer and the farther chroma column (row).
    let taps = |out: usize, factor: usize, len: usize| -> Vec<(usize, usize)> {
        (0..out)
            .map(|x| {
                let near = (x / factor).min(len - 1);
                let far = match (factor, x % 2) {
                    (2, 0) => near.saturating_sub(1),
                    (2, _) => (near + 1).min(len - 1),
                    _ => near,
                };
                (near, far)
            })
            .collect()
    };
    let sampled: Vec<_> = components
        .iter()
        .zip(planes)
        .map(|(c, p)| {
            let rows = p.pixels.len() / p.stride;
            (p, taps(w, h_max / c.h, p.stride), taps(h, v_max / c.v, rows))
        })
        .collect();
    let sample = |i: usize, x: usize, y: usize| {
        let (p, xs, ys) = &sampled[i];
        let ((xn, xf), (yn, yf)) = (xs[x], ys[y]);
        let at = |x: usize, y: usize| i32::from(p.pixels[y * p.stride + x]);
        (9 * at(xn, yn) + 3 * at(xf, yn) + 3 * at(xn, yf) + at(xf, yf) + 8) >> 4
    };
    // 16-bit fixed point, rounded.
    const ONE: i32 = 1 << 16;
    let f = |x: f64| (x * f64::from(ONE)).round() as i32;
    let (cr_r, cb_g, cr_g, cb_b) = (f(1.402), f(0.344136), f(0.714136), f(1.772));
    let clamp = |v: i32| ((v + ONE / 2) >> 16).clamp(0, 255) as u8;
    // Rows from `top` on into `out`.
    let colour = |top: usize, out: &mut [u8]| {
        for (y, row) in (top..).zip(out.chunks_exact_mut(w * 3)) {
            for (x, rgb) in row.chunks_exact_mut(3).enumerate() {
                let (luma, cb, cr) = (sample(0, x, y) * ONE, sample(1, x, y) - 128, sample(2, x, y) - 128);
                rgb.copy_from_slice(&[
                    clamp(luma + cr_r * cr),
                    clamp(luma - cb_g * cb - cr_g * cr),
                    clamp(luma + cb_b * cb),
                ]);
            }
        }
    };
    pixels.resize(w * h * 3, 0);
    let band = h.div_ceil(parts);
    let colour = &colour;
    let bands = pixels.chunks_mut(band * w * 3).enumerate().map(|(i, out)| move || colour(i * band, out));
    if scan::at_once(bands.collect()).is_none() {
        colour(0, &mut pixels);
    }
    Dc { width: w as u32, height: h as u32, pixels, grey, exif }
}

#[cfg(test)]
#[path = "jpeg_dc_tests.rs"]
mod tests;
