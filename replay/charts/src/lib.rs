//! `migratory-charts`: the TrueType font every PNG chart of Migratory's needs, loaded once
//! per process and registered with plotters as "sans-serif". Shared by the soak's chart
//! (`migratory-bots`) and `probe --png` (`migratory-replay`), so neither links the other.
//!
//! The font is `MIGRATORY_FONT`, else DejaVu Sans where Debian's `fonts-dejavu-core` (and
//! other distributions) put it.

use plotters::style::FontStyle;

/// Where Debian and other distributions put DejaVu Sans.
const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// No font could be loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no TrueType font for the chart: set MIGRATORY_FONT, or install Debian's fonts-dejavu-core")]
pub struct NoFont;

/// Registers the font as "sans-serif", once per process.
pub fn load_font() -> Result<(), NoFont> {
    static LOADED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *LOADED.get_or_init(|| {
        let paths = std::env::var("MIGRATORY_FONT")
            .ok()
            .into_iter()
            .chain(FONT_CANDIDATES.iter().map(|s| s.to_string()));
        for path in paths {
            if let Ok(bytes) = std::fs::read(&path) {
                // plotters keeps the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    });
    if ok {
        Ok(())
    } else {
        Err(NoFont)
    }
}
