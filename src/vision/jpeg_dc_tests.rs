//! `jpeg_dc.rs`'s unit tests, in a file of their own to keep it under 600 lines.

use super::*;
use std::cell::Cell;
use std::io::Cursor;

/// jpeg-decoder's own 1/8-scaled decode of the same file, for comparison.
fn reference(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut decoder = jpeg_decoder::Decoder::new(bytes);
    decoder.scale(1, 1).unwrap();
    let pixels = decoder.decode().unwrap();
    let info = decoder.info().unwrap();
    (u32::from(info.width), u32::from(info.height), pixels)
}

fn encode(img: image::DynamicImage) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
    out.into_inner()
}

fn textured(w: u32, h: u32) -> image::RgbImage {
    // A fixed pseudo-random texture over gradients: every AC code length occurs.
    let mut state = 0x2545_f491_u32;
    image::RgbImage::from_fn(w, h, |x, y| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (state % 64) as u8;
        image::Rgb([(x as u8).wrapping_add(n), (y as u8).wrapping_mul(2).wrapping_add(n / 2), n.wrapping_mul(3)])
    })
}

/// Largest difference of any sample, and the mean one.
fn differences(a: &[u8], b: &[u8]) -> (u8, f64) {
    assert_eq!(a.len(), b.len());
    let most = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0);
    let mean = a.iter().zip(b).map(|(x, y)| f64::from(x.abs_diff(*y))).sum::<f64>() / a.len() as f64;
    (most, mean)
}

#[test]
fn grey_is_each_blocks_mean_exactly_as_the_scaled_idct_gives_it() {
    let grey = image::DynamicImage::ImageRgb8(textured(203, 117)).into_luma8();
    let bytes = encode(grey.into());
    let dc = decode(&bytes).expect("a baseline grey JPEG");
    assert!(dc.grey);
    let (w, h, want) = reference(&bytes);
    assert_eq!((dc.width, dc.height), (w, h), "⌈203/8⌉ × ⌈117/8⌉");
    assert_eq!((w, h), (26, 15));
    assert_eq!(dc.pixels, want);
}

#[test]
fn colour_matches_the_scaled_idct_within_rounding() {
    let bytes = encode(textured(333, 250).into());
    let dc = decode(&bytes).expect("a baseline YCbCr JPEG");
    let (w, h, want) = reference(&bytes);
    assert_eq!((dc.width, dc.height, dc.grey), (w, h, false));
    let (most, mean) = differences(&dc.pixels, &want);
    // The same block means and chroma interpolation; the colour
    // conversion rounds its own way.
    assert!(most <= 1 && mean < 0.05, "largest {most}, mean {mean}");
}

#[test]
fn restart_markers_and_subsampled_chroma() {
    // Pillow, 4:2:0, a restart marker every 3 MCUs (34 of them).
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/images/restart.jpg")).unwrap();
    let dc = decode(&bytes).expect("a baseline JPEG with restart markers");
    let (w, h, want) = reference(&bytes);
    assert_eq!((dc.width, dc.height), (w, h));
    let (most, mean) = differences(&dc.pixels, &want);
    assert!(most <= 1 && mean < 0.05, "largest {most}, mean {mean}: a restart decoded out of step?");
}

#[test]
fn other_layouts_and_damage_are_left_to_the_general_decoder() {
    let progressive =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/images/progressive.jpg")).unwrap();
    assert!(decode(&progressive).is_none(), "progressive");
    assert!(decode(b"not a jpeg").is_none());
    let bytes = encode(textured(64, 64).into());
    for cut in [3, 20, bytes.len() / 3, bytes.len() - 3] {
        // A cut file never panics: it decodes from zeros or gives up.
        let _ = decode(&bytes[..cut]);
    }
    let mut garbled = bytes.clone();
    let middle = garbled.len() / 2;
    garbled[middle..middle + 40].fill(0xA5);
    let _ = decode(&garbled);
}

#[test]
fn a_damaged_file_never_panics_and_never_gives_pixels_of_another_size() {
    // Header and scan bytes alike: a fixed pseudo-random walk of
    // overwritten bytes and cuts over the restart file and a 4:4:4 one.
    let restart = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/images/restart.jpg")).unwrap();
    let mut state = 0x9e37_79b9_u32;
    let mut next = move |below: usize| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as usize % below
    };
    let mut decoded = 0;
    // The last: no restart markers, so it is also decoded in parts, which
    // must give what one decode gives, damage and all.
    for original in [restart, encode(textured(96, 72).into()), encode(textured(240, 160).into())] {
        for _ in 0..1500 {
            let mut bytes = original.clone();
            for _ in 0..1 + next(4) {
                let at = next(bytes.len());
                bytes[at] = next(256) as u8;
            }
            bytes.truncate(bytes.len() - next(bytes.len() / 4 + 1));
            let one = decode_in(&bytes, Some(1));
            let parts = decode_in(&bytes, Some(3));
            assert_eq!(parts.as_ref().map(|d| &d.pixels), one.as_ref().map(|d| &d.pixels));
            if let Some(dc) = one {
                decoded += 1;
                let channels = if dc.grey { 1 } else { 3 };
                assert_eq!(dc.pixels.len(), (dc.width * dc.height) as usize * channels);
            }
        }
    }
    assert!(decoded > 0, "some damage leaves a decodable file: the walk reached the scan");
}

#[test]
fn a_table_the_scan_does_not_use_is_never_built() {
    // A Huffman table for AC slot 3, which no component uses, with three
    // codes of length 1 (impossible): built, it would refuse the file.
    let bytes = encode(textured(64, 64).into());
    let sos = bytes.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
    let mut dht = vec![0xFF, 0xC4, 0, 2 + 17 + 3, 0x13, 3];
    dht.extend_from_slice(&[0; 15]);
    dht.extend_from_slice(&[1, 2, 3]);
    let with_unused = [&bytes[..sos], &dht[..], &bytes[sos..]].concat();
    assert_eq!(decode(&with_unused).map(|d| d.pixels), decode(&bytes).map(|d| d.pixels));
    assert!(decode(&bytes).is_some());
}

#[test]
fn a_second_frame_header_is_refused() {
    let bytes = encode(textured(64, 64).into());
    let sof = bytes.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    let length = usize::from(u16::from_be_bytes([bytes[sof + 2], bytes[sof + 3]]));
    let mut twice = bytes[..sof + 2 + length].to_vec();
    let mut huge = bytes[sof..sof + 2 + length].to_vec();
    huge[5..9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    twice.extend_from_slice(&huge);
    twice.extend_from_slice(&bytes[sof + 2 + length..]);
    assert!(decode(&bytes).is_some());
    assert!(decode(&twice).is_none());
}

/// `bytes` decoded in `parts` parts, which must fall in step and give what
/// one decode gives, exactly.
fn check_in_parts(bytes: &[u8], parts: usize, what: &str) {
    let one = decode_in(bytes, Some(1)).unwrap_or_else(|| panic!("{what}: decodes"));
    let before = scan::IN_PARTS.with(Cell::get);
    let split = decode_in(bytes, Some(parts)).unwrap_or_else(|| panic!("{what}: decodes in {parts} parts"));
    assert_eq!(scan::IN_PARTS.with(Cell::get), before + 1, "{what}: {parts} parts fell in step");
    assert_eq!((split.width, split.height), (one.width, one.height));
    assert!(split.pixels == one.pixels, "{what}: {parts} parts give other pixels");
}

#[test]
fn a_scan_decoded_in_parts_gives_what_one_decode_gives() {
    // Noisy and smooth (long zero runs: the slowest to fall in step), colour and grey.
    let smooth =
        image::RgbImage::from_fn(800, 600, |x, y| image::Rgb([(x / 4) as u8, (y / 3) as u8, ((x + y) / 6) as u8]));
    let images = [
        ("textured", encode(textured(640, 480).into())),
        ("smooth", encode(smooth.into())),
        ("grey", encode(image::DynamicImage::ImageRgb8(textured(500, 700)).into_luma8().into())),
    ];
    for (what, bytes) in &images {
        for parts in [2, 3, 4, 8] {
            check_in_parts(bytes, parts, what);
        }
    }
    // Restart markers: runs of whole intervals.
    let restart = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/images/restart.jpg")).unwrap();
    for parts in [2, 3, 4, 8] {
        check_in_parts(&restart, parts, "restart");
    }
    // Cut short: the last parts read zeros where one decode reads them too.
    let (_, textured) = &images[0];
    check_in_parts(&textured[..textured.len() * 6 / 10], 4, "cut");
}

#[test]
fn runs_of_intervals_join_only_where_one_decode_finds_the_marker() {
    // 16 zero bytes before every restart marker: one decode, its interval
    // read, finds zeros where the marker should be and gives up. Decoded
    // as runs of one interval each, every run decodes; only the check that
    // each run ends at the marker the next one starts after refuses them.
    let restart = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/images/restart.jpg")).unwrap();
    let mut padded = Vec::new();
    for (i, &byte) in restart.iter().enumerate() {
        if byte == 0xFF && matches!(restart.get(i + 1), Some(0xD0..=0xD7)) {
            padded.extend([0; 16]);
        }
        padded.push(byte);
    }
    check_in_parts(&restart, 1000, "restart, an interval a run");
    assert!(decode_in(&padded, Some(1)).is_none());
    assert!(decode_in(&padded, Some(1000)).is_none());
}
