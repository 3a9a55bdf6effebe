//! A literal prefilter: only about a quarter of upstream files contain any
//! kernel marker, and a substring search is far cheaper than a parse.

use aho_corasick::AhoCorasick;
use kidiom_syntax::{DeviceMacros, Lang};

use crate::cxx::markers;

/// Decides, from bytes alone, whether a file can contain kernel code.
#[derive(Debug, Clone)]
pub struct Prefilter {
    // `None` when the automaton could not be built: then every file passes.
    python: Option<AhoCorasick>,
    cxx: Option<AhoCorasick>,
    rust: Option<AhoCorasick>,
}

impl Prefilter {
    /// Builds the prefilter; C/C++ markers include the device macros.
    pub fn new(macros: &DeviceMacros) -> Prefilter {
        let build = |pats: Vec<String>| AhoCorasick::new(pats).ok();
        Prefilter {
            python: build(vec!["triton".into()]),
            cxx: build(markers(macros)),
            rust: build(vec!["pyfunction".into(), "pymethods".into()]),
        }
    }

    /// Whether a file of `lang` with these bytes may hold kernel code.
    pub fn may_contain_kernels(&self, lang: Lang, bytes: &[u8]) -> bool {
        let ac = match lang {
            Lang::Python => &self.python,
            Lang::Cuda | Lang::Cpp => &self.cxx,
            Lang::Rust => &self.rust,
        };
        ac.as_ref().is_none_or(|ac| ac.is_match(bytes))
    }
}
