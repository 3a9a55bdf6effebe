//! HTML that the site's own code made (highlighted code, SVG plots), as a
//! type the templates print unescaped. Everything else a template prints is
//! a plain string, which askama escapes; a `Markup` is only made from text
//! that went through [`escape`] or from a library that escapes (plotters'
//! SVG backend escapes its text).

use std::fmt;

/// Markup built by this module's code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Markup(String);

impl Markup {
    /// Wraps HTML whose every piece of catalog text has been escaped.
    pub(crate) fn trusted(html: String) -> Markup {
        Markup(html)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Markup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// askama prints a `Markup` as it is (no `|safe` in the templates).
impl askama::filters::HtmlSafe for Markup {}

/// `s` with the five characters that matter in HTML text and attributes
/// replaced by entities, and the characters a reader of code must not miss
/// made visible: control characters as their Unicode pictures (`␀`, `␛`),
/// direction overrides and invisible marks (which can make code read
/// otherwise than it runs) as `<U+202E>`, each in a `ctl` span. Tabs and
/// line ends stay as they are.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            '\0'..='\u{1f}' => {
                let picture = char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}');
                out.push_str(&format!("<span class=\"ctl\" title=\"U+{:04X}\">{picture}</span>", c as u32));
            }
            '\u{7f}' => out.push_str("<span class=\"ctl\" title=\"U+007F\">\u{2421}</span>"),
            c if hidden(c) => out.push_str(&format!("<span class=\"ctl\">&lt;U+{:04X}&gt;</span>", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how text around them is shown while showing
/// nothing themselves: C1 controls, bidirectional controls, zero-width
/// characters, the byte order mark.
fn hidden(c: char) -> bool {
    matches!(c, '\u{80}'..='\u{9f}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape("<script>alert('x')&\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
        assert_eq!(escape("tl.dot(a, b)"), "tl.dot(a, b)");
        assert_eq!(escape("\ta\r\n"), "\ta\r\n");
        assert_eq!(escape("a\0b"), "a<span class=\"ctl\" title=\"U+0000\">\u{2400}</span>b");
        assert!(escape("\u{1b}[31m").contains("\u{241b}</span>[31m"));
        assert_eq!(escape("x\u{202e}y"), "x<span class=\"ctl\">&lt;U+202E&gt;</span>y");
        assert!(escape("\u{feff}").contains("U+FEFF"));
    }
}
