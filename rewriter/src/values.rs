//! Hole values a rewrite may write: which values can be written at any
//! site, and which one a histogram supports. The miner decides with the same
//! functions whether a usage idiom gets a rewrite, so the two never disagree.

use std::collections::BTreeMap;

use kidiom_syntax::Lang;

/// Whether a hole value can be written at any site: a literal, or a name
/// from Triton's language module. Names local to the upstream file
/// (`DOT_PRECISION`) cannot.
pub fn writable_value(lang: Lang, v: &str) -> bool {
    let v = v.trim();
    if v.is_empty() || v.contains('\n') {
        return false;
    }
    let quoted = |q: char| v.len() >= 2 && v.starts_with(q) && v.ends_with(q) && !v[1..v.len() - 1].contains(q);
    let numeric = v.chars().all(|c| c.is_ascii_digit() || c == '.') && v.chars().any(|c| c.is_ascii_digit());
    match lang {
        Lang::Python => {
            quoted('"')
                || quoted('\'')
                || numeric
                || matches!(v, "True" | "False" | "None")
                || (v.starts_with("tl.") && v[3..].chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        }
        Lang::Cuda | Lang::Cpp => numeric,
        Lang::Rust => false,
    }
}

/// The value a histogram supports most ([`supported_value`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supported {
    /// The value, writable at any site.
    pub value: String,
    /// Sites whose value is it, or a name that can hold it.
    pub sites: u64,
    /// All sites of the histogram.
    pub total: u64,
}

/// The writable value ([`writable_value`]) that most sites of a histogram
/// hold, from its bars (value, sites, the literals a name resolves to): a
/// bar supports its value when that is writable, else each writable
/// literal its name can hold. Ties go to the bar seen first.
pub fn supported_value<'a>(
    lang: Lang,
    bars: impl IntoIterator<Item = (&'a str, u64, &'a [String])>,
) -> Option<Supported> {
    let mut order: Vec<&str> = Vec::new();
    let mut sites: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total = 0;
    for (v, n, literals) in bars {
        total += n;
        let held: Vec<&str> = if writable_value(lang, v) {
            vec![v]
        } else {
            let mut ls: Vec<&str> = literals.iter().map(String::as_str).filter(|l| writable_value(lang, l)).collect();
            ls.dedup();
            ls
        };
        for h in held {
            if !sites.contains_key(h) {
                order.push(h);
            }
            *sites.entry(h).or_default() += n;
        }
    }
    let best = order.iter().copied().max_by(|a, b| {
        sites[a].cmp(&sites[b]).then_with(|| {
            // earlier first on a tie: `max_by` keeps the last maximum
            let pos = |x: &str| order.iter().position(|o| *o == x);
            pos(b).cmp(&pos(a))
        })
    })?;
    Some(Supported { value: best.to_string(), sites: sites[best], total })
}

/// One argument spelled two ways that compile to the same kernel: Triton's
/// deprecated `allow_tf32=False` is `input_precision="ieee"` (language/core.py
/// `dot`: with `input_precision` unset, `allow_tf32=False` selects `"ieee"`;
/// only `TRITON_F32_DEFAULT` overrides it, and the harness's sandbox scrubs
/// the environment). `allow_tf32=True` is not listed: it means `"tf32"` only
/// where the target supports TF32.
const SAME_ARGUMENT: &[(&str, &str, &str, &str)] = &[("allow_tf32", "False", "input_precision", "\"ieee\"")];

/// The current spelling of a keyword argument's value, when another
/// spelling means the same (`allow_tf32=False` is `input_precision="ieee"`):
/// `(keyword, value)`. A measurement keyed by what it measures then meets
/// both spellings once.
fn same_argument(lang: Lang, keyword: &str, value: &str) -> Option<(&'static str, &'static str)> {
    if lang != Lang::Python {
        return None;
    }
    SAME_ARGUMENT.iter().find(|(k, v, _, _)| *k == keyword && *v == value.trim()).map(|(_, _, k, v)| (*k, *v))
}

/// `after` with every value of `values` respelled by [`same_argument`]:
/// the template with its `keyword=$V` hole renamed, and the values mapped;
/// `None` when some value has no other spelling (then nothing is respelled).
pub fn respelled(lang: Lang, after: &str, values: &[String]) -> Option<(String, Vec<String>)> {
    let (start, keyword) = keyword_of_hole(after)?;
    let mapped: Vec<(&str, &str)> = values.iter().map(|v| same_argument(lang, keyword, v)).collect::<Option<_>>()?;
    let new_kw = mapped.first()?.0;
    if mapped.iter().any(|(k, _)| *k != new_kw) {
        return None;
    }
    let template = format!("{}{new_kw}{}", &after[..start], &after[start + keyword.len()..]);
    Some((template, mapped.into_iter().map(|(_, v)| v.to_string()).collect()))
}

/// The keyword of the template's one `keyword=$V` hole, and where it starts.
fn keyword_of_hole(after: &str) -> Option<(usize, &str)> {
    let eq = after.find("=$V")?;
    let start = after[..eq].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map(|i| i + 1).unwrap_or(0);
    (start < eq).then(|| (start, &after[start..eq]))
}

#[cfg(test)]
mod spelling_tests {
    use super::*;

    #[test]
    fn allow_tf32_false_is_ieee_and_nothing_else_is_respelled() {
        let after = "tl.dot($$$ARGS, allow_tf32=$V)";
        assert_eq!(
            respelled(Lang::Python, after, &["False".into()]),
            Some(("tl.dot($$$ARGS, input_precision=$V)".into(), vec!["\"ieee\"".into()]))
        );
        // True means tf32 only where the target supports it: not the same kernel everywhere
        assert_eq!(respelled(Lang::Python, after, &["False".into(), "True".into()]), None);
        assert_eq!(respelled(Lang::Python, "tl.dot($$$ARGS, input_precision=$V)", &["\"ieee\"".into()]), None);
        assert_eq!(respelled(Lang::Cuda, after, &["False".into()]), None);
        assert_eq!(respelled(Lang::Python, "tl.dot($$$ARGS)", &["False".into()]), None);
    }
}
