#!/usr/bin/env python3
"""Symptom questions (tests/symptom_questions.toml, plus the production case)
against a real catalog: how many find a pattern of the right idiom family in
the top 3 (usage or edit patterns alike; a real catalog has many of each).

    bench/search-symptoms.py CATALOG.sqlite [--kidiom target/release/kidiom]
"""
import argparse, json, subprocess, sys, tomllib
from pathlib import Path

root = Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser()
ap.add_argument("db")
ap.add_argument("--kidiom", default=str(root / "target/release/kidiom"))
a = ap.parse_args()
qs = tomllib.loads((root / "tests/symptom_questions.toml").read_text())["question"]
qs.append({"ask": "the output drifts at long context when multiplying fp32 matrices",
           "family": ["input-precision", "allow-tf32"]})
found = 0
for q in qs:
    out = subprocess.run([a.kidiom, "catalog", "search", q["ask"], "--db", a.db, "--json", "--limit", "3"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kidiom catalog search failed: {out.stderr.strip()}")
    ids = [p["id"] for p in json.loads(out.stdout)]
    hit = any(f in i for i in ids for f in q["family"])
    found += hit
    print(f"{'ok  ' if hit else 'miss'}  {q['ask'][:72]:<72}  {' '.join(ids)}")
print(f"family Recall@3 = {found}/{len(qs)} ({found / len(qs):.0%})")
