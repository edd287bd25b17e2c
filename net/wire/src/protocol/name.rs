//! Which player names the server accepts in HELLO: 1 to `NAME_BYTES_MAX` bytes of UTF-8
//! with nothing a name display would not show as what it is. Refused: control characters
//! (Unicode general category Cc: U+0000-U+001F, U+007F-U+009F), the line and paragraph
//! separators (Zl U+2028, Zp U+2029), and format characters (Cf: zero-width spaces and
//! joiners, bidirectional overrides and isolates, the byte-order mark, ...), which would
//! let a name break a line, read backwards or hide its letters. Everything else, spaces,
//! accents and emoji included, is accepted.
//!
//! The kernel's own rule (`migratory_kernel::name_is_valid`: length and Cc) is looser and
//! stays as it is, since recorded sessions replay under it; every name this accepts, the
//! kernel accepts too.

/// Unicode general category Cf (format characters), as of Unicode 15.1, as inclusive ranges.
const FORMAT_CHARACTERS: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` may stand in a name.
fn shows_as_itself(c: char) -> bool {
    let u = u32::from(c);
    !c.is_control()
        && c != '\u{2028}'
        && c != '\u{2029}'
        && !FORMAT_CHARACTERS.iter().any(|&(a, b)| (a..=b).contains(&u))
}

/// Whether the server accepts `name` in HELLO.
pub fn name_is_acceptable(name: &str) -> bool {
    migratory_kernel::name_is_valid(name) && name.chars().all(shows_as_itself)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_show_as_themselves_are_accepted() {
        for ok in [
            "ada",
            "Zoë",
            "李雷",
            "a b",
            "no\u{00A0}break",
            "🦆🦆",
            &"x".repeat(32),
        ] {
            assert!(name_is_acceptable(ok), "{ok:?}");
        }
    }

    #[test]
    fn controls_separators_and_format_characters_are_refused() {
        for bad in [
            "",
            "a\u{0000}",
            "a\u{001F}",
            "a\u{007F}",
            "a\u{0085}",
            "a\u{009F}",
            "a\nb",
            "a\u{2028}b",
            "a\u{2029}b",
            "a\u{200B}",
            "a\u{200D}b",
            "\u{202E}evil",
            "a\u{2066}b",
            "\u{FEFF}a",
            "a\u{00AD}b",
            "a\u{E0041}",
            &"x".repeat(33),
        ] {
            assert!(!name_is_acceptable(bad), "{bad:?}");
        }
    }

    #[test]
    fn every_acceptable_name_is_valid_for_the_kernel() {
        for c in (0..0x11_0000u32).filter_map(char::from_u32) {
            let name = format!("a{c}");
            if name_is_acceptable(&name) {
                assert!(migratory_kernel::name_is_valid(&name), "{:04X}", u32::from(c));
            }
        }
    }

    #[test]
    fn the_format_ranges_are_sorted_and_disjoint() {
        for w in FORMAT_CHARACTERS.windows(2) {
            assert!(w[0].0 <= w[0].1 && w[0].1 < w[1].0, "{w:?}");
        }
    }
}
