//! JUnit XML for `check --junit FILE` and `sim --junit FILE`: the report CI systems already
//! show (one test case per recording, or per failing seed), so a pipeline displays a
//! determinism failure with its tick and seed without parsing our text.

use std::fmt::Write as _;

/// One test case: its name, how long it took, and its failure message if it failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    pub seconds: f64,
    pub failure: Option<String>,
}

/// The document for one suite of `cases`.
pub fn document(suite: &str, cases: &[Case]) -> String {
    let failures = cases.iter().filter(|c| c.failure.is_some()).count();
    let seconds: f64 = cases.iter().map(|c| c.seconds).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites tests=\"{}\" failures=\"{failures}\" time=\"{seconds:.3}\">",
        cases.len()
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" time=\"{seconds:.3}\">",
        escape(suite),
        cases.len()
    );
    for c in cases {
        let _ = write!(
            x,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
            escape(suite),
            escape(&c.name),
            c.seconds
        );
        match &c.failure {
            None => x.push_str("/>\n"),
            Some(m) => {
                let first = m.lines().next().unwrap_or("");
                let _ = write!(
                    x,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                    escape(first),
                    escape(m)
                );
            }
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

/// Text as XML character data or an attribute value; characters XML 1.0 cannot hold
/// become U+FFFD.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_counts_its_failures_and_escapes_what_it_quotes() {
        let x = document(
            "sim <seed 7>",
            &[
                Case {
                    name: "case 1".into(),
                    seconds: 0.5,
                    failure: None,
                },
                Case {
                    name: "case \"2\"".into(),
                    seconds: 0.25,
                    failure: Some("shards at tick 9: roots differ & more\nsecond line\u{1}".into()),
                },
            ],
        );
        assert!(x.starts_with("<?xml version=\"1.0\""), "{x}");
        assert!(
            x.contains("<testsuite name=\"sim &lt;seed 7&gt;\" tests=\"2\" failures=\"1\" time=\"0.750\">"),
            "{x}"
        );
        assert!(x.contains("name=\"case &quot;2&quot;\""), "{x}");
        assert!(
            x.contains("message=\"shards at tick 9: roots differ &amp; more\""),
            "{x}"
        );
        assert!(x.contains("second line\u{fffd}</failure>"), "{x}");
        assert_eq!(x.matches("<testcase ").count(), 2);
    }
}
