//! A large PNG decoded row by row and shrunk as the rows arrive, so that
//! its memory is the shrunk image's, not the whole one's: a 7,000×7,000 PNG
//! of 143 KB would otherwise decode to 147 MB (and, not being RGB, twice
//! that on its way to RGB). Each `k × k` block of pixels becomes their
//! average — the area filter the JPEG path gets from its scaled IDCT — with
//! `k` the largest that keeps the long side at least the encoder's.
//! Alpha is dropped, as the whole-image path's RGB conversion drops it.

use super::ImageError;
use std::io::Cursor;

/// The PNG shrunk by `k`, or `None` when this path does not apply (not a
/// PNG this path reads whole — interlaced — or not at least twice `side`):
/// the caller then decodes it whole.
pub(super) fn png_scaled(bytes: &[u8], side: u32) -> Option<Result<image::RgbImage, ImageError>> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().ok()?;
    let info = reader.info();
    let (w, h) = (info.width, info.height);
    let k = w.max(h) / side.max(1);
    if info.interlaced || k < 2 {
        return None;
    }
    let channels = reader.output_color_type().0.samples();
    Some(shrink(&mut reader, (w as usize, h as usize), k as usize, channels))
}

/// What a `k`-scaled decode holds at its peak, in bytes (for the decoding budget).
pub(super) fn scaled_bytes(w: u32, h: u32, side: u32) -> Option<u64> {
    let k = w.max(h) / side.max(1);
    (k >= 2).then(|| {
        let (ow, oh) = (u64::from(w.div_ceil(k)), u64::from(h.div_ceil(k)));
        // The image, one row of sums, one decoded row (4 bytes a pixel at most).
        ow * oh * 3 + ow * 3 * 4 + u64::from(w) * 4
    })
}

fn shrink(
    reader: &mut png::Reader<Cursor<&[u8]>>,
    (w, h): (usize, usize),
    k: usize,
    channels: usize,
) -> Result<image::RgbImage, ImageError> {
    let invalid = |e: png::DecodingError| ImageError::Invalid(format!("The image cannot be decoded: {e}."));
    let (ow, oh) = (w.div_ceil(k), h.div_ceil(k));
    let mut out = Vec::with_capacity(ow * oh * 3);
    let mut sums = vec![0u32; ow * 3];
    let mut rows_in_block = 0;
    for y in 0..h {
        let row = reader
            .next_row()
            .map_err(invalid)?
            .ok_or_else(|| ImageError::Invalid("The image cannot be decoded: it ends before its last row.".into()))?;
        for (x, pixel) in row.data().chunks_exact(channels).take(w).enumerate() {
            // Grey (and grey+alpha) is one sample for all three.
            let rgb = if channels >= 3 { [pixel[0], pixel[1], pixel[2]] } else { [pixel[0]; 3] };
            for (c, v) in rgb.into_iter().enumerate() {
                sums[x / k * 3 + c] += u32::from(v);
            }
        }
        rows_in_block += 1;
        if rows_in_block == k || y + 1 == h {
            for (i, sum) in sums.iter_mut().enumerate() {
                let columns = k.min(w - i / 3 * k);
                let count = (columns * rows_in_block) as u32;
                out.push(((*sum + count / 2) / count) as u8);
                *sum = 0;
            }
            rows_in_block = 0;
        }
    }
    image::RgbImage::from_raw(ow as u32, oh as u32, out)
        .ok_or_else(|| ImageError::Invalid("The image cannot be decoded.".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::ImageFormat;

    fn png(img: image::DynamicImage) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn blocks_become_their_average_whatever_the_colour_type() {
        // 9×5 in 2×2 blocks: the last column and row are partial blocks.
        let rgb = image::RgbImage::from_fn(9, 5, |x, y| image::Rgb([(x * 20) as u8, (y * 40) as u8, 200]));
        let shrunk = png_scaled(&png(rgb.into()), 4).unwrap().unwrap();
        assert_eq!(shrunk.dimensions(), (5, 3));
        assert_eq!(shrunk.get_pixel(0, 0).0, [10, 20, 200]);
        assert_eq!(shrunk.get_pixel(4, 2).0, [160, 160, 200], "a 1×1 corner block is itself");
        let grey = image::GrayAlphaImage::from_fn(8, 8, |x, _| image::LumaA([if x < 4 { 0 } else { 200 }, 7]));
        let shrunk = png_scaled(&png(grey.into()), 4).unwrap().unwrap();
        assert_eq!((shrunk.get_pixel(0, 0).0, shrunk.get_pixel(3, 3).0), ([0; 3], [200; 3]));
    }

    #[test]
    fn small_images_and_cut_ones() {
        let img: image::DynamicImage = image::RgbImage::new(30, 30).into();
        assert!(png_scaled(&png(img.clone()), 20).is_none(), "less than twice the side: decoded whole");
        let mut cut = png(image::RgbImage::from_fn(300, 300, |x, y| image::Rgb([x as u8, y as u8, 1])).into());
        cut.truncate(cut.len() / 2);
        assert!(matches!(png_scaled(&cut, 20), Some(Err(ImageError::Invalid(_)))));
    }
}
