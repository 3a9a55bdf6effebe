//! Same-rewrite patterns stored as one ([`crate::same`]): the kept pattern
//! with the others' support added. A merge keeps the originals
//! (`pattern_merges`): the first pattern write of a transaction restores
//! them ([`MineTx::unmerge`]) so mining one kind again never counts the
//! other's support twice, and its commit merges again
//! ([`MineTx::merge_same_rewrites`]).

use rusqlite::{OptionalExtension, params};

use super::{At, Catalog, MineTx, Reader};
use crate::error::Result;
use crate::model::{Kind, Pattern};
use crate::same::{fold, groups};

impl Reader<'_> {
    /// The pattern a merged-away id was merged into.
    fn merged_into(&self, id: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT into_id FROM pattern_merges WHERE id = ?1 AND into_id <> id", [id], |r| r.get(0))
            .optional()
            .at(self.path)
    }

    /// Every pattern as mined, before merging (of `kind`, or all).
    fn originals(&self, kind: Option<Kind>) -> Result<Vec<Pattern>> {
        let cols = super::query::COLUMNS;
        let sql = format!(
            "SELECT {cols} FROM patterns p WHERE p.id NOT IN (SELECT id FROM pattern_merges) \
             AND (?1 IS NULL OR p.kind = ?1) ORDER BY p.id"
        );
        let k = kind.map(|k| rusqlite::types::Value::Text(k.name().into())).unwrap_or(rusqlite::types::Value::Null);
        let mut out = self.query_patterns(&sql, vec![k])?;
        for p in self.stored_originals()? {
            if kind.is_none_or(|k| k == p.kind) {
                out.push(p);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    fn stored_originals(&self) -> Result<Vec<Pattern>> {
        let mut st = self.conn.prepare_cached("SELECT id, pattern FROM pattern_merges ORDER BY id").at(self.path)?;
        let rows: Vec<(String, String)> =
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).and_then(|r| r.collect()).at(self.path)?;
        rows.into_iter()
            .map(|(id, json)| {
                serde_json::from_str(&json)
                    .map_err(|e| self.corrupt("pattern_merges", &id, format!("bad pattern JSON: {e}")))
            })
            .collect()
    }
}

impl Catalog {
    /// The pattern `id` was merged into (the same rewrite), when it was.
    pub fn merged_into(&self, id: &str) -> Result<Option<String>> {
        self.reader().merged_into(id)
    }

    /// Every pattern as mined, before same-rewrite patterns were merged (of
    /// `kind`, or all): what an exchange file carries, so that the catalog
    /// importing it merges them itself.
    pub fn originals(&self, kind: Option<Kind>) -> Result<Vec<Pattern>> {
        self.reader().originals(kind)
    }
}

impl MineTx<'_> {
    /// [`Catalog::originals`], inside the transaction.
    pub fn originals(&self, kind: Option<Kind>) -> Result<Vec<Pattern>> {
        self.reader().originals(kind)
    }

    /// Puts every merged pattern back as it was mined (once per
    /// transaction, before its first pattern write).
    pub(crate) fn unmerge(&self) -> Result<()> {
        if self.unmerged.replace(true) {
            return Ok(());
        }
        for p in self.reader().stored_originals()? {
            self.write_pattern(&p)?;
        }
        self.tx.execute("DELETE FROM pattern_merges", []).at(self.path)?;
        Ok(())
    }

    /// Merges the patterns that are one rewrite (see the module
    /// documentation); returns how many were merged into another.
    pub fn merge_same_rewrites(&self) -> Result<usize> {
        self.unmerge()?;
        let all = self.reader().originals(None)?;
        let mut merged = 0;
        for (kept, others) in groups(&all) {
            let members: Vec<&Pattern> = others.iter().map(|&i| &all[i]).collect();
            let p = fold(&all[kept], &members);
            let mut st = self
                .tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO pattern_merges (id, into_id, kind, pattern) VALUES (?1, ?2, ?3, ?4)",
                )
                .at(self.path)?;
            for m in std::iter::once(&all[kept]).chain(members.iter().copied()) {
                let json = super::json(self.path, "pattern_merges", &m.id, m)?;
                st.execute(params![m.id, p.id, m.kind.name(), json]).at(self.path)?;
            }
            for m in &members {
                self.delete_pattern(&m.id)?;
            }
            self.write_pattern(&p)?;
            merged += members.len();
        }
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CommitRef;
    use crate::same::tests::p;

    #[test]
    fn merging_adds_support_and_survives_mining_one_kind_again() {
        let mut cat = Catalog::open_in_memory().unwrap();
        let mut wrap = p("wrap", Kind::Usage, "tl.program_id($$$A)", "tl.program_id($$$A).to($V)", &["tl.int64"]);
        wrap.support[0].occurrences = 10;
        let mut e1 =
            p("e1", Kind::Edit, "$$$A = tl.program_id(0), $$$B", "$$$A = tl.program_id(0).to(tl.int64), $$$B", &[]);
        e1.commits = vec![CommitRef { id: "c1".into(), summary: "int64".into(), date: String::new() }];
        {
            let tx = cat.begin().unwrap();
            tx.replace_patterns(Kind::Usage, std::slice::from_ref(&wrap)).unwrap();
            tx.replace_patterns(Kind::Edit, std::slice::from_ref(&e1)).unwrap();
            tx.commit().unwrap();
        }
        let check = |cat: &Catalog| {
            let got = cat.get("wrap").unwrap().unwrap();
            assert_eq!(got.occurrences(), 13, "10 sites in code, 3 from history");
            assert_eq!(got.commits.len(), 1);
            assert!(got.rationale.contains("e1 (edit)"), "{}", got.rationale);
            assert!(cat.get("e1").unwrap().is_none());
            assert_eq!(cat.merged_into("e1").unwrap().as_deref(), Some("wrap"));
            assert_eq!(cat.merged_into("wrap").unwrap(), None);
            assert_eq!(cat.originals(None).unwrap().len(), 2);
            assert_eq!(cat.originals(Some(Kind::Usage)).unwrap()[0].occurrences(), 10);
        };
        check(&cat);
        // usage mined again: the edit's support is still counted once
        {
            let tx = cat.begin().unwrap();
            tx.replace_patterns(Kind::Usage, std::slice::from_ref(&wrap)).unwrap();
            tx.commit().unwrap();
        }
        check(&cat);
        // history mined again without the edit: nothing to merge
        {
            let tx = cat.begin().unwrap();
            tx.replace_patterns(Kind::Edit, &[]).unwrap();
            tx.commit().unwrap();
        }
        assert_eq!(cat.get("wrap").unwrap().unwrap().occurrences(), 10);
        assert_eq!(cat.merged_into("e1").unwrap(), None);
    }
}
