//! One image as the vendor's multimodal demo prepares it
//! (rknn-llm `examples/multimodal_model_demo/deploy/src/main.cpp`): decode,
//! RGB, pad to a square filled with grey 127.5 (128 as a byte, as OpenCV
//! stores it), bilinear resize to the encoder's input size, uint8 NHWC.
//! Unlike the demo (`cv::imread`), the EXIF orientation is applied: phones
//! store portraits sideways, and a model shown them so reads them wrong.

use super::{budget, content_hash, jpeg_dc, png_rows, ImageError, ImageLimits, Prepared};
use image::{ImageDecoder, ImageFormat, ImageReader};
use std::io::Cursor;

/// The demo's padding, `cv::Scalar(127.5)` saturated to a byte.
const GREY: f32 = 128.0;

/// Decodes `bytes` (JPEG, PNG, WebP, or GIF's first frame) and prepares it
/// for an encoder of `width × height`.
pub fn preprocess(bytes: &[u8], width: u32, height: u32, limits: &ImageLimits) -> Result<Prepared, ImageError> {
    if bytes.len() > limits.max_bytes {
        return Err(ImageError::TooLarge(format!(
            "The image is {} bytes; this server takes at most {} (max_image_bytes).",
            bytes.len(),
            limits.max_bytes
        )));
    }
    let invalid = |e: image::ImageError| ImageError::Invalid(format!("The image cannot be decoded: {e}."));
    let reader =
        ImageReader::new(Cursor::new(bytes)).with_guessed_format().map_err(|e| ImageError::Invalid(e.to_string()))?;
    let reader_format = match reader.format() {
        Some(f @ (ImageFormat::Jpeg | ImageFormat::Png | ImageFormat::WebP | ImageFormat::Gif)) => f,
        Some(other) => {
            return Err(ImageError::Invalid(format!(
                "Images in {other:?} format are not supported: send JPEG, PNG, WebP or GIF."
            )))
        }
        None => return Err(ImageError::Invalid("The data is not a JPEG, PNG, WebP or GIF image.".into())),
    };
    let mut decoder = reader.into_decoder().map_err(invalid)?;
    let (w, h) = decoder.dimensions();
    if u64::from(w) * u64::from(h) > limits.max_pixels {
        return Err(ImageError::TooLarge(format!(
            "The image is {w}×{h} pixels; this server takes at most {} pixels (max_image_pixels).",
            limits.max_pixels
        )));
    }
    if reader_format == ImageFormat::Jpeg && !jpeg_is_whole(bytes) {
        // Decoders fill a cut JPEG's missing blocks with grey and say nothing.
        return Err(ImageError::Invalid(
            "The image cannot be decoded: the JPEG data ends before its end marker.".into(),
        ));
    }
    let side = width.max(height);
    // What the decode allocates at its peak, held in the daemon's budget.
    let whole = decoder.total_bytes().saturating_add(u64::from(w) * u64::from(h) * 3);
    let (peak, png_scaled) = match (reader_format, png_rows::scaled_bytes(w, h, side)) {
        (ImageFormat::Png, Some(scaled)) => (scaled, true),
        (ImageFormat::Jpeg, _) if w.max(h) >= 2 * side => (jpeg_scaled_bytes(w, h, side), false),
        _ => (whole, false),
    };
    let mut held = budget::hold(peak)?;
    let orientation = decoder.orientation().map_err(invalid)?;
    let scaled = if png_scaled {
        png_rows::png_scaled(bytes, side).transpose()?.map(|rgb| (image::DynamicImage::ImageRgb8(rgb), orientation))
    } else if reader_format == ImageFormat::Jpeg && w.max(h) >= 2 * side {
        jpeg_scaled(bytes, (w, h), side)
    } else {
        None
    };
    let (mut decoded, orientation) = match scaled {
        Some(scaled) => scaled,
        None => {
            // A scaled path that did not apply decodes whole: hold that.
            if peak < whole {
                drop(held);
                held = budget::hold(whole)?;
            }
            (image::DynamicImage::from_decoder(decoder).map_err(invalid)?, orientation)
        }
    };
    decoded.apply_orientation(orientation);
    let rgb = decoded.into_rgb8();
    let source = rgb.dimensions();
    if source.0 == 0 || source.1 == 0 {
        return Err(ImageError::Invalid("The image has no pixels.".into()));
    }
    let pixels = pad_and_resize(rgb.as_raw(), source.0 as usize, source.1 as usize, width as usize, height as usize);
    drop(held);
    Ok(Prepared { hash: content_hash(&pixels), pixels, source })
}

/// Whether a JPEG's entropy-coded data reaches its end marker (EOI, `FF D9`):
/// after the first scan's start (SOS, `FF DA`) an `FF` byte is stuffed (`FF
/// 00`) or a restart marker, so `FF D9` there is the end, and a file cut
/// short has none.
fn jpeg_is_whole(bytes: &[u8]) -> bool {
    let marker = |m: [u8; 2]| bytes.windows(2).position(|w| w == m);
    marker([0xFF, 0xDA]).is_some_and(|sos| bytes[sos..].windows(2).any(|w| w == [0xFF, 0xD9]))
}

/// What [`jpeg_scaled`] allocates: the image at the DCT scale chosen, and its
/// RGB copy; at 1/8 also the scan's DC differences, which a decode in parts
/// (`jpeg_dc_scan.rs`) keeps until the planes are made: 2 bytes a block, up to
/// 3 blocks an output pixel (4:4:4).
fn jpeg_scaled_bytes(w: u32, h: u32, side: u32) -> u64 {
    let scale = [8, 4, 2].into_iter().find(|s| w.max(h) / s >= side).unwrap_or(1);
    let pixels = u64::from(w.div_ceil(scale)) * u64::from(h.div_ceil(scale));
    let dc_differences = if scale == 8 { pixels * 3 * 2 } else { 0 };
    pixels * 3 * 2 + dc_differences
}

/// A JPEG at least twice the encoder's side, decoded at the smallest DCT
/// scale (1/2, 1/4, 1/8) whose long side still covers `side`: a
/// 4000×3000 photo for 392×392 decodes at 500×375, without ever making the
/// 12-megapixel image. The scaled IDCT averages each block, so this is also
/// an antialiased first step before the bilinear resize. At 1/8 a baseline
/// JPEG takes `jpeg_dc`, which reads no more than that scale needs; other
/// scales and layouts take jpeg-decoder. `None`: a layout neither takes
/// (CMYK, 16-bit) or a decoding error, which the `image` path then meets
/// and reports in its words.
fn jpeg_scaled(
    bytes: &[u8],
    (w, h): (u32, u32),
    side: u32,
) -> Option<(image::DynamicImage, image::metadata::Orientation)> {
    // At 1/8 only each block's mean is needed (jpeg_dc.rs).
    if w.max(h) / 8 >= side {
        if let Some(dc) = jpeg_dc::decode(bytes) {
            let (w, h) = (dc.width, dc.height);
            let decoded = if dc.grey {
                image::DynamicImage::ImageLuma8(image::GrayImage::from_raw(w, h, dc.pixels)?)
            } else {
                image::DynamicImage::ImageRgb8(image::RgbImage::from_raw(w, h, dc.pixels)?)
            };
            return Some((decoded, orientation(dc.exif.as_deref())));
        }
    }
    let mut decoder = jpeg_decoder::Decoder::new(bytes);
    let request = u16::try_from(side).ok()?;
    decoder.scale(request, request).ok()?;
    let pixels = decoder.decode().ok()?;
    let info = decoder.info()?;
    let (w, h) = (u32::from(info.width), u32::from(info.height));
    let decoded = match info.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => image::DynamicImage::ImageRgb8(image::RgbImage::from_raw(w, h, pixels)?),
        jpeg_decoder::PixelFormat::L8 => image::DynamicImage::ImageLuma8(image::GrayImage::from_raw(w, h, pixels)?),
        jpeg_decoder::PixelFormat::L16 | jpeg_decoder::PixelFormat::CMYK32 => return None,
    };
    Some((decoded, orientation(decoder.exif_data())))
}

fn orientation(exif: Option<&[u8]>) -> image::metadata::Orientation {
    exif.and_then(image::metadata::Orientation::from_exif_chunk).unwrap_or(image::metadata::Orientation::NoTransforms)
}

/// Bilinear resampling of the image centred in a grey square, without
/// building the square: a sample outside the image reads grey. Sample
/// positions follow OpenCV's `INTER_LINEAR` (pixel centres: `(d + 0.5)·s − 0.5`).
fn pad_and_resize(rgb: &[u8], w: usize, h: usize, out_w: usize, out_h: usize) -> Vec<u8> {
    let side = w.max(h);
    let (x0, y0) = ((side - w) / 2, (side - h) / 2);
    let at = |x: usize, y: usize, c: usize| -> f32 {
        if x < x0 || y < y0 || x >= x0 + w || y >= y0 + h {
            GREY
        } else {
            f32::from(rgb[((y - y0) * w + (x - x0)) * 3 + c])
        }
    };
    // For each output column/row: the two source indices and the weight of the second.
    let taps = |out: usize| -> Vec<(usize, usize, f32)> {
        let scale = side as f32 / out as f32;
        (0..out)
            .map(|d| {
                let s = ((d as f32 + 0.5) * scale - 0.5).clamp(0.0, (side - 1) as f32);
                let lo = s.floor() as usize;
                (lo, (lo + 1).min(side - 1), s - lo as f32)
            })
            .collect()
    };
    let (xs, ys) = (taps(out_w), taps(out_h));
    let mut out = Vec::with_capacity(out_w * out_h * 3);
    for &(ya, yb, fy) in &ys {
        for &(xa, xb, fx) in &xs {
            for c in 0..3 {
                let top = at(xa, ya, c) * (1.0 - fx) + at(xb, ya, c) * fx;
                let bottom = at(xa, yb, c) * (1.0 - fx) + at(xb, yb, c) * fx;
                out.push((top * (1.0 - fy) + bottom * fy).round() as u8);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ImageLimits = ImageLimits { max_images: 4, max_bytes: 1 << 20, max_pixels: 1 << 20 };

    fn png(w: u32, h: u32, colour: [u8; 3]) -> Vec<u8> {
        let img = image::RgbImage::from_pixel(w, h, image::Rgb(colour));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn a_wide_image_is_centred_between_grey_bands() {
        let p = preprocess(&png(40, 20, [255, 0, 0]), 10, 10, &LIMITS).unwrap();
        assert_eq!(p.source, (10, 5), "shrunk by 4 as it was decoded (png_rows.rs)");
        assert_eq!(p.pixels.len(), 10 * 10 * 3);
        let px = |x: usize, y: usize| &p.pixels[(y * 10 + x) * 3..(y * 10 + x) * 3 + 3];
        assert_eq!(px(5, 0), &[128, 128, 128], "top band");
        assert_eq!(px(5, 9), &[128, 128, 128], "bottom band");
        assert_eq!(px(5, 5), &[255, 0, 0], "the image");
        assert_eq!(px(0, 5), &[255, 0, 0], "it spans the width");
    }

    /// A 40×20 JPEG, left half red, right half blue, whose EXIF says
    /// "rotate 90° clockwise to display" (orientation 6).
    fn sideways_jpeg() -> Vec<u8> {
        let img = image::RgbImage::from_fn(40, 20, |x, _| image::Rgb(if x < 20 { [255, 0, 0] } else { [0, 0, 255] }));
        let mut jpeg = Cursor::new(Vec::new());
        img.write_to(&mut jpeg, ImageFormat::Jpeg).unwrap();
        let jpeg = jpeg.into_inner();
        // APP1: "Exif\0\0", a big-endian TIFF header, one IFD entry: 0x0112 SHORT 1 = 6.
        let tiff: &[u8] = b"MM\0\x2a\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0";
        let payload = [&b"Exif\0\0"[..], tiff].concat();
        let length = (payload.len() + 2) as u16;
        [&jpeg[..2], &[0xFF, 0xE1], &length.to_be_bytes(), &payload, &jpeg[2..]].concat()
    }

    #[test]
    fn the_exif_orientation_is_applied() {
        // 40 ≥ 2 × 10: the scaled JPEG path.
        upright(preprocess(&sideways_jpeg(), 10, 10, &LIMITS).unwrap(), 10);
        // 40 < 2 × 30: the `image` path.
        upright(preprocess(&sideways_jpeg(), 30, 30, &LIMITS).unwrap(), 30);
    }

    fn upright(p: Prepared, side: usize) {
        assert_eq!(p.source.0 * 2, p.source.1, "displayed upright: half as wide as tall, {:?}", p.source);
        let px = |x: usize, y: usize| &p.pixels[(y * side + x) * 3..(y * side + x) * 3 + 3];
        let near = |got: &[u8], want: [u8; 3]| got.iter().zip(want).all(|(g, w)| g.abs_diff(w) < 40);
        let (mid, quarter) = (side / 2, side / 4);
        // Turned clockwise, the left (red) half is on top; grey bands left and right.
        assert!(near(px(mid, quarter), [255, 0, 0]), "top: {:?}", px(mid, quarter));
        assert!(near(px(mid, side - 1 - quarter), [0, 0, 255]), "bottom: {:?}", px(mid, side - 1 - quarter));
        assert_eq!(px(0, mid), &[128, 128, 128], "left band");
    }

    #[test]
    fn a_large_jpeg_is_decoded_scaled_with_the_same_result() {
        // 800×400: left red, right blue; for 50×50 the scaled path decodes it at 1/8.
        let img =
            image::RgbImage::from_fn(800, 400, |x, _| image::Rgb(if x < 400 { [255, 0, 0] } else { [0, 0, 255] }));
        let mut jpeg = Cursor::new(Vec::new());
        img.write_to(&mut jpeg, ImageFormat::Jpeg).unwrap();
        let scaled = preprocess(jpeg.get_ref(), 50, 50, &LIMITS).unwrap();
        assert!(jpeg_scaled(jpeg.get_ref(), (800, 400), 50).is_some_and(|(d, _)| d.width() == 100), "decoded at 1/8");
        assert_eq!(scaled.source, (100, 50), "the size it was decoded at");
        let px = |p: &Prepared, x: usize, y: usize| p.pixels[(y * 50 + x) * 3..(y * 50 + x) * 3 + 3].to_vec();
        for (x, y, want) in [(10, 25, [255u8, 0, 0]), (40, 25, [0, 0, 255]), (25, 2, [128, 128, 128])] {
            assert!(
                px(&scaled, x, y).iter().zip(want).all(|(g, w)| g.abs_diff(w) < 40),
                "({x},{y}): {:?}",
                px(&scaled, x, y)
            );
        }
    }

    #[test]
    fn same_pixels_same_hash_other_pixels_other_hash() {
        let a = preprocess(&png(8, 8, [1, 2, 3]), 4, 4, &LIMITS).unwrap();
        let b = preprocess(&png(16, 16, [1, 2, 3]), 4, 4, &LIMITS).unwrap();
        let c = preprocess(&png(8, 8, [1, 2, 4]), 4, 4, &LIMITS).unwrap();
        assert_eq!(a.hash, b.hash);
        assert_ne!(a.hash, c.hash);
    }

    #[test]
    fn bounds_and_garbage() {
        let big = ImageLimits { max_pixels: 99, ..LIMITS };
        assert!(matches!(preprocess(&png(10, 10, [0; 3]), 4, 4, &big), Err(ImageError::TooLarge(_))));
        let small = ImageLimits { max_bytes: 10, ..LIMITS };
        assert!(matches!(preprocess(&png(10, 10, [0; 3]), 4, 4, &small), Err(ImageError::TooLarge(_))));
        assert!(matches!(preprocess(b"not an image", 4, 4, &LIMITS), Err(ImageError::Invalid(_))));
        let mut cut = png(10, 10, [0; 3]);
        cut.truncate(cut.len() / 2);
        assert!(matches!(preprocess(&cut, 4, 4, &LIMITS), Err(ImageError::Invalid(_))));
    }
}
