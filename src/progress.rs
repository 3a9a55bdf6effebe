//! The long phases of `kidiom run` as they go, on stderr (beside output.rs): on a terminal a
//! bar each for the site search and for validation, with the time left
//! (indicatif's estimate from the pace so far); elsewhere the lines of
//! `kidiom validate` and nothing for the search's batches.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use kidiom_patterns::Candidate;
use kidiom_validator::Evidence;

/// The bars of one run; each appears when its phase first reports.
pub(crate) struct Bars {
    terminal: bool,
    search: Mutex<Option<ProgressBar>>,
    validate: Mutex<Option<ProgressBar>>,
}

fn bar(len: usize, prefix: &str, unit: &str) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    let template = format!("{{prefix:>10}} [{{bar:30}}] {{pos}}/{{len}} {unit}, {{eta}} left {{msg}}");
    let style = ProgressStyle::with_template(&template)
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_prefix(prefix.to_string());
    pb
}

impl Bars {
    pub(crate) fn new() -> Bars {
        Bars { terminal: std::io::stderr().is_terminal(), search: Mutex::new(None), validate: Mutex::new(None) }
    }

    /// A line above the bars (a note of the run).
    pub(crate) fn line(&self, m: &str) {
        let shown = [&self.validate, &self.search]
            .iter()
            .find_map(|b| b.lock().ok().and_then(|g| g.as_ref().filter(|pb| !pb.is_finished()).cloned()));
        match shown {
            Some(pb) => pb.println(m),
            None => eprintln!("{m}"),
        }
    }

    /// A site search measured `done` variants of the `planned`.
    pub(crate) fn searching(&self, done: usize, planned: usize) {
        if !self.terminal {
            return;
        }
        let Ok(mut g) = self.search.lock() else { return };
        let pb = g.get_or_insert_with(|| bar(planned, "search", "variants"));
        if pb.is_finished() {
            // the next search of the run
            *pb = bar(planned, "search", "variants");
        }
        pb.set_length(planned as u64);
        pb.set_position(done as u64);
        if done >= planned {
            pb.finish();
        }
    }

    /// Candidate `i` of `n` starts (`None`) or ended with its evidence.
    pub(crate) fn validating(&self, i: usize, n: usize, c: &Candidate, ev: Option<&Evidence>) {
        if !self.terminal {
            return crate::cmd::validate::print_progress(i, n, c, ev);
        }
        let Ok(mut g) = self.validate.lock() else { return };
        let pb = g.get_or_insert_with(|| bar(n, "validate", "candidates"));
        match ev {
            None => pb.set_message(format!("(started {})", c.id)),
            Some(ev) => {
                pb.println(format!("  {}: {} ({:.1}s)", c.id, ev.verdict.describe(), ev.seconds));
                pb.inc(1);
                if pb.position() >= n as u64 {
                    pb.finish_and_clear();
                }
            }
        }
    }
}
