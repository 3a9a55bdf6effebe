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
/// replaced by entities.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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
    }
}
