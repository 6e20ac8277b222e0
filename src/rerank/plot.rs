//! A small PNG line chart for `ctxprune eval --plot`: quality against budget, one panel
//! per capacity, one coloured line per method, with a built-in 3x5 pixel font for the
//! labels (no font files).

use super::eval::Cell;
use crate::error::{Error, Result};
use std::path::Path;

const W: usize = 900;
const H: usize = 420;

struct Canvas {
    px: Vec<[u8; 3]>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if (0..W as i64).contains(&x) && (0..H as i64).contains(&y) {
            self.px[y as usize * W + x as usize] = c;
        }
    }
    fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64), c: [u8; 3], thick: i64) {
        let steps = ((x1 - x0).abs().max((y1 - y0).abs()) as i64).max(1);
        for s in 0..=steps {
            let t = s as f64 / steps as f64;
            let (x, y) = (
                (x0 + t * (x1 - x0)).round() as i64,
                (y0 + t * (y1 - y0)).round() as i64,
            );
            for dx in 0..thick {
                for dy in 0..thick {
                    self.set(x + dx, y + dy, c);
                }
            }
        }
    }
    /// Text in the 3x5 font at scale 2; unknown characters are blank.
    fn text(&mut self, x: i64, y: i64, s: &str, c: [u8; 3]) {
        for (k, ch) in s.to_ascii_uppercase().chars().enumerate() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..3 {
                    if bits >> (2 - col) & 1 == 1 {
                        for d in 0..4 {
                            self.set(x + k as i64 * 8 + col * 2 + d % 2, y + row as i64 * 2 + d / 2, c);
                        }
                    }
                }
            }
        }
    }
}

/// 3x5 glyphs, one row per entry, bits left to right.
fn glyph(c: char) -> [u8; 5] {
    match c {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        'A' => [2, 5, 7, 5, 5],
        'B' => [6, 5, 6, 5, 6],
        'C' => [7, 4, 4, 4, 7],
        'D' => [6, 5, 5, 5, 6],
        'E' => [7, 4, 6, 4, 7],
        'F' => [7, 4, 6, 4, 4],
        'G' => [7, 4, 5, 5, 7],
        'H' => [5, 5, 7, 5, 5],
        'I' => [7, 2, 2, 2, 7],
        'J' => [1, 1, 1, 5, 7],
        'K' => [5, 5, 6, 5, 5],
        'L' => [4, 4, 4, 4, 7],
        'M' => [5, 7, 7, 5, 5],
        'N' => [6, 5, 5, 5, 5],
        'O' => [7, 5, 5, 5, 7],
        'P' => [7, 5, 7, 4, 4],
        'Q' => [7, 5, 5, 7, 1],
        'R' => [7, 5, 6, 5, 5],
        'S' => [7, 4, 7, 1, 7],
        'T' => [7, 2, 2, 2, 2],
        'U' => [5, 5, 5, 5, 7],
        'V' => [5, 5, 5, 5, 2],
        'W' => [5, 5, 7, 7, 5],
        'X' => [5, 5, 2, 5, 5],
        'Y' => [5, 5, 2, 2, 2],
        'Z' => [7, 1, 2, 4, 7],
        '-' => [0, 0, 7, 0, 0],
        '.' => [0, 0, 0, 0, 2],
        ':' => [0, 2, 0, 2, 0],
        '=' => [0, 7, 0, 7, 0],
        '(' => [1, 2, 2, 2, 1],
        ')' => [4, 2, 2, 2, 4],
        '@' => [7, 5, 7, 4, 7],
        _ => [0; 5],
    }
}

const COLOURS: [[u8; 3]; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// Draws CE-nCG@k against budget, a panel per capacity, and writes the PNG to `path`
/// (created or truncated) with [`write()`].
pub fn plot(cells: &[Cell], path: &Path) -> Result<()> {
    let png = render(cells)?;
    let mut file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    write(&mut file, path, &png)
}

/// Writes `png` to `file` (opened from `path`, which names it in errors), flushes it and,
/// for a regular file, syncs it to disk: every write error is returned, none is lost when
/// a buffer is dropped.
pub fn write(file: &mut std::fs::File, path: &Path, png: &[u8]) -> Result<()> {
    use std::io::Write;
    let io = |e| Error::io(path, e);
    file.write_all(png).map_err(io)?;
    file.flush().map_err(io)?;
    // fsync is refused by devices and pipes, where there is nothing to sync.
    if file.metadata().map_err(io)?.is_file() {
        file.sync_all().map_err(io)?;
    }
    Ok(())
}

/// The chart of CE-nCG@k against budget, a panel per capacity, as PNG bytes. `cells` must
/// be non-empty with finite CE-nCG@k (errors name `cells`).
pub fn render(cells: &[Cell]) -> Result<Vec<u8>> {
    if cells.is_empty() {
        return Err(Error::Empty("cells".into()));
    }
    if let Some((i, x)) = cells.iter().enumerate().find(|(_, x)| !x.ce_ncg.is_finite()) {
        return Err(Error::invalid(
            format!("cells[{i}]"),
            format!(
                "{} at B = {}, k = {}: CE-nCG@k is {}",
                x.method, x.budget, x.capacity, x.ce_ncg
            ),
        ));
    }
    let mut c = Canvas {
        px: vec![[255; 3]; W * H],
    };
    let mut methods: Vec<&str> = Vec::new();
    let mut budgets: Vec<usize> = Vec::new();
    let mut caps: Vec<usize> = Vec::new();
    for cell in cells {
        if !methods.contains(&cell.method.as_str()) {
            methods.push(&cell.method);
        }
        if !budgets.contains(&cell.budget) {
            budgets.push(cell.budget);
        }
        if !caps.contains(&cell.capacity) {
            caps.push(cell.capacity);
        }
    }
    budgets.sort_unstable();
    let (lo, hi) = cells
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
            (l.min(x.ce_ncg), h.max(x.ce_ncg))
        });
    let (lo, hi) = if hi - lo < 1e-9 {
        (lo - 0.05, hi + 0.05)
    } else {
        (lo - 0.02, hi + 0.02)
    };
    let black = [0, 0, 0];
    c.text(10, 6, "CE-NCG@K VS ORACLE BUDGET B", black);
    let panel_w = 300.0;
    for (p, &k) in caps.iter().enumerate() {
        let (x0, y0, pw, ph) = (60.0 + p as f64 * (panel_w + 40.0), 40.0, panel_w, 320.0);
        c.line((x0, y0), (x0, y0 + ph), black, 1);
        c.line((x0, y0 + ph), (x0 + pw, y0 + ph), black, 1);
        c.text(x0 as i64 + 100, y0 as i64 - 16, &format!("K = {k}"), black);
        c.text(x0 as i64 - 50, y0 as i64, &format!("{hi:.2}"), black);
        c.text(x0 as i64 - 50, (y0 + ph) as i64 - 10, &format!("{lo:.2}"), black);
        let bx = |i: usize| x0 + 15.0 + (pw - 30.0) * i as f64 / (budgets.len().max(2) - 1) as f64;
        let by = |v: f64| y0 + ph - ph * (v - lo) / (hi - lo);
        for (i, b) in budgets.iter().enumerate() {
            c.text(bx(i) as i64 - 8, (y0 + ph) as i64 + 6, &b.to_string(), black);
        }
        for (m, name) in methods.iter().enumerate() {
            let pts: Vec<(f64, f64)> = budgets
                .iter()
                .enumerate()
                .filter_map(|(i, &b)| {
                    cells
                        .iter()
                        .find(|x| x.method == *name && x.budget == b && x.capacity == k)
                        .map(|x| (bx(i), by(x.ce_ncg)))
                })
                .collect();
            for w in pts.windows(2) {
                c.line(w[0], w[1], COLOURS[m % COLOURS.len()], 2);
            }
        }
    }
    for (m, name) in methods.iter().enumerate() {
        let (x, y) = (740, 40 + m as i64 * 16);
        c.line(
            (x as f64, y as f64 + 4.0),
            (x as f64 + 14.0, y as f64 + 4.0),
            COLOURS[m % COLOURS.len()],
            3,
        );
        c.text(x + 20, y, name, black);
    }
    let mut png = Vec::new();
    let mut enc = png::Encoder::new(&mut png, W as u32, H as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let bytes: Vec<u8> = c.px.iter().flatten().copied().collect();
    // finish() writes the closing chunks; its error is kept rather than lost in a drop.
    enc.write_header()
        .and_then(|mut w| {
            w.write_image_data(&bytes)?;
            w.finish()
        })
        .map_err(|e| Error::invalid("plot", format!("encoding PNG: {e}")))?;
    Ok(png)
}
