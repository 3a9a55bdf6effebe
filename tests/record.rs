//! Candidates stored before the record was typed (tests/fixtures/record-v1.sqlite,
//! written by kidiom at 727025a): every field reads through the typed record,
//! and `kidiom review` prints what that version printed (tests/fixtures/record-v1/).

use kidiom_patterns::record::{Gate, GateStatus, Origin, SearchOrigin, StoredEvidence, VerdictKind};
use kidiom_patterns::{Candidate, CandidateStatus, Catalog};

use crate::project::repo;
use crate::util::Env;

/// A copy of the fixture catalog (opening may migrate it; the fixture stays as written).
fn fixture(env: &Env) -> std::path::PathBuf {
    let db = env.db();
    std::fs::copy(repo().join("tests/fixtures/record-v1.sqlite"), &db).expect("copy fixture");
    db
}

fn by_id(cands: &[Candidate], prefix: &str) -> Candidate {
    let found: Vec<&Candidate> = cands.iter().filter(|c| c.id.starts_with(prefix)).collect();
    assert_eq!(found.len(), 1, "{prefix}");
    found[0].clone()
}

#[test]
fn every_field_of_an_old_record_reads_typed() {
    let env = Env::new();
    let cat = Catalog::open(&fixture(&env)).expect("catalog");
    let cands = cat.candidates(None).expect("candidates");
    assert_eq!(cands.len(), 5);
    for c in &cands {
        let hash = &c.id[c.id.len() - 8..];
        assert_eq!(kidiom_patterns::record::candidate_id(&c.pattern_id, &c.path, &c.diff), c.id, "one id function");
        assert_eq!(hash.len(), 8);
    }

    // plain apply, rejected at correctness
    let plain = by_id(&cands, "py-keyword-tl-dot-input-precision@kernels/kda/prefill.py#bbabf7dc");
    assert_eq!(plain.status, CandidateStatus::Rejected);
    let Origin::Pattern(p) = &plain.provenance.origin else { panic!("{:?}", plain.provenance) };
    assert_eq!(
        (p.pattern.as_str(), p.kind.as_str(), p.category.as_str()),
        (plain.pattern_id.as_str(), "usage", "precision")
    );
    assert_eq!(
        (p.title.as_str(), p.value.as_deref(), p.score),
        ("tl.dot with input_precision", Some("\"tf32x3\""), 1.5)
    );
    assert_eq!(p.mechanism.as_deref(), Some("fp32 operands on tensor cores: TF32 unless ieee"));
    assert_eq!((p.before.as_str(), p.after.as_str()), ("tl.dot($A, $B)", "tl.dot($A, $B, input_precision=$V)"));
    assert_eq!((p.support[0].corpus.as_str(), p.support[0].occurrences, p.support[0].opportunities), ("ours", 3, 7));
    assert_eq!((p.examples[0].path.as_str(), p.examples[0].line), ("kernels/kda/decode.py", 12));
    assert_eq!(p.commits[0].summary, "kda: ieee dots");
    assert!(plain.provenance.search.is_none());
    let e = plain.evidence.evidence().expect("the validator's record");
    assert_eq!((e.verdict.kind, e.verdict.gate), (VerdictKind::Rejected, Some(Gate::Correctness)));
    assert_eq!(e.verdict.reason, "o: rel_l2 1.2e-01 > 5.0e-03");
    assert_eq!(e.gates.iter().map(|g| g.gate).collect::<Vec<_>>(), [Gate::Syntax, Gate::Static, Gate::Correctness]);
    let corr = e.gate(Gate::Correctness).expect("correctness");
    assert_eq!((corr.status, corr.log.as_deref()), (GateStatus::Failed, Some("line one\nline two")));
    assert_eq!(
        (e.kernel.as_deref(), e.seeds.as_slice(), e.started_at),
        (Some("kda_prefill"), &[0, 1, 2][..], 1_764_633_600)
    );
    assert!(e.prediction.is_none());

    // the per-site precision search, needs-gpu, with a prediction
    let site = by_id(&cands, "py-keyword-tl-dot-input-precision@kernels/kda/prefill.py#ead914c5");
    let Some(SearchOrigin::Sites(s)) = &site.provenance.search else { panic!("{:?}", site.provenance.search) };
    assert_eq!(
        (s.point, s.roles.as_slice(), s.assignment.as_str()),
        (Some(1), &["front".to_string(), "chosen".into()][..], "1: \"ieee\"")
    );
    assert_eq!(
        (s.summary.values.as_slice(), s.summary.lengths.as_slice()),
        (&["\"ieee\"".to_string()][..], &[64, 256][..])
    );
    assert_eq!((s.summary.sites.len(), s.summary.sites[0].line, s.summary.points.len()), (2, 103, 3));
    assert_eq!(s.summary.points[1].figures.map(|f| f.instructions), Some(1100));
    assert!(s.summary.points[2].is("all-sites"));
    assert_eq!(s.summary.rest["kernel"], "kda_prefill", "the figures no renderer reads, kept as written");
    let e = site.evidence.evidence().expect("record");
    assert_eq!(e.verdict.kind, VerdictKind::NeedsGpu);
    assert_eq!(e.verdict.flags, ["speed was not measured on a CPU"]);
    let pred = e.prediction.as_ref().expect("prediction");
    assert_eq!((pred.speedup, pred.bound.name(), pred.reread_bytes), (1.2, "memory", (4096, 0)));
    assert_eq!(e.gate(Gate::Speed).map(|g| g.status), Some(GateStatus::Skipped));

    // the memory-roles placement, not validated
    let roles = by_id(&cands, "py-keyword-tl-load-eviction-policy@");
    let Some(SearchOrigin::MemoryRoles(r)) = &roles.provenance.search else { panic!("{:?}", roles.provenance.search) };
    assert_eq!((r.assignment.as_str(), r.all_sites, r.roles.as_slice()), ("by role", 9, &["chosen".to_string()][..]));
    assert_eq!((r.sites[0].line, r.sites[0].base.as_str(), r.sites[0].role.as_str()), (60, "h0", "reused"));
    assert_eq!(roles.evidence, StoredEvidence::Empty);

    // a host target accepted by the CPU speed gate, placed by Ray
    let host = by_id(&cands, "cpp-gil-release-around-copy@");
    assert_eq!(host.status, CandidateStatus::Passed);
    let e = host.evidence.evidence().expect("record");
    assert!(e.verdict.is_accepted());
    let speed = e.gate(Gate::Speed).expect("speed");
    assert_eq!(speed.placements[0].node.as_deref(), Some("node-1 (10.0.0.2)"));
    assert_eq!(e.speed_headline().as_deref(), Some("gap 48.1% -> 0.9% (noise 2.0%)"));
    // its gate figures read typed too
    let figures = speed.speed_figures().expect("speed figures");
    assert_eq!((figures.metric(), figures.noise_floor()), (Some("scheduler-throughput"), Some(0.02)));
    let (before, after) = speed.speed_sides();
    assert_eq!((before.and_then(|b| b.number("gap")), after.and_then(|a| a.number("gap"))), (Some(0.481), Some(0.009)));

    // a manual patch, with evidence no version of kidiom wrote
    let manual = by_id(&cands, "manual@");
    let Origin::Manual(m) = &manual.provenance.origin else { panic!("{:?}", manual.provenance) };
    assert_eq!((m.category.as_deref(), m.title.as_str()), (Some("precision"), "manual edit"));
    let StoredEvidence::Unreadable { raw, verdict, .. } = &manual.evidence else { panic!("{:?}", manual.evidence) };
    assert_eq!((raw["note"].as_str(), verdict), (Some("written by hand"), &None));
}

#[test]
fn review_prints_an_old_record_as_it_did() {
    let env = Env::new();
    let db = fixture(&env);
    let dbs = db.to_str().expect("utf8");
    let golden = |name: &str| std::fs::read_to_string(repo().join("tests/fixtures/record-v1").join(name)).expect(name);
    let shown = |args: &[&str]| {
        let out = env.run(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf8")
    };
    assert_eq!(shown(&["review", "--db", dbs]), golden("review.txt"));
    // every field in full: the noise floor, the bound, the site search's roles
    assert_eq!(shown(&["review", "--wide", "--db", dbs]), golden("review-wide.txt"));
    assert_eq!(shown(&["review", "--db", dbs, "--json"]), golden("review.json"));
    let mut ids: Vec<String> =
        Catalog::open(&db).expect("catalog").candidates(None).expect("list").into_iter().map(|c| c.id).collect();
    ids.sort();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(shown(&["review", id, "--db", dbs]), golden(&format!("show-{}.txt", i + 1)), "{id}");
        assert_eq!(shown(&["review", id, "--db", dbs, "--json"]), golden(&format!("show-{}.json", i + 1)), "{id}");
    }
}
