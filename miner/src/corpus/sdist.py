# Downloads the source distribution NAME==VERSION from a package index's simple API into DEST,
# checked against the index's sha256, without building anything: `pip download --no-binary`
# prepares the package's metadata first, which installs its build requirements into an isolated
# environment (SGLang: about 25 s and 25 CPU seconds, for a file of a few MB).
#
#   python sdist.py NAME VERSION DEST INDEX_URL
#
# INDEX_URL empty: $PIP_INDEX_URL, else PyPI. Reads the JSON form of the simple API (PEP 691)
# or its HTML form (PEP 503). Prints the file's name; exit 1 with one line on stderr otherwise
# (the caller then falls back to pip).
import hashlib
import html.parser
import json
import os
import re
import ssl
import sys
import urllib.parse
import urllib.request


def norm(s):
    return re.sub(r"[-_.]+", "-", s).lower()


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.files, self._href = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data):
        if self._href is not None and data.strip():
            url, _, frag = self._href.partition("#")
            hashes = dict([frag.split("=", 1)]) if "=" in frag else {}
            self.files.append({"filename": data.strip(), "url": url, "hashes": hashes})
            self._href = None


def main(name, version, dest, index):
    index = (index or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")
    cafile = os.environ.get("PIP_CERT")
    ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
    page_url = f"{index}/{norm(name)}/"
    req = urllib.request.Request(page_url, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.5"})
    with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
        body, kind = r.read(8 << 20), r.headers.get("Content-Type", "")
    if "json" in kind:
        files = json.loads(body)["files"]
    else:
        p = Links()
        p.feed(body.decode("utf-8", "replace"))
        files = p.files
    want = (norm(name), version)
    for f in files:
        fn = f["filename"]
        ext = next((e for e in (".tar.gz", ".zip") if fn.endswith(e)), None)
        stem = fn[:-len(ext)] if ext else ""
        if not ext or "-" not in stem:
            continue
        n, v = stem.rsplit("-", 1)
        if (norm(n), v) != want:
            continue
        digest = (f.get("hashes") or {}).get("sha256")
        if not digest:
            raise SystemExit(f"{fn}: the index gives no sha256")
        if os.path.basename(fn) != fn or fn.startswith("."):
            raise SystemExit(f"{fn!r}: not a plain file name")
        url = urllib.parse.urljoin(page_url, f["url"])
        os.makedirs(dest, exist_ok=True)
        tmp = os.path.join(dest, f".{fn}.partial")
        h = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=120, context=ctx) as r, open(tmp, "wb") as out:
            while chunk := r.read(1 << 20):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != digest:
            os.unlink(tmp)
            raise SystemExit(f"{fn}: sha256 {h.hexdigest()} is not the index's {digest}")
        os.replace(tmp, os.path.join(dest, fn))
        print(fn)
        return
    raise SystemExit(f"the index lists no source distribution of {name} {version}")


if __name__ == "__main__":
    try:
        main(*sys.argv[1:5])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{type(e).__name__}: {e}")
