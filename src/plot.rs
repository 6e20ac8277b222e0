//! PNG figures drawn with [plotters](https://docs.rs/plotters): the attention heat maps and
//! decay curves (`ctxprune attention`) and the probe's scatter plot (`ctxprune probe`).
//!
//! Text is drawn with DejaVu Sans (assets/fonts, its licence beside it), registered with
//! plotters' `ab_glyph` backend under the family name `"sans-serif"` on first use, so
//! nothing depends on the system's fonts. Pixels are drawn into an RGB buffer and encoded
//! with the `png` crate.

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// The font's bytes.
static FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

/// Registers the font once.
fn font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the built-in font DejaVuSans.ttf did not parse".to_string())
    })
    .clone()
    .map_err(|msg| Error::invalid("font", msg))
}

/// The drawing area `draw` paints, `width × height` pixels on white, written to `path` as
/// an RGB PNG. A drawing error is reported against `path`.
pub fn png<F>(path: &Path, width: u32, height: u32, draw: F) -> Result<()>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> std::result::Result<(), Box<dyn std::error::Error>>,
{
    if width == 0 || height == 0 {
        return Err(Error::invalid(
            "plot",
            format!("{}: an empty {width}×{height} image", path.display()),
        ));
    }
    font()?;
    let bad = |e: &dyn std::fmt::Display| Error::Format {
        path: path.to_path_buf(),
        msg: format!("drawing failed: {e}"),
    };
    let mut buf = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| bad(&e))?;
        draw(&root).map_err(|e| bad(&e))?;
        root.present().map_err(|e| bad(&e))?;
    }
    let file = std::fs::File::create(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let io = |e: png::EncodingError| Error::Format {
        path: path.to_path_buf(),
        msg: format!("PNG encoding failed: {e}"),
    };
    let mut w = enc.write_header().map_err(io)?;
    w.write_image_data(&buf).map_err(io)?;
    w.finish().map_err(io)
}
